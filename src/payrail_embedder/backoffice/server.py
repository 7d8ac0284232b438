"""Serving the backoffice: bind the address, say where it is and how to sign in, run uvicorn."""

from __future__ import annotations

import socket
from urllib.parse import urlsplit

import click
import uvicorn

from ..settings import Settings
from .app import create_app
from .guard import is_loopback, origin_of


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


def serve(settings: Settings, host: str, port: int, idle_timeout: float, public_url: str | None = None) -> None:
    """Serves until interrupted. Refuses to expose the embedded default beyond loopback (or
    behind a proxy): it trusts every connection on its socket, so anyone who reached the page
    could sign in."""
    loopback = is_loopback(host)
    if settings.database_url is None and not (loopback and public_url is None):
        raise click.UsageError(
            "the embedded PostgreSQL trusts every local connection, so serving its backoffice beyond "
            "this machine would let anyone who reaches it sign in; set PAYRAIL_DATABASE_URL to a server "
            "that checks passwords, or serve on 127.0.0.1 without --public-url"
        )
    if public_url is not None and (origin_of(public_url) is None or urlsplit(public_url).path not in ("", "/")):
        raise click.BadParameter(
            f"{public_url!r} is not an origin such as https://registry.example.com", param_hint="--public-url"
        )
    app = create_app(settings, idle_timeout=idle_timeout, bind_host=host, public_url=public_url)
    sock = bind(host, port)
    bound_port = sock.getsockname()[1]
    shown_host = f"[{host}]" if ":" in host else host
    click.echo(f"Payrail backoffice: http://{shown_host}:{bound_port}/")
    if public_url:
        click.echo(f"Browsers reach it at {public_url} (through your reverse proxy); forms from anywhere else are refused.")
    if settings.database_url is None:
        click.echo(
            "Sign in as postgres, with any password: the embedded PostgreSQL trusts connections on its local socket."
        )
    else:
        click.echo("Sign in with a PostgreSQL role granted payrail_operator and payrail_embedder, and its password.")
    if not loopback and public_url is None:
        click.echo(
            f"Warning: serving on {host} over plain HTTP. Passwords and sessions cross the network in clear: "
            "put a reverse proxy with TLS in front (README, Backoffice).",
            err=True,
        )
    # X-Forwarded-Proto and -For are believed from 127.0.0.1 only (uvicorn's default; the
    # FORWARDED_ALLOW_IPS environment variable names a proxy elsewhere).
    config = uvicorn.Config(app, log_level="info", proxy_headers=True)
    uvicorn.Server(config).run(sockets=[sock])
