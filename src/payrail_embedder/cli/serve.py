"""The servers people and agents use (the MCP server, the backoffice) and the operators' and agents' logins."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import click
import psycopg

from ..base.reports import emit
from ..postgres import logins
from ..settings import Settings
from .common import JSON_OPTION, Failure, log_change

# mcp_server.LOOPBACK and MAX_CONNECTIONS, not imported: the command line loads the server's
# modules only for `mcp`.
LOOPBACK = "127.0.0.1"
MAX_CONNECTIONS = 1000


@click.command("mcp")
@click.option(
    "--http",
    "http_port",
    type=click.IntRange(1, 65535),
    help="Serve streamable HTTP on PORT (path /mcp, and GET /search with its OpenAPI document at /openapi.json) instead of stdio.",
)
@click.option(
    "--host",
    default=LOOPBACK,
    show_default=True,
    help="Address --http listens on. Beyond loopback it needs --token-file; put a TLS reverse proxy in front.",
)
@click.option(
    "--token-file",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar="PAYRAIL_MCP_TOKEN_FILE",
    help="Agents' bearer tokens, one line per agent: NAME TOKEN (mode 600, owned by the server's user). Given, every request needs one, "
    "on loopback too. Read again when it changes: delete a line to revoke.",
)
@click.option(
    "--max-connections",
    default=MAX_CONNECTIONS,
    show_default=True,
    type=click.IntRange(1, 1_000_000),
    help="Connections --http holds at once. Past it, a new one takes the place of the one that waited longest for its request; "
    "when every one is in a request, it is answered 503. The server raises its open-files limit to what they need.",
)
@click.pass_obj
def mcp(settings: Settings, http_port: int | None, host: str, token_file: Path | None, max_connections: int):
    """Serve the search as an MCP server (one tool: search_provider_methods).

    Speaks stdio by default, for an agent host that starts this command; takes the same
    database and embedder settings as every other command. See docs/agents.md, "Over MCP".
    With --http: on loopback it answers without tokens unless given --token-file, and then asks
    every request for one there too; beyond loopback it needs --token-file. Every error answer is
    {"error": CODE, "detail": ...} (on /mcp, a JSON-RPC error's data).
    """
    from ..api import Registry
    from ..mcp_server import serve  # the MCP SDK loads only for this command

    given_http_options = host != LOOPBACK or token_file is not None or max_connections != MAX_CONNECTIONS
    if http_port is None and given_http_options:
        raise click.UsageError("--host, --token-file and --max-connections go with --http PORT; over stdio the agent host starts the server itself")
    # A busy port, a host beyond loopback without tokens, a wrong token file or too few open files
    # for --max-connections: invalid_input, named.
    serve(Registry(settings=settings), http_port, host, token_file, max_connections)


def read_password(password_stdin: bool) -> str:
    """The password from the first line of standard input, or asked for twice on the terminal."""
    if not password_stdin:
        return click.prompt("Password", hide_input=True, confirmation_prompt=True)
    line = sys.stdin.buffer.readline()
    try:
        return line.decode("utf-8").removesuffix("\n").removesuffix("\r")
    except UnicodeDecodeError:
        raise Failure("invalid_input", "the password on standard input is not UTF-8 text") from None


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
    its SCRAM verifier. For an existing role it sets the password and the grants, unless that
    would widen a role: it refuses, saying why, the registry's group roles, an agent's login, a
    role others are members of, and one that could do more than an operator (docs/security.md).
    This is how operators sign in to the backoffice on the embedded default; elsewhere it needs a
    login that may create roles and grant the registry's.
    """
    password = read_password(password_stdin)
    logins.check_login(name, password)  # before the embedded server is started
    started = time.monotonic()
    with settings.connect() as conn:
        created = logins.add_operator(conn, name, password)
        log_change("operator_add", conn, started, login=name, outcome="created" if created else "updated")
    emit(logins.OperatorAdded(name, created), as_json)


@click.group()
def agent():
    """Give an agent a PostgreSQL login that may only search."""


@agent.command("add")
@click.argument("name")
@click.option("--password-stdin", is_flag=True, help="Read the password from the first line of standard input instead of asking for it.")
@click.option("--no-password", is_flag=True, help="No password: for peer or certificate authentication (pg_hba.conf).")
@click.option("--connection-limit", default=20, show_default=True, type=click.IntRange(1, 10_000), help="Connections the login may hold at once.")
@click.option("--statement-timeout", default="2s", show_default=True, help="Longest statement, above 0: a search waiting on a lock or a slow disk ends.")
@click.option(
    "--idle-in-transaction-timeout", default="10s", show_default=True, help="Longest idle time inside a transaction before the session ends, above 0."
)
@JSON_OPTION
@click.pass_obj
def agent_add(settings: Settings, name, password_stdin, no_password, connection_limit, statement_timeout, idle_in_transaction_timeout, as_json):
    """Create the login NAME granted payrail_agent only, with a connection limit and timeouts.

    Prints the URL the login connects with (the server and database this command connected to,
    the embedded default's socket included), never the password. The login can call the search
    functions and read nothing else (docs/security.md); search
    holds its sessions to the timeouts given here, which the registry keeps (payrail.agent_logins:
    the login cannot lift them; run it as the registry's owner). Asks for the password twice (or
    reads it with --password-stdin; --no-password for peer or certificate authentication); the
    server receives only its SCRAM verifier. For an existing role it sets the same, unless that
    would widen a role: it refuses, saying why, the registry's group roles, a role others are
    members of, and one that could read or write more than an agent may by any route.
    """
    if password_stdin and no_password:
        raise click.UsageError("--password-stdin and --no-password: choose one")
    login = logins.AgentLogin(name, None if no_password else read_password(password_stdin), connection_limit, statement_timeout, idle_in_transaction_timeout)
    logins.check_agent(login)  # before the embedded server is started
    started = time.monotonic()
    with settings.connect() as conn:
        try:
            added = logins.add_agent(conn, login)
        except psycopg.errors.InvalidParameterValue as error:
            raise Failure("invalid_input", f"{error.diag.message_primary}; nothing was changed") from None
        log_change("agent_add", conn, started, login=name, outcome="created" if added.created else "updated")
    emit(added, as_json)


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
