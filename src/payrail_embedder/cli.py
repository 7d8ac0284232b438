"""payrail-embedder: the command line of Payrail Agent Search."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path

import click
import psycopg

from . import catalog, database, evaluation, model_switch
from . import history as history_module
from . import preview as preview_module
from .embedders import BACKENDS, OPENAI_MAX_BATCH, Embedder, EmbeddingUnavailable, make_embedder
from .mcp_server import mcp_command
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


BATCH_SIZE_OPTION = click.option(
    "--batch-size",
    type=click.IntRange(min=1, max=OPENAI_MAX_BATCH),
    help="Records per embedding request and per commit (default: the backend's batch, 2,048 for openai, 64 for local).",
)


def echo_pending(report) -> None:
    """The records an interrupted run left without a vector, and why, on standard error."""
    for name in report.pending:
        click.echo(f"pending: {name}", err=True)
    if report.error:
        click.echo(f"Error: {report.error}", err=True)


@cli.command("sync")
@click.option("--dry-run", is_flag=True, help="List the records that would be embedded; change nothing.")
@BATCH_SIZE_OPTION
@click.option("--json", "as_json", is_flag=True, help="Print a JSON summary.")
@click.pass_obj
@user_errors
def sync(settings: Settings, dry_run, batch_size, as_json):
    """Embed every record whose vector is missing or stale.

    Each batch commits on its own, and a vector is written only while its record still holds
    the content it was made from, so an interrupted run keeps its work and a rerun finishes
    it. Exits 1 and lists the records left pending when the embedder fails.
    """
    with settings.connect(autocommit=True) as conn:
        if dry_run:
            pending = [catalog.record_name(r) for r in catalog.records_to_sync(conn)]
            if as_json:
                click.echo(json.dumps({"would_embed": pending}))
            else:
                click.echo("\n".join(pending + [f"{len(pending)} records would be embedded"]))
            return
        pending = catalog.records_to_sync(conn)
        with click.progressbar(length=len(pending), label="embedding", file=sys.stderr) as bar:
            report = catalog.sync(conn, settings.embedder(), batch_size=batch_size, progress=bar.update)
    if as_json:
        click.echo(json.dumps(report.to_json(), ensure_ascii=False))
    else:
        echo_pending(report)
        click.echo(
            f"{report.embedded} embedded, {report.changed_meanwhile} changed meanwhile, {len(report.pending)} pending"
        )
    if report.pending:
        sys.exit(1)


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
    echo_matches(matches, as_json)


def echo_matches(matches: list[dict], as_json: bool) -> None:
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


@cli.command("eval")
@click.argument("queries_file", metavar="QUERIES.jsonl", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help='Print {"queries", "metrics", "misses"}.')
@click.pass_obj
@user_errors
def eval_(settings: Settings, queries_file, as_json):
    """Measure retrieval quality: run labelled queries through search and score the answers.

    Each line of QUERIES.jsonl: {"query": "...", "relevant": [[provider, method], ...]}. Every
    query goes through the same search path as `search`, against the configured registry (the
    queries are embedded in one batch). Prints hit@1, hit@3, recall@1, recall@3, capped
    recall@3 and MRR@3, and the queries with no relevant method in the top 3.
    """
    try:
        queries = evaluation.read_labelled_queries(queries_file)
        with settings.connect(autocommit=True) as conn:
            report = evaluation.evaluate(conn, settings.embedder, queries)
    except evaluation.EvaluationError as error:
        raise click.ClickException(str(error)) from error
    if as_json:
        click.echo(json.dumps(report.to_json(), ensure_ascii=False))
        return
    click.echo(f"{report.queries} queries")
    for name, value in report.metrics.items():
        click.echo(f"{name:<16} {value:.3f}")
    click.echo(f"{len(report.misses)} missed (no relevant method in the top 3):")
    for miss in report.misses:
        click.echo(f"line {miss['line']}: {miss['query']}")
        click.echo("   relevant: " + "; ".join(f"{p} / {m}" for p, m in miss["relevant"]))
        click.echo("   returned: " + ("; ".join(f"{p} / {m}" for p, m in miss["returned"]) or "-"))


@cli.command("preview")
@click.argument("query")
@click.option(
    "--draft",
    required=True,
    metavar='"PROVIDER / METHOD"',
    help="The record to count as enabled, named as the name path writes a pair.",
)
@click.option("--json", "as_json", is_flag=True, help='Print {"matches": [...]}, as search --json does.')
@click.pass_obj
@user_errors
def preview(settings: Settings, query, draft, as_json):
    """Show what search would answer for QUERY if the draft were enabled; changes nothing.

    The same paths and order as search (payrail.preview_search). The draft needs a vector of
    its current content: run `payrail-embedder sync` first.
    """
    with settings.connect(autocommit=True) as conn:
        try:
            provider, method = preview_module.resolve_draft(conn, draft)
        except preview_module.UnknownDraft as error:
            raise click.ClickException(str(error)) from error
        matches = preview_module.preview_search(conn, settings.embedder, provider, method, query)
    echo_matches(matches, as_json)


@cli.command("history")
@click.argument("provider")
@click.argument("method")
@click.option("--json", "as_json", is_flag=True, help='Print {"record": {...} | null, "history": [...]}.')
@click.pass_obj
@user_errors
def history(settings: Settings, provider, method, as_json):
    """Show the earlier versions of the provider method PROVIDER METHOD, newest first.

    Every update and delete keeps the version it replaced, with who and when. Restore one in
    psql with: select payrail.restore_provider_method(HISTORY_ID);
    """
    with settings.connect(autocommit=True) as conn:
        found = history_module.provider_method_history(conn, provider, method)
    if found["record"] is None and not found["history"]:
        raise click.ClickException(f'no provider method "{provider} / {method}", now or in the history')
    if as_json:
        click.echo(json.dumps(found, ensure_ascii=False))
        return
    record = found["record"]
    if record is None:
        click.echo(f"{provider} / {method}: no such record now (deleted or renamed)")
    else:
        state = ("enabled" if record["enabled"] else "draft") + (", embedded" if record["embedded"] else ", no vector")
        click.echo(f"{record['provider']} / {record['method']}: record {record['recordId']}, {state}, saved {record['savedAt']}")
    for version in found["history"]:
        click.echo(
            f"\nhistory {version['historyId']}: {version['operation']}d {version['changedAt']} by "
            f"{version['changedBy']} (session {version['changedBySessionUser']}); this version of record "
            f"{version['recordId']} was saved {version['savedAt']}"
        )
        click.echo(f"  {version['provider']} / {version['method']} ({'enabled' if version['enabled'] else 'draft'})")
        click.echo(f"  docs: {version['docsUrl'] or '-'}")
        for url in version["urls"]:
            click.echo(f"  url:  {url}")
        for line in version["guidance"].splitlines():
            click.echo(f"  {line}")
    if found["history"]:
        click.echo("\nrestore one with: select payrail.restore_provider_method(HISTORY_ID);")


@cli.group()
def model():
    """Show or switch the registry's embedding model."""


