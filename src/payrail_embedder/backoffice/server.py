"""Serving the backoffice: bind the address, say where it is and how to sign in, run uvicorn."""

from __future__ import annotations

import socket
from urllib.parse import urlsplit

import click
import psycopg
import uvicorn

from ..base import logs
from ..base.errors import reason
from ..base.http_door import Door, http_response
from ..base.network import TooFewOpenFiles, allow_open_files
from ..postgres import connection
from ..settings import Settings
from .app import create_app
from .guard import is_loopback, origin_of
from .sessions import SessionLimits

# Connections the backoffice holds at once (base/http_door.py): past them a new one takes the
# place of the one that waited longest for its request, and is answered 503 when every one is in a
# request. What unauthenticated clients can hold of the backoffice's memory: each a request line
# and headers (h11 takes 16 kB at most) and at most 64 kB of a body not yet read.
MAX_CONNECTIONS = 200
BUSY = f"The backoffice is serving as many requests as it may ({MAX_CONNECTIONS}); try again in a moment.".encode()


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named: asyncio turns Nagle's algorithm off (TCP_NODELAY) only on sockets that say
    # so, and with it on, every response on a kept-alive connection waited 40 ms for an ACK.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as error:
        sock.close()
        raise click.ClickException(f"cannot serve on {host}:{port}: {error.strerror}") from None
    return sock


def serve(settings: Settings, host: str, port: int, limits: SessionLimits, upload_limit: int, public_url: str | None = None) -> None:
    """Serves until interrupted. Refuses to expose the embedded default beyond loopback (or
    behind a proxy): it is this machine's own database, not a server for a network."""
    if settings.database_url:
        # Refused at once: it could only ever answer that sign-ins fail.
        try:
            psycopg.conninfo.conninfo_to_dict(settings.database_url)
        except psycopg.ProgrammingError as error:
            raise click.ClickException(f"cannot read the database URL (PAYRAIL_DATABASE_URL, --database-url): {reason(error)}") from None
    loopback = is_loopback(host)
    if settings.database_url is None and not (loopback and public_url is None):
        raise click.ClickException(
            "the embedded PostgreSQL is this machine's own database, and its superuser signs in without a "
            "password on its socket; to serve the backoffice beyond this machine, set PAYRAIL_DATABASE_URL to a "
            "production server, or serve on 127.0.0.1 without --public-url"
        )
    if public_url is not None and (origin_of(public_url) is None or urlsplit(public_url).path not in ("", "/")):
        raise click.BadParameter(f"{public_url!r} is not an origin such as https://registry.example.com", param_hint="--public-url")
    door = Door(MAX_CONNECTIONS, http_response(503, "Service Unavailable", "text/plain; charset=utf-8", BUSY))
    try:
        allow_open_files(door.open_files, "the backoffice")
    except TooFewOpenFiles as error:
        raise click.ClickException(error.detail) from None
    app = create_app(settings, limits=limits, upload_limit=upload_limit, bind_host=host, public_url=public_url)
    sock = bind(host, port)
    bound_port = sock.getsockname()[1]
    shown_host = f"[{host}]" if ":" in host else host
    click.echo(f"Payrail backoffice: http://{shown_host}:{bound_port}/")
    logs.log("backoffice_start", url=f"http://{shown_host}:{bound_port}/", database=connection.display_url(settings.resolved_database_url))
    if public_url:
        click.echo(f"Browsers reach it at {public_url} (through your reverse proxy); forms from anywhere else are refused.")
    if settings.database_url is None:
        click.echo(
            "Sign in with a login made by `payrail-embedder operator add NAME` (postgres, which the command line uses without a password, cannot sign in here)."
        )
    else:
        click.echo("Sign in with a PostgreSQL role granted payrail_operator and payrail_embedder, and its password.")
    if not loopback and public_url is None:
        click.echo(
            f"Warning: serving on {host} over plain HTTP. Passwords and sessions cross the network in clear: "
            'put a reverse proxy with TLS in front (docs/operators.md, "The backoffice in production").',
            err=True,
        )
    # X-Forwarded-Proto and -For are believed from 127.0.0.1 only (uvicorn's default; the
    # FORWARDED_ALLOW_IPS environment variable names a proxy elsewhere). uvicorn's lines go through
    # the package's log handler (door.config sets log_config=None), one line of stable keys each.
    config = door.config(app, log_level="info", proxy_headers=True)
    uvicorn.Server(config).run(sockets=[sock])
