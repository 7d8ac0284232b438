"""payrail-embedder: the command line of Payrail Agent Search."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import click
import psycopg

from . import catalog, database
from .embedders import BACKENDS, Embedder, EmbeddingUnavailable, make_embedder
from .records import read_lines
from .search import SearchError, SearchUnavailable, search_provider_methods


@dataclass
class Settings:
    database_url: str | None
    data_dir: Path | None
    backend: str
    model: str | None
    openai_base_url: str | None
    embedding_timeout: float
    embedding_retries: int

    @cached_property
    def resolved_database_url(self) -> str:
        return database.resolve_database_url(self.database_url, self.data_dir)

    def connect(self, *, autocommit: bool = False) -> psycopg.Connection:
        return database.connect(self.resolved_database_url, autocommit=autocommit)

    def embedder(self) -> Embedder:
        return make_embedder(
            self.backend,
            self.model,
            openai_base_url=self.openai_base_url,
            timeout=self.embedding_timeout,
            max_retries=self.embedding_retries,
        )


def user_errors(function):
    """Turns the failures a user can act on into click errors instead of tracebacks."""

    def wrapper(*args, **kwargs):
        try:
            return function(*args, **kwargs)
        except (EmbeddingUnavailable, catalog.RegistryModelMismatch) as error:
            raise click.ClickException(str(error)) from error
        except psycopg.Error as error:
            raise click.ClickException(f"database: {catalog.error_reason(error)}") from error

    wrapper.__name__ = function.__name__
    wrapper.__doc__ = function.__doc__
    return wrapper


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="payrail-agent-search")
@click.option(
    "--database-url",
    envvar="PAYRAIL_DATABASE_URL",
    show_envvar=True,
    help="PostgreSQL with pgvector. Unset: the embedded PostgreSQL 18 under the data directory.",
)
@click.option(
    "--data-dir",
    envvar="PAYRAIL_DATA_DIR",
    show_envvar=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Where the embedded PostgreSQL keeps its data (default: the user's data directory).",
)
@click.option(
    "--embedder",
    "backend",
    envvar="PAYRAIL_EMBEDDER",
    show_envvar=True,
    type=click.Choice(BACKENDS),
    default="local",
    show_default=True,
    help="Embedding backend: local sentence-transformers, or the OpenAI API (any compatible server).",
)
@click.option(
    "--model",
    envvar="PAYRAIL_EMBEDDING_MODEL",
    show_envvar=True,
    help="Embedding model (default: all-MiniLM-L6-v2 for local, text-embedding-3-small for openai).",
)
@click.option(
    "--openai-base-url",
    envvar="OPENAI_BASE_URL",
    show_envvar=True,
    help="OpenAI-compatible API base URL. The key is read from OPENAI_API_KEY.",
)
@click.option(
    "--embedding-timeout",
    envvar="PAYRAIL_EMBEDDING_TIMEOUT",
    show_envvar=True,
    type=click.FloatRange(min=0.1),
    default=10.0,
    show_default=True,
    help="Seconds to wait for one embedding request.",
)
@click.option(
    "--embedding-retries",
    envvar="PAYRAIL_EMBEDDING_RETRIES",
    show_envvar=True,
    type=click.IntRange(min=0, max=10),
    default=2,
    show_default=True,
    help="Retries of a failed embedding request (429, 5xx, connection errors), with backoff.",
)
@click.pass_context
def cli(ctx, database_url, data_dir, backend, model, openai_base_url, embedding_timeout, embedding_retries):
    """Payrail Agent Search: the registry's embedder and command line.

    Agents ask in plain words and get back at most three provider methods;
    operators import, edit and sync the catalog.
    """
    ctx.obj = Settings(database_url, data_dir, backend, model, openai_base_url, embedding_timeout, embedding_retries)


@cli.group()
def db():
    """Apply the schema, find or stop the database."""


@db.command("apply")
@click.pass_obj
@user_errors
def db_apply(settings: Settings):
    """Apply db/ (schema, rules, search function, roles) to the database.

    Idempotent and safe to rerun: one transaction under an advisory lock.
    """
    files = database.apply_schema(settings.resolved_database_url)
    click.echo(f"applied {len(files)} files from {database.sql_dir()}")


@db.command("url")
@click.pass_obj
def db_url(settings: Settings):
    """Print the database URL, starting the embedded PostgreSQL if it is the one configured.

    Use it with psql: psql "$(payrail-embedder db url)"
    """
    click.echo(settings.resolved_database_url)


@db.command("stop")
@click.pass_obj
def db_stop(settings: Settings):
    """Stop the embedded PostgreSQL (it keeps running between commands)."""
    data_dir = settings.data_dir or database.default_data_dir()
    if database.stop_embedded_server(data_dir):
        click.echo(f"stopped the embedded PostgreSQL under {data_dir}")
    else:
        click.echo(f"no embedded PostgreSQL runs under {data_dir}")


@cli.command("import")
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--skip-invalid", is_flag=True, help="Save the valid lines even when some are refused.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.pass_obj
@user_errors
def import_(settings: Settings, files, skip_invalid, as_json):
    """Upsert records from JSON Lines FILES, by (provider, method).

    Each line: {"provider", "method", "urls", "docsUrl", "guidance", "enabled"}. New or changed
    content is embedded before the rows are saved, in the same transaction. One refused line
    refuses the whole import unless --skip-invalid.
    """
    items = [item for path in files for item in read_lines(path)]
    with settings.connect() as conn:
        report = catalog.import_records(conn, settings.embedder, items, skip_invalid=skip_invalid)
    if as_json:
        click.echo(json.dumps(report.to_json()))
    else:
        for refusal in report.refused:
            click.echo(f"refused {refusal}", err=True)
        outcome = "saved" if report.saved else "nothing saved"
        click.echo(
            f"{report.created} created, {report.updated} updated, {report.unchanged} unchanged, "
            f"{len(report.refused)} refused: {outcome}"
        )
    if report.refused:
        sys.exit(1)


@cli.command("export")
@click.option("-o", "--output", type=click.File("w", encoding="utf-8"), default="-", help="File to write (default: standard output).")
@click.pass_obj
@user_errors
def export(settings: Settings, output):
    """Write every record as JSON Lines, in the format `import` reads (enabled included)."""
    with settings.connect() as conn:
        for line in catalog.export_records(conn):
            output.write(line + "\n")


@cli.command("sync")
@click.option("--dry-run", is_flag=True, help="List the records that would be embedded; change nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON summary.")
@click.pass_obj
@user_errors
def sync(settings: Settings, dry_run, as_json):
    """Embed every record whose vector is missing or stale."""
    with settings.connect() as conn:
        if dry_run:
            pending = [f"{r['provider']} / {r['method']}" for r in catalog.records_to_sync(conn)]
            if as_json:
                click.echo(json.dumps({"would_embed": pending}))
            else:
                click.echo("\n".join(pending + [f"{len(pending)} records would be embedded"]))
            return
        pending = catalog.records_to_sync(conn)
        with click.progressbar(length=len(pending), label="embedding", file=sys.stderr) as bar:
            report = catalog.sync(conn, settings.embedder(), progress=bar.update)
    if as_json:
        click.echo(json.dumps(report.to_json()))
    else:
        click.echo(f"{report.embedded} embedded, {report.changed_meanwhile} changed meanwhile (left for the next sync)")


@cli.command("search")
@click.argument("query")
@click.option("--json", "as_json", is_flag=True, help='Print {"matches": [...]} or {"error", "detail"}.')
@click.pass_obj
def search(settings: Settings, query, as_json):
    """Find at most three provider methods for QUERY, a need in plain words.

    An exact provider or method name is answered by name, without the embedder.
    """
    try:
        try:
            conn = settings.connect(autocommit=True)
        except Exception as error:  # the embedded server or the connection: either way no answer
            raise SearchUnavailable(f"cannot reach the database: {error}") from error
        with conn:
            matches = search_provider_methods(conn, settings.embedder, query)
    except SearchError as error:
        if as_json:
            click.echo(json.dumps(error.to_json()))
        else:
            click.echo(f"{error.code}: {error.detail}", err=True)
        sys.exit(2 if error.code == "invalid_query" else 1)
    if as_json:
        click.echo(json.dumps({"matches": matches}, ensure_ascii=False))
        return
    if not matches:
        click.echo("no enabled provider method matches")
    for number, match in enumerate(matches, start=1):
        click.echo(f"{number}. {match['provider']} / {match['method']}")
        click.echo(f"   docs: {match['docsUrl'] or '-'}")
        for url in match["urls"]:
            click.echo(f"   url:  {url}")
        for line in match["guidance"].splitlines():
            click.echo(f"   {line}")