@model.command("show")
@click.option("--json", "as_json", is_flag=True, help="Print the details as JSON.")
@click.pass_obj
@user_errors
def model_show(settings: Settings, as_json):
    """Print the registry's embedding model and how many records carry a vector from it."""
    with settings.connect(autocommit=True) as conn:
        info = model_switch.describe(conn)
    if as_json:
        click.echo(json.dumps(info))
        return
    if info["model"] is None:
        click.echo("no embedding model yet: the first import or sync sets it")
    else:
        click.echo(f"{info['model']} ({info['dimensions']} dimensions), since {info['setAt']}")
    click.echo(f"{info['records']} records, {info['enabled']} enabled, {info['embedded']} with a vector")
    for name, count in info["staged"].items():
        click.echo(f"staged for a switch to {name}: {count} records")


@model.command("switch")
@click.argument("new_model")
@BATCH_SIZE_OPTION
@click.option("--json", "as_json", is_flag=True, help="Print a JSON report.")
@click.pass_obj
@user_errors
def model_switch_command(settings: Settings, new_model, batch_size, as_json):
    """Re-embed every record with NEW_MODEL, then make it the registry's model in one transaction.

    NEW_MODEL runs on the backend of --embedder. Until the switch, search keeps answering with
    the current model; staged vectors are kept batch by batch, so an interrupted run resumes.
    Exits 1 and lists the records left pending when the embedder fails.
    """
    embedder = replace(settings, model=new_model).embedder()
    with settings.connect(autocommit=True) as conn:
        with click.progressbar(length=len(model_switch.records_to_stage(conn, new_model)), label="staging", file=sys.stderr) as bar:
            report = model_switch.switch_model(conn, embedder, batch_size=batch_size, progress=bar.update)
    if as_json:
        click.echo(json.dumps(report.to_json(), ensure_ascii=False))
    elif report.switched:
        click.echo(
            f"switched to {report.model} ({report.dimensions} dimensions): {report.staged} embedded now, "
            f"{report.embedded} records moved, {report.drafts_cleared} drafts left without a vector"
        )
    elif report.error is None:
        click.echo(f"the registry already uses {report.model} ({report.dimensions} dimensions)")
    else:
        echo_pending(report)
        click.echo(f"not switched: the registry still uses {report.previous[0] if report.previous else 'no model'}; rerun to resume")
    if report.error is not None:
        sys.exit(1)


cli.add_command(mcp_command)
