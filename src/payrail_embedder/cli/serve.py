"""The servers people and agents use (the MCP server, the backoffice) and the operators' logins."""

from __future__ import annotations

import sys
import time

import click

from ..base.reports import emit
from ..postgres import logins
from ..settings import Settings
from .common import JSON_OPTION, Failure, log_change


@click.command("mcp")
@click.option(
    "--http",
    "http_port",
    type=click.IntRange(1, 65535),
    help="Serve streamable HTTP on 127.0.0.1:PORT (path /mcp) instead of stdio.",
)
@click.pass_obj
def mcp(settings: Settings, http_port: int | None):
    """Serve the search as an MCP server (one tool: search_provider_methods).

    Speaks stdio by default, for an agent host that starts this command; takes the same
    database and embedder settings as every other command. See docs/agents.md, "Over MCP".
    """
    from ..api import Registry
    from ..mcp_server import serve  # the MCP SDK loads only for this command

    serve(Registry(settings=settings), http_port)  # a busy port is mcp_server.PortInUse, invalid_input


@click.group()
def operator():
    """Give a person a PostgreSQL login for the backoffice."""


@operator.command("add")
@click.argument("name")
@click.option("--password-stdin", is_flag=True, help="Read the password from the first line of standard input instead of asking for it.")
@JSON_OPTION
@click.pass_obj
def operator_add(settings: Settings, name, password_stdin, as_json):
    """Create the login NAME with a password, granted payrail_operator and payrail_embedder.

    Asks for the password twice (or reads it with --password-stdin); the server receives only
    its SCRAM verifier. For an existing role it sets the password and the grants. This is how
    operators sign in to the backoffice on the embedded default; elsewhere it needs a login that
    may create roles and grant the registry's.
    """
    if password_stdin:
        line = sys.stdin.buffer.readline()
        try:
            password = line.decode("utf-8").removesuffix("\n").removesuffix("\r")
        except UnicodeDecodeError:
            raise Failure("invalid_input", "the password on standard input is not UTF-8 text") from None
    else:
        password = click.prompt("Password", hide_input=True, confirmation_prompt=True)
    logins.check_login(name, password)  # before the embedded server is started
    started = time.monotonic()
    with settings.connect() as conn:
        created = logins.add_operator(conn, name, password)
        log_change("operator_add", conn, started, login=name, outcome="created" if created else "updated")
    emit(logins.OperatorAdded(name, created), as_json)


def positive_option(name: str, default: int, help: str):
    return click.option(name, default=default, show_default=True, type=click.IntRange(min=1), help=help)


@click.command("backoffice")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to serve on. Beyond loopback, put a TLS reverse proxy in front.")
@click.option("--port", default=8470, show_default=True, type=click.IntRange(0, 65535), help="Port to serve on (0: any free port).")
@click.option(
    "--public-url",
    metavar="URL",
    help="Where browsers reach the backoffice through a TLS reverse proxy, e.g. https://registry.example.com: the only origin forms are accepted from.",
)
@positive_option("--session-idle-timeout", 30 * 60, "Seconds after which an idle session ends and its database connection closes.")
@positive_option("--session-max-age", 8 * 3600, "Seconds after sign-in at which a session ends, however busy.")
@positive_option(
    "--session-recheck",
    60,
    "Seconds after which a session's password is checked by PostgreSQL again, before its next request; a changed password ends it.",
)
@positive_option("--max-sessions", 20, "Sessions held at once, each with one database connection (sign-ins under way included).")
@positive_option("--max-sessions-per-role", 5, "Sessions one role may hold at once.")
@positive_option(
    "--session-give-way-after",
    120,
    "Seconds without use after which a session of a role holding --max-sessions-per-role ends to let a new sign-in of that role in (the one idle longest).",
)
@positive_option("--max-upload-mb", 16, "The largest import upload, in MB (1,000,000 bytes); a larger one is refused while it arrives.")
@click.pass_obj
def backoffice(
    settings: Settings,
    host,
    port,
    public_url,
    session_idle_timeout,
    session_max_age,
    session_recheck,
    max_sessions,
    max_sessions_per_role,
    session_give_way_after,
    max_upload_mb,
):
    """Serve the operators' web interface: records, edits, history, Try a query, import and export.

    Operators sign in with a PostgreSQL role granted payrail_operator and payrail_embedder, and
    its password, which PostgreSQL must check; every change is made as that role, through the
    same write path as import. Prints the URL it serves; on the embedded default, operators sign
    in with a login made by `payrail-embedder operator add NAME`.
    """
    from ..backoffice.server import serve  # the web stack loads only for this command
    from ..backoffice.sessions import SessionLimits

    limits = SessionLimits(session_idle_timeout, session_max_age, session_recheck, max_sessions, max_sessions_per_role, session_give_way_after)
    serve(settings, host, port, limits, max_upload_mb * 1_000_000, public_url)
