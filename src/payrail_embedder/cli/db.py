"""`db`: apply the schema; find, inspect, start or stop the database."""

from __future__ import annotations

import logging
import sys

import click

from .. import status as status_module
from ..base import logs, paths
from ..base.reports import emit
from ..base.safe_text import one_line
from ..postgres import connection, deploy, local_server
from ..settings import FiniteRange, Settings
from .common import JSON_OPTION, Failure


@click.group()
def db():
    """Apply the schema; find, inspect, start or stop the database."""


@db.command("apply")
@click.option("--force", is_flag=True, help="Apply every file even when the registry is current, and check every derived row (repairs them, and grants).")
@click.option(
    "--lock-timeout",
    type=FiniteRange(min=0.001),
    default=deploy.LOCK_TIMEOUT_SECONDS,
    show_default=True,
    help="Seconds to wait for each lock before giving way and trying again; keep it under the server's deadlock_timeout.",
)
@click.option("--attempts", type=click.IntRange(min=1), default=deploy.LOCK_ATTEMPTS, show_default=True, help="How often to try for the locks.")
@JSON_OPTION
@click.pass_obj
def db_apply(settings: Settings, force, lock_timeout, attempts, as_json):
    """Apply db/ (schema, upgrade steps, rules, search function, roles) to the database.

    Idempotent, and safe while agents search: a registry that is current is left alone (no lock
    but a search's own); otherwise the change takes its locks up front, in the searches' order, never waits longer than
    --lock-timeout for one, and tries again (--attempts), saying who holds them (on standard error; off a terminal in the log).
    Prints the database (without its password) and whether anything changed.
    """
    result = deploy.apply_schema(
        settings.resolved_database_url,
        force=force,
        lock_timeout=lock_timeout,
        attempts=attempts,
        # Names other sessions' roles and applications: one line.
        say=lambda message: logs.tell(one_line(message), "db_apply_retry", {"detail": one_line(message)}, logging.WARNING),
        prepared_statements=settings.prepared_statements,
    )
    emit(result, as_json)


@db.command("roles")
@JSON_OPTION
@click.pass_obj
def db_roles(settings: Settings, as_json):
    """Create the registry's group roles (without login) where they are missing; nothing else.

    Roles belong to the server, not to a database, so a dump holds none: run this on a new server
    before restoring a dump into it (docs/operations.md). Idempotent; creating a role needs
    CREATEROLE. `db apply` creates them too.
    """
    report = deploy.create_roles(settings.resolved_database_url)
    logs.log(
        "db_roles",
        database=connection.display_url(settings.resolved_database_url),
        created=",".join(report.created) or None,
        existing=",".join(report.existing) or None,
    )
    emit(report, as_json)


@db.command("url")
@click.pass_obj
def db_url(settings: Settings):
    """Print the database URL, starting the embedded PostgreSQL if it is the one configured.

    Use it with psql: psql "$(payrail-embedder db url)"
    """
    click.echo(settings.resolved_database_url)


@db.command("status")
@JSON_OPTION
@click.pass_obj
def db_status(settings: Settings, as_json):
    """Say which database is configured and what it holds: versions (product, schema, PostgreSQL,
    pgvector), whether `db apply` is due, who besides the owners can create objects in a schema on
    the registry's search path (db apply refuses then), whether the embedded server runs, and why not.

    Never starts the embedded PostgreSQL. Exits 1 when the configured database cannot be reached.
    """
    report = status_module.status(settings.database_url, settings.data_dir)
    emit(report, as_json)
    if report.error is not None:
        sys.exit(1)


@db.command("start")
@click.pass_obj
def db_start(settings: Settings):
    """Start the embedded PostgreSQL, or say that it runs and where.

    Every command starts it when it is stopped, and so do the backoffice and the MCP server when
    they start; a backoffice or MCP server already running does not restart it after `db stop`:
    this does.
    """
    if settings.database_url:
        raise Failure("invalid_input", "PAYRAIL_DATABASE_URL (--database-url) is set: db start starts the embedded default only")
    url = settings.resolved_database_url  # starts it, saying so on standard error
    data_dir = settings.data_dir or paths.default_data_dir()
    click.echo(f"the embedded PostgreSQL {local_server.EMBEDDED_POSTGRES_VERSION} runs under {data_dir}: {url}")


@db.command("stop")
@click.pass_obj
def db_stop(settings: Settings):
    """Stop the embedded PostgreSQL (it keeps running between commands).

    A running backoffice or MCP server then answers that it is stopped until `db start`.
    """
    data_dir = settings.data_dir or paths.default_data_dir()
    if local_server.stop_embedded_server(data_dir):
        click.echo(f"stopped the embedded PostgreSQL under {data_dir}")
    else:
        click.echo(f"no embedded PostgreSQL runs under {data_dir}")
