"""Serving the backoffice: bind the address, say where it is and how to sign in, run uvicorn."""

from __future__ import annotations

import ipaddress
import socket

import click
import uvicorn

from ..settings import Settings
from .app import create_app


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as error:
        sock.close()
        raise click.ClickException(f"cannot serve on {host}:{port}: {error.strerror}") from None
    return sock


def serve(settings: Settings, host: str, port: int, idle_timeout: float) -> None:
    """Serves until interrupted. Refuses to expose the embedded default beyond loopback: it
    trusts every connection on its socket, so anyone who reached the page could sign in."""
    loopback = is_loopback(host)
    if settings.database_url is None and not loopback:
        raise click.UsageError(
            "the embedded PostgreSQL trusts every local connection, so serving its backoffice on "
            f"{host} would let anyone who reaches it sign in; set PAYRAIL_DATABASE_URL to a server "
            "that checks passwords, or serve on 127.0.0.1"
        )
    app = create_app(settings, idle_timeout=idle_timeout, loopback_only=loopback)
    sock = bind(host, port)
    bound_port = sock.getsockname()[1]
    shown_host = f"[{host}]" if ":" in host else host
    click.echo(f"Payrail backoffice: http://{shown_host}:{bound_port}/")
    if settings.database_url is None:
        click.echo(
            "Sign in as postgres, with any password: the embedded PostgreSQL trusts connections on its local socket."
        )
    else:
        click.echo("Sign in with a PostgreSQL role granted payrail_operator and payrail_embedder, and its password.")
    if not loopback:
        click.echo(
            f"Warning: serving on {host} over plain HTTP. Passwords and sessions cross the network in clear: "
            "put a reverse proxy with TLS in front (README, Backoffice).",
            err=True,
        )
    # X-Forwarded-Proto and -For are believed from 127.0.0.1 only (uvicorn's default; the
    # FORWARDED_ALLOW_IPS environment variable names a proxy elsewhere).
    config = uvicorn.Config(app, log_level="info", proxy_headers=True)
    uvicorn.Server(config).run(sockets=[sock])
