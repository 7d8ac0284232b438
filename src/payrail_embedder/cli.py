"""payrail-embedder: the command line of Payrail Agent Search."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import click
import psycopg

from . import catalog, database, edit as edit_module, evaluation, model_switch, stored
from . import history as history_module
from . import preview as preview_module
from . import sync as sync_module
from .embedders import OPENAI_MAX_BATCH, EmbeddingUnavailable
from .records import read_lines
from .registry_model import RegistryModelMismatch
from .search import SearchError, SearchUnavailable, search_provider_methods
from .settings import Settings, settings_options
from .write import TransientFailure, error_reason


def user_errors(function):
    """Turns the failures a user can act on into click errors instead of tracebacks."""

    def wrapper(*args, **kwargs):
        try:
            return function(*args, **kwargs)
        except (EmbeddingUnavailable, RegistryModelMismatch, TransientFailure, stored.UnknownRecord) as error:
            raise click.ClickException(str(error)) from error
        except psycopg.Error as error:
            raise click.ClickException(f"database: {error_reason(error)}") from error

    wrapper.__name__ = function.__name__
    wrapper.__doc__ = function.__doc__
    return wrapper


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="payrail-agent-search")
@settings_options
@click.pass_context
def cli(ctx, **settings):
    """Payrail Agent Search: the registry's embedder and command line.

    Agents ask in plain words and get back at most three provider methods;
    operators import, edit and sync the catalog.
    """
    ctx.obj = Settings(**settings)


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
    with settings.connect() as conn:
        if dry_run:
            pending = [sync_module.record_name(r) for r in sync_module.records_to_sync(conn)]
            if as_json:
                click.echo(json.dumps({"wouldEmbed": pending}, ensure_ascii=False))
            else:
                click.echo("\n".join(pending + [f"{len(pending)} records would be embedded"]))
            return
        pending = sync_module.records_to_sync(conn)
        with click.progressbar(length=len(pending), label="embedding", file=sys.stderr) as bar:
            report = sync_module.sync(conn, settings.embedder(), batch_size=batch_size, progress=bar.update)
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
            conn = settings.connect()
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
        with settings.connect() as conn:
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
    with settings.connect() as conn:
        try:
            provider, method = preview_module.resolve_draft(conn, draft)
        except preview_module.UnknownDraft as error:
            raise click.ClickException(str(error)) from error
        matches = preview_module.preview_search(conn, settings.embedder, provider, method, query)
    echo_matches(matches, as_json)


@cli.command("edit")
@click.argument("name", nargs=-1, metavar="PROVIDER METHOD")
@click.option("--new", "new", is_flag=True, help="Start a new record (a draft unless you enable it).")
@click.pass_obj
@user_errors
def edit(settings: Settings, name, new):
    """Edit one record in $EDITOR, saved through the same write path as import and the backoffice.

    Name it as PROVIDER METHOD (two arguments) or as one "Provider / Method". The record opens
    as a pretty-printed catalog line; content changes are embedded before they are saved and an
    enabled record stays enabled. A refusal opens the editor again with the message on top and
    your text kept; so does a save that someone else's save got ahead of.
    """
    if new == bool(name):
        raise click.UsageError("name one record to edit (PROVIDER METHOD), or pass --new")
    with settings.connect() as conn:
        row = None if new else stored.find_by_name(conn, name)
        saved = edit_module.edit_record(conn, settings.embedder, row)
        if saved is None:
            click.echo("nothing saved")
            return
        record = stored.get(conn, saved.record_id)
    vector = "embedded now" if saved.embedded else ("vector kept" if record["embedded"] else "no vector")
    click.echo(
        f'{saved.outcome} "{record["provider"]} / {record["method"]}": record {saved.record_id}, '
        f'version {saved.version}, {"enabled" if record["enabled"] else "draft"}, {vector}'
    )


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
    with settings.connect() as conn:
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
    with settings.connect() as conn:
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
    with settings.connect() as conn:
        with click.progressbar(length=len(model_switch.records_to_stage(conn, new_model)), label="staging", file=sys.stderr) as bar:
            report = model_switch.switch_model(conn, embedder, batch_size=batch_size, progress=bar.update)
    if as_json:
        click.echo(json.dumps(report.to_json(), ensure_ascii=False))
    elif report.switched:
        click.echo(
            f"switched to {report.model} ({report.dimensions} dimensions): {report.staged} embedded now, "
            f"{report.moved} records moved, {report.drafts_cleared} drafts left without a vector"
        )
    elif report.error is None:
        click.echo(f"the registry already uses {report.model} ({report.dimensions} dimensions)")
    else:
        echo_pending(report)
        click.echo(f"not switched: the registry still uses {report.previous.name if report.previous else 'no model'}; rerun to resume")
    if report.error is not None:
        sys.exit(1)



@cli.command("mcp")
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
    database and embedder settings as every other command. See README, "Over MCP".
    """
    from .api import Registry
    from .mcp_server import serve  # the MCP SDK loads only for this command

    serve(Registry(settings=settings), http_port)
