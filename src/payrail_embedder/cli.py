"""payrail-embedder: the command line of Payrail Agent Search.

Every command parses its options, calls the package's functions and prints text for people or,
with --json, JSON for scripts. Failures have a code scripts branch on (errors.EXIT_STATUS); with
--json they are printed as {"error": CODE, "detail": "..."} on standard output, usage errors too.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import click
import psycopg

from . import edit as edit_module
from . import status as status_module
from .base import input_files, logs, paths
from .base.errors import EXIT_STATUS, as_json, as_text, code_and_detail
from .base.progress import progress
from .base.safe_text import escape_controls, one_line
from .embedders import OPENAI_MAX_BATCH, tuned_models
from .model import evaluation, golden_rankings, switch, tuning
from .postgres import connection, deploy, local_server, logins
from .registry import catalog, labelled_queries, stored
from .registry import golden as golden_module
from .registry import history as history_module
from .registry import sync as sync_module
from .registry.embedding_model import registry_model
from .registry.records import RECORD_LINE, ProviderMethod, json_text, parse_lines
from .registry.search import Connections, Match, SearchUnavailable, check_query, search_provider_methods
from .registry.write import Change, Conflict, Refused, Saved, prepare_change
from .settings import Settings, settings_options


class Failure(click.ClickException):
    """A failure with a code: `{"error": code, "detail": ...}` with --json, "Error: code: detail" without (errors.py)."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(detail)
        self.code = code

    def format_message(self) -> str:
        return as_text(self.code, self.message)

    def to_json(self) -> dict:
        return as_json(self.code, self.message)


def as_failure(error: BaseException, command: str | None) -> Failure | None:
    """The Failure a known error means, or None for one that is not the user's to act on (a bug)."""
    if isinstance(error, Failure):
        return error
    if isinstance(error, click.ClickException):  # usage errors, unreadable files
        return Failure("invalid_query" if command == "search" else "invalid_input", error.format_message())
    known = code_and_detail(error)
    return None if known is None else Failure(*known)


def wants_json(args: list[str]) -> bool:
    return "--json" in args[: args.index("--")] if "--" in args else "--json" in args


class Commands(click.Group):
    """The command group; its main turns every known failure into a Failure, printed as JSON with --json."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        args = list(sys.argv[1:] if args is None else args)
        try:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.Abort:
            click.echo("Aborted!", err=True)
            sys.exit(1)
        except Exception as error:
            ctx = getattr(error, "ctx", None) or click.get_current_context(silent=True)
            failure = as_failure(error, ctx.command.name if ctx else None)
            if failure is None:
                raise
            if wants_json(args):
                click.echo(json_text(failure.to_json()))
            elif isinstance(error, click.UsageError):
                error.show()
            else:
                failure.show()
            sys.exit(EXIT_STATUS[failure.code])


def duration(seconds: float) -> str:
    """5 s, 3 min 20 s, 1 h 05 min: a duration people read at a glance."""
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


@click.group(cls=Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="payrail-agent-search")
@settings_options
@click.pass_context
def cli(ctx, **settings):
    """Payrail Agent Search: the registry's embedder and command line.

    Agents ask in plain words and get back at most three provider methods;
    operators import, edit and sync the catalog.
    """
    ctx.obj = Settings(**settings)
    logs.configure(ctx.obj.log_format, secrets=ctx.obj.secrets())


def log_change(event: str, conn: psycopg.Connection, started: float, *, failed: bool = False, **fields) -> None:
    """The summary line of a command that changed the registry: which database, as which role,
    what it did and how long it took; a warning when part of it failed."""
    logs.log(
        event,
        logging.WARNING if failed else logging.INFO,
        database=connection.connected_to(conn),
        role=conn.info.user,
        **fields,
        duration_ms=round((time.monotonic() - started) * 1000),
    )


JSON_OPTION = click.option("--json", "as_json", is_flag=True, help='Print JSON; a failure prints {"error", "detail"}.')


@cli.group()
def db():
    """Apply the schema; find, inspect, start or stop the database."""


@db.command("apply")
@click.option("--force", is_flag=True, help="Apply every file even when the registry is current, and check every derived row (repairs them, and grants).")
@click.option(
    "--lock-timeout",
    type=click.FloatRange(min=0.001),
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
    --lock-timeout for one, and tries again (--attempts), saying on standard error who holds them.
    Prints the database (without its password) and whether anything changed.
    """
    result = deploy.apply_schema(
        settings.resolved_database_url,
        force=force,
        lock_timeout=lock_timeout,
        attempts=attempts,
        say=lambda message: click.echo(one_line(message), err=True),  # names other sessions' roles and applications
        prepared_statements=settings.prepared_statements,
    )
    click.echo(json_text(result.to_json()) if as_json else result.describe())


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
        created=",".join(report["created"]) or None,
        existing=",".join(report["existing"]) or None,
    )
    if as_json:
        click.echo(json_text(report))
        return
    for role in report["created"]:
        click.echo(f"created {role}")
    for role in report["existing"]:
        click.echo(f"{role} exists already")


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
    if as_json:
        click.echo(json_text(report))
    else:
        for line in describe_status(report):
            click.echo(line)
    if report["error"] is not None:
        sys.exit(1)


def describe_status(report: dict) -> list[str]:
    """db status for people."""
    lines = [f"payrail-agent-search {report['productVersion']}"]
    embedded = report["embedded"]
    if embedded is None:
        lines.append(f"configured database: {report['url']}")
    elif embedded["running"]:
        lines.append(f"embedded PostgreSQL {local_server.EMBEDDED_POSTGRES_VERSION}: running (pid {embedded['pid']}), data in {embedded['dataDirectory']}")
        lines.append(f"url: {report['url']}")
    else:
        lines.append(f"embedded PostgreSQL {local_server.EMBEDDED_POSTGRES_VERSION}: not running (data directory {embedded['dataDirectory']})")
        if embedded["startProblem"]:
            lines.append(f"it cannot start: {embedded['startProblem']}")
        else:
            lines.append(f"`{local_server.START_COMMAND}` starts it")
    if report["error"]:
        lines.append(f"cannot read the registry: {report['error']}")
    server = report["server"]
    if server is not None:
        lines.append(f"PostgreSQL {server['postgresql']}, pgvector {server['pgvector'] or 'not installed'}")
    version = report["schemaVersion"]
    if version is not None:
        by = f"payrail-agent-search {version['productVersion']}" if version["productVersion"] else "psql"
        lines.append(
            f"schema: applied {version['appliedAt']} by {version['appliedBy']} with {by}"
            + (f" (db/ {version['dbDigest'][:12]})" if version["dbDigest"] else "")
        )
    if report["applyDue"] is not None:
        due = report["applyDue"]
        lines.append(f"db apply: due ({'; '.join(report['applyDueReasons'])})" if due else "db apply: not due, the registry is current")
    writers = report["writableSearchPathSchemas"]
    if writers == []:
        lines.append("search path: no role but the owners can create objects in the registry's schemas")
    for writer in writers or ():
        lines.append(
            f"search path: {writer['writer']} can create objects in schema {writer['schema']}, which the registry's "
            f"functions search; db apply refuses until you run `{writer['fix']}`"
        )
    registry = report["registry"]
    if registry is not None and not registry["schemaApplied"]:
        lines.append("no registry in this database yet: run `payrail-embedder db apply`")
    elif registry is not None:
        model = registry["model"]
        lines.append(f"model: {model['name']} ({model['dimensions']} dimensions)" if model else "model: none yet")
        needing = registry["draftsNeedingEmbedding"]
        without_vector = (
            f"{needing} of them without a current vector" if needing is not None else "which of them lack a current vector is known after `db apply`"
        )
        lines.append(f"{registry['records']} records: {registry['enabled']} enabled, {registry['drafts']} drafts, {without_vector}")
    return lines


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


def count_lines(inputs: list[input_files.InputFile]) -> int:
    """The non-blank lines of the inputs, the total progress reports against; an input with none
    is refused (an empty pipe, say: its writer failed), never imported as "saved"."""
    total = 0
    for opened in inputs:
        lines = sum(1 for _ in opened.lines())
        if not lines:
            raise input_files.InputRefused(f"{opened.source} holds no records (it is empty, or its lines are blank): nothing imported")
        total += lines
    return total


@cli.command("import")
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, allow_dash=True, path_type=Path))
@click.option("--skip-invalid", is_flag=True, help="Save the valid lines even when some are refused.")
@JSON_OPTION
@click.pass_obj
def import_(settings: Settings, files, skip_invalid, as_json):
    """Upsert records from JSON Lines FILES, by (provider, method); - reads standard input.

    Each line: {"provider", "method", "urls", "docsUrl", "guidance", "enabled"}. Every line is
    checked against every rule first; new or changed content is then embedded and saved with the
    fields, a transaction per 2,048 lines (a rerun finishes an import that stopped midway). One
    refused line saves nothing unless --skip-invalid; exits 2 when a line was refused.
    """
    started = time.monotonic()
    with contextlib.ExitStack() as opened:
        # Each input opened once (a pipe read once, into a temporary file), then read a batch at a
        # time in each pass (checked, then saved), never held whole.
        inputs = [opened.enter_context(input_files.open_input(path, line_limit=RECORD_LINE)) for path in files]
        total = count_lines(inputs)

        def lines():
            return (item for each in inputs for item in parse_lines(each.lines(), each.source))

        with settings.connect() as conn:
            with progress("import", total) as advance:
                report = catalog.import_records(conn, settings.embedder, lines, skip_invalid=skip_invalid, progress=advance)
            log_change(
                "import",
                conn,
                started,
                failed=bool(report.refused),
                created=report.created,
                updated=report.updated,
                unchanged=report.unchanged,
                refused=len(report.refused),
                saved=report.saved,
            )
    echo_import_report(report, as_json)
    if report.not_imported and not as_json:
        click.echo("Fix the refused lines and import again, or import with --skip-invalid to save the valid lines alone.", err=True)
    if report.refused:
        sys.exit(EXIT_STATUS["invalid_input"])


def echo_import_report(report: catalog.ImportReport | golden_module.ImportReport, as_json: bool) -> None:
    """An import's report: its JSON, or each refused line on standard error and the summary."""
    if as_json:
        click.echo(json_text(report.to_json()))
        return
    for refusal in report.refused:
        click.echo(f"refused {refusal}", err=True)
    click.echo(report.summary())


@cli.command("export")
@click.option("-o", "--output", type=click.File("w", encoding="utf-8"), default="-", help="File to write (default: standard output).")
@click.pass_obj
def export(settings: Settings, output):
    """Write every record as JSON Lines, in the format `import` reads (enabled included)."""
    with settings.connect() as conn:
        for line in catalog.export_records(conn):
            output.write(line + "\n")


@cli.command("list")
@click.option("--text", default="", help="Only records whose provider, method, guidance or URLs contain TEXT, ignoring case.")
@click.option("--state", type=click.Choice(stored.STATES), help="Only records in this state.")
@JSON_OPTION
@click.pass_obj
def list_(settings: Settings, text, state, as_json):
    """List the records by provider and method (ignoring case): state, version, when and by whom saved.

    The backoffice's filters: --text matches provider, method, guidance and URLs ignoring case;
    --state is enabled, draft (with a vector of its current content) or "draft needing an
    embedding". With --json: {"records": [{"recordId", "provider", "method", "state", "version",
    "savedAt", "savedBy"}, ...]}.
    """
    with settings.connect() as conn:
        rows = stored.list_records(conn, text, state).rows
    listed = [
        {
            "recordId": row["id"],
            "provider": row["provider"],
            "method": row["method"],
            "state": row["state"],
            "version": row["version"],
            "savedAt": row["updated_at"].isoformat(),
            "savedBy": history_module.author(row["saved_by"], None),
        }
        for row in rows
    ]
    if as_json:
        click.echo(json_text({"records": listed}))
        return
    for record in listed:
        click.echo(
            f"{record['provider']} / {record['method']}  ({record['state']}, version {record['version']}, "
            f"saved {record['savedAt']} by {escape_controls(record['savedBy'])})"
        )
    click.echo(f"{len(listed)} record{'' if len(listed) == 1 else 's'}")


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
@click.option("--dry-run", is_flag=True, help="List the records that would be embedded, in the order sync embeds them; change nothing.")
@BATCH_SIZE_OPTION
@JSON_OPTION
@click.pass_obj
def sync(settings: Settings, dry_run, batch_size, as_json):
    """Embed every record whose vector is missing or stale, then every golden query without a vector.

    Each batch commits on its own, and a vector is written only while its record still holds
    the content it was made from, so an interrupted run keeps its work and a rerun finishes
    it. Exits 1 and lists the records left pending when the embedder fails. Golden queries get a
    vector by the registry's model (the backoffice ranks them with it; search never reads it).
    """
    started = time.monotonic()
    with settings.connect() as conn:
        if dry_run:
            names = [sync_module.record_name(r) for r in sync_module.records_to_sync(conn)]
            if as_json:
                click.echo(json_text({"wouldEmbed": names}))
            else:
                click.echo("\n".join(names + [f"{len(names)} records would be embedded"]))
            return
        with progress("sync", sum(1 for _ in sync_module.ids_to_sync(conn))) as advance:
            report = sync_module.sync(conn, settings.embedder(), batch_size=batch_size, progress=advance)
        log_change(
            "sync",
            conn,
            started,
            failed=bool(report.pending or report.error),
            embedded=report.embedded,
            changed_meanwhile=report.changed_meanwhile,
            pending=len(report.pending),
            golden_queries=report.golden_queries or None,
            error=report.error,
        )
    if as_json:
        click.echo(json_text(report.to_json()))
    else:
        echo_pending(report)
        golden_queries = f", {report.golden_queries} golden quer{'y' if report.golden_queries == 1 else 'ies'} embedded" if report.golden_queries else ""
        click.echo(f"{report.embedded} embedded, {report.changed_meanwhile} changed meanwhile, {len(report.pending)} pending{golden_queries}")
    if report.pending or report.error:
        sys.exit(EXIT_STATUS["unavailable"])


QUERY_ARGUMENT = click.argument("query", metavar="QUERY")


def read_query(query: str) -> str:
    """QUERY, or standard input for "-" (a query with quotes or newlines needs no shell quoting)."""
    if query != "-":
        return query
    with click.open_file("-", "rb") as stdin:
        data = stdin.read()
    try:
        return data.decode("utf-8").removesuffix("\n")
    except UnicodeDecodeError as error:
        raise Failure("invalid_query", f"standard input is not UTF-8 text (byte {error.start + 1})") from None


def connect_for_search(settings: Settings) -> psycopg.Connection:
    try:
        return settings.connect()
    except (psycopg.Error, connection.DatabaseUnavailable) as error:
        raise SearchUnavailable(f"cannot reach the database: {error}", "database_unreachable") from error


def one_connection_at_a_time(settings: Settings) -> Connections:
    """A connection for each of search's database steps, closed after it: none is held while the
    query is embedded, so searches waiting on a slow embedding service never use up the
    connections (a login's connection limit, a pooler's) that exact names need."""

    def run(work):
        with connect_for_search(settings) as conn:
            return work(conn)

    return run


@cli.command("search")
@QUERY_ARGUMENT
@click.option("--json", "as_json", is_flag=True, help='Print {"matches": [...]} or {"error", "detail"}.')
@click.pass_obj
def search(settings: Settings, query, as_json):
    """Find at most three provider methods for QUERY, a need in plain words ("-": read it from standard input).

    An exact provider or method name is answered by name, without the embedder. Exits 2 for
    invalid_query (fix the query) and 1 for search_unavailable (try again later).
    """
    query = check_query(read_query(query))  # invalid_query before any connection, even with the database down
    matches = search_provider_methods(one_connection_at_a_time(settings), settings.embedder, query)
    echo_matches(matches, as_json)


def echo_matches(matches: list[Match], as_json: bool) -> None:
    if as_json:
        click.echo(json_text({"matches": [match.to_json() for match in matches]}))
        return
    if not matches:
        click.echo("no enabled provider method matches")
    for number, match in enumerate(matches, start=1):
        click.echo(f"{number}. {match['provider']} / {match['method']}")
        click.echo(f"   docs: {match['docsUrl'] or '-'}")
        for url in match["urls"]:
            click.echo(f"   url:  {url}")
        for line in match["guidance"].split("\n"):
            click.echo(f"   {line}")


# eval's exit status when a metric is below its floor (--min-hit-at-3, --min-mrr): the report is
# printed all the same; 1 and 2 keep their meaning (errors.EXIT_STATUS), so a pipeline can tell
# "search got worse" from "eval could not run".
BELOW_FLOOR = 3


def floor_option(name: str, metric: str):
    return click.option(
        name,
        type=click.FloatRange(0, 1),
        help=f"Exit {BELOW_FLOOR} when {metric} is below this (0 to 1): a deployment pipeline refuses a change that makes search worse.",
    )


@cli.command("eval")
@click.argument("queries_file", metavar="[QUERIES.jsonl]", required=False, type=click.Path(exists=True, dir_okay=False, allow_dash=True, path_type=Path))
@click.option(
    "--compare",
    "candidate_model",
    metavar="MODEL",
    help="Also score MODEL (on the --embedder backend; a tuned model's name, say) side by side, as if it were the "
    "registry's: every enabled record embedded by it in memory; nothing is switched or written.",
)
@floor_option("--min-hit-at-3", "hit@3")
@floor_option("--min-mrr", "mrr@3")
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help='Print {"queries", "metrics", "misses", "labelWarnings", "belowFloors"}, and with --compare "compare": {"model", "metrics", "misses"}.',
)
@click.pass_obj
def eval_(settings: Settings, queries_file, candidate_model, min_hit_at_3, min_mrr, as_json):
    """Measure retrieval quality: run labelled queries through search and score the answers.

    Without QUERIES.jsonl, the registry's own golden queries (`golden list`); a registry that has
    none is an error (exit 2), so a pipeline never passes on nothing measured. Each line of
    QUERIES.jsonl ("-": standard input): {"query": "...", "relevant": [[provider, method], ...]}.
    Every query goes through the same search path as `search`, against the configured registry
    (the queries are embedded in one batch). Prints hit@1, hit@3, recall@1, recall@3, capped
    recall@3 and MRR@3, and the queries with no relevant method in the top 3, each with the three
    that came instead. Labels naming a record the registry lacks, or holds only as a draft, are
    warned about. Exits 3 when a metric is below its floor (--min-hit-at-3, --min-mrr), naming
    it; 1 when search is unavailable; 2 for bad input.
    """
    floors = {metric: floor for metric, floor in (("hit@3", min_hit_at_3), ("mrr@3", min_mrr)) if floor is not None}
    queries = labelled_queries.read_labelled_queries(queries_file) if queries_file else None
    with connect_for_search(settings) as conn:
        if queries is None:
            queries = golden_module.labelled_queries(conn)
            if not queries:
                raise Failure(
                    "invalid_input",
                    "the registry has no golden queries to measure: add some (`payrail-embedder golden add` or "
                    "`golden import FILE`), or give eval a QUERIES.jsonl file",
                )
        report = evaluation.evaluate(conn, settings.embedder, queries)
        model = registry_model(conn)
        # The candidate model's name and its report.
        compared = None
        if candidate_model:
            candidate = replace(settings, model=candidate_model).embedder()
            compared = candidate_model, evaluation.evaluate_candidate(conn, candidate, queries)
    below = report.below(floors)
    if as_json:
        answer = {**report.to_json(), "belowFloors": below}
        if compared is not None:
            compared_model, compared_report = compared
            answer["compare"] = {"model": compared_model, "metrics": compared_report.metrics, "misses": compared_report.misses}
        click.echo(json_text(answer))
    else:
        echo_report(report, compared, model.name if model else "no model")
    for failed in below:
        click.echo(f"below the floor: {failed['metric']} {failed['value']:.3f} < {failed['floor']:.3f}", err=True)
    if below:
        sys.exit(BELOW_FLOOR)


def echo_report(report: evaluation.EvaluationReport, compared: tuple[str, evaluation.EvaluationReport] | None, name: str) -> None:
    """eval's report for people: its label warnings on standard error, the metrics and the misses
    (and those of a candidate model, compared: its name and report, side by side)."""
    for warning in report.label_warnings:
        click.echo(f"warning: {labelled_queries.origin_text(warning)}: {warning['provider']} / {warning['method']} is {warning['problem']}", err=True)
    click.echo(f"{report.queries} queries")
    if compared is None:
        for metric, value in report.metrics.items():
            click.echo(f"{metric:<16} {value:.3f}")
        echo_misses(report.misses, "")
        return
    candidate_model, candidate_report = compared
    echo_side_by_side([f"{name} (registry)", candidate_model], [report.metrics, candidate_report.metrics])
    echo_misses(report.misses, f" by {name}")
    echo_misses(candidate_report.misses, f" by {candidate_model}")


def echo_misses(misses: list[dict], by: str) -> None:
    click.echo(f"{len(misses)} missed{by} (no relevant method in the top 3):")
    for miss in misses:
        click.echo(f"{labelled_queries.origin_text(miss)}: {miss['query']}")
        click.echo("   relevant: " + "; ".join(f"{p} / {m}" for p, m in miss["relevant"]))
        click.echo("   returned: " + ("; ".join(f"{p} / {m}" for p, m in miss["returned"]) or "-"))


def echo_side_by_side(headers: list[str], metrics: list[dict[str, float]]) -> None:
    """eval's metrics of two models in two columns, and the change."""
    width = max(len(h) for h in headers)
    click.echo(f"{'metric':<16} " + " ".join(h.rjust(width) for h in headers) + "  change")
    for name in evaluation.METRICS:
        values = [m[name] for m in metrics]
        click.echo(f"{name:<16} " + " ".join(f"{v:{width}.3f}" for v in values) + f"  {values[-1] - values[0]:+.3f}")


@cli.group()
def golden():
    """Keep the registry's golden queries: questions and the records they should find, which eval measures.

    Evaluation and training data beside the records, never ranking input: search reads none, and
    agents cannot. Operators write them; operators and the embedder read them.
    """


def echo_golden_query(query: golden_module.GoldenQuery, verb: str = "golden query") -> None:
    click.echo(f"{verb} {query.golden_query_id}: {query.query}")
    click.echo("   relevant: " + "; ".join(f"{r.provider} / {r.method}" + ("" if r.enabled else " (draft)") for r in query.relevant))
    click.echo(f"   added {query.added_at.isoformat()} by {query.added_by}")


@golden.command("list")
@JSON_OPTION
@click.pass_obj
def golden_list(settings: Settings, as_json):
    """List the golden queries in the order they were added, each with its records as they are named now.

    With --json: {"goldenQueries": [{"goldenQueryId", "query", "relevant": [{"recordId",
    "provider", "method", "enabled"}, ...], "addedBy", "addedAt"}, ...]}.
    """
    with settings.connect() as conn:
        queries = golden_module.golden_queries(conn)
    if as_json:
        click.echo(json_text({"goldenQueries": [query.to_json() for query in queries]}))
        return
    for query in queries:
        echo_golden_query(query)
    click.echo(f"{len(queries)} golden quer{'y' if len(queries) == 1 else 'ies'}")


@golden.command("add")
@QUERY_ARGUMENT
@click.option(
    "--relevant",
    "names",
    multiple=True,
    required=True,
    metavar='"PROVIDER / METHOD"',
    help='A record QUERY should find, "Provider / Method" or "Provider Method"; repeat it for each, in the order they should come.',
)
@JSON_OPTION
@click.pass_obj
def golden_add(settings: Settings, query, names, as_json):
    """Add a golden query: QUERY ("-": read it from standard input), as an agent would ask it, and the records it should find.

    The query obeys search's rules; the same query (ignoring case, compatibility forms, invisible
    characters and runs of white space) cannot be added twice: `golden remove` it first to label
    it anew. Drafts may be named (eval warns that search never returns them). The query is
    embedded with the registry's model first and its vector kept beside it (the backoffice ranks
    golden queries with it; search never reads it): nothing is added when that fails.
    """
    query = check_query(read_query(query))
    started = time.monotonic()
    with settings.connect() as conn:
        added = golden_module.add_golden_query(conn, settings.embedder, query, names)
        log_change("golden_add", conn, started, golden_query=added.golden_query_id, relevant=len(added.relevant))
    if as_json:
        click.echo(json_text(added.to_json()))
    else:
        echo_golden_query(added, "added golden query")


@golden.command("remove")
@click.argument("queries", nargs=-1, required=True, metavar="QUERY...")
@JSON_OPTION
@click.pass_obj
def golden_remove(settings: Settings, queries, as_json):
    """Remove golden queries, each named by its query (compared as `golden add` compares them); all or none.

    The records they named are not touched. With --json: {"removed": [...]}, as `golden list --json` lists them.
    """
    started = time.monotonic()
    with settings.connect() as conn:
        removed = golden_module.remove_golden_queries(conn, queries)
        log_change("golden_remove", conn, started, removed=len(removed))
    if as_json:
        click.echo(json_text({"removed": [query.to_json() for query in removed]}))
        return
    for query in removed:
        echo_golden_query(query, "removed golden query")


@golden.command("import")
@click.argument("file", metavar="FILE", type=click.Path(exists=True, dir_okay=False, allow_dash=True, path_type=Path))
@JSON_OPTION
@click.pass_obj
def golden_import(settings: Settings, file, as_json):
    """Add the golden queries of FILE, eval's format, all or none.

    Each line: {"query": "...", "relevant": [[provider, method], ...]}, naming records the registry
    holds (drafts too) as names compare; no other field. Every line is checked first, and every
    refused line printed with its number: a record no record goes by, one named twice, a query
    an earlier line has, or one the registry holds with other records (`golden remove` it first).
    One refused line adds nothing (exit 2). A query the registry holds with the same records is
    left as it is, so importing the same file again changes nothing. The new queries are embedded
    with the registry's model first and their vectors kept, as `golden add` does.
    """
    started = time.monotonic()
    queries = labelled_queries.read_labelled_queries(file, only_known_fields=True)
    with settings.connect() as conn:
        report = golden_module.import_golden_queries(conn, settings.embedder, queries, str(file))
        log_change(
            "golden_import",
            conn,
            started,
            failed=not report.saved,
            added=report.added,
            unchanged=report.unchanged,
            refused=len(report.refused),
        )
    echo_import_report(report, as_json)
    if not report.saved:
        sys.exit(EXIT_STATUS["invalid_input"])


@golden.command("export")
@click.argument("file", metavar="[FILE]", required=False, type=click.Path(dir_okay=False, path_type=Path))
@click.pass_obj
def golden_export(settings: Settings, file):
    """Write every golden query as a line of eval's format to FILE ("-" or none: standard output).

    In the order they were added; each line {"query", "relevant"} in that order, the records in
    the order they were given, each by the names it has now. `golden import` of the file into a
    registry holding the same records, then `golden export`, gives the same bytes.
    """
    with settings.connect() as conn:
        data = "".join(line + "\n" for line in golden_module.export_lines(conn)).encode("utf-8")
    if file is None or str(file) == "-":
        with click.open_file("-", "wb") as stdout:
            stdout.write(data)
    else:
        file.write_bytes(data)


@cli.command("preview")
@click.argument("query", metavar="[QUERY]", required=False)
@click.option(
    "--draft",
    required=True,
    metavar='"PROVIDER / METHOD"',
    help='The record to count as enabled: "Provider / Method" or "Provider Method", as the name path writes a pair.',
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help='Print {"matches": [...]} or {"error", "detail"}, as search --json does; without QUERY, the effect: '
    '{"record", "enabled", "goldenQueries", "changes": [...], "embeddedNow"}.',
)
@click.pass_obj
def preview(settings: Settings, query, draft, as_json):
    """Show what search would answer for QUERY if the draft were enabled; changes nothing.

    The same paths, order, errors and exit statuses as search (payrail.preview_search). The draft
    needs a vector of its current content: run `payrail-embedder sync` first.

    Without QUERY: which golden queries' top three enabling the draft would change (it gains
    them, another loses them, ...), each with its top three now and after, as `eval` would find
    them once it is enabled. A draft without a vector is embedded for this, not saved.
    """
    if query is None:
        with settings.connect() as conn:
            row = stored.find_by_name(conn, [draft])
            effect = golden_effect(conn, settings, replace(stored.record_of(row), enabled=True), row)
        click.echo(json_text(effect.to_json()) if as_json else "\n".join(effect.describe()))
        return
    query = check_query(read_query(query))
    connections = one_connection_at_a_time(settings)
    row = connections(lambda conn: stored.find_by_name(conn, [draft]))
    matches = search_provider_methods(connections, settings.embedder, query, counted_draft=(row["provider"], row["method"]))
    echo_matches(matches, as_json)


def golden_effect(conn: psycopg.Connection, settings: Settings, record: ProviderMethod, row: dict) -> golden_rankings.Effect:
    """What saving record over row would change in the golden queries' top threes (nothing is
    saved); a Failure when the save would be refused."""
    prepared = prepare_change(conn, settings.embedder, Change(record, row["id"], row["version"]))
    effect = golden_rankings.effect_of(conn, settings.embedder, prepared)
    if effect.outcome is not None:
        raise Failure("invalid_input" if isinstance(effect.outcome, Refused) else "unavailable", effect.outcome.reason)
    return effect


NAME_ARGUMENT = click.argument("name", nargs=-1, metavar="PROVIDER METHOD")


@cli.command("edit")
@NAME_ARGUMENT
@click.option("--new", "new", is_flag=True, help="Start a new record (a draft unless you enable it).")
@click.option("--yes", "-y", is_flag=True, help="Save without asking what to do when the edit changes golden queries' top threes (it still prints what).")
@click.pass_obj
def edit(settings: Settings, name, new, yes):
    """Edit one record in $EDITOR, saved through the same write path as import and the backoffice.

    Name it as PROVIDER METHOD (two arguments) or as one "Provider / Method". The record opens
    as header lines (Provider:, Method:, URL: once per URL, Docs URL:, Enabled: yes or no), a
    blank line and the guidance as plain text; content changes are embedded before they are
    saved and an enabled record stays enabled. A refusal opens the editor again with the reasons
    and the help on top and your text kept; so does a save that someone else's save got ahead
    of. Leaving without saving after such a reopen exits non-zero (2 for a refusal, 1 otherwise).

    Before it saves, it prints which golden queries' top three the edit would change, and when
    any would, asks: save it (y), edit it again (e) or leave it unsaved (n). --yes saves without asking.
    """
    if new == bool(name):
        raise click.UsageError("name one record to edit (PROVIDER METHOD), or pass --new")
    started = time.monotonic()

    def confirm(effect: golden_rankings.Effect) -> str:
        if effect.golden_queries:
            click.echo("\n".join(effect.describe()))
        if yes or not effect.changes:
            return edit_module.SAVE
        answer = click.prompt("Save it? y: save, e: edit it again, n: leave it unsaved", type=click.Choice(["y", "e", "n"]))
        return {"y": edit_module.SAVE, "e": edit_module.EDIT_AGAIN, "n": edit_module.LEAVE}[answer]

    with settings.connect() as conn:
        row = None if new else stored.find_by_name(conn, name)
        saved = edit_module.edit_record(conn, settings.embedder, row, confirm=confirm)  # LeftUnsaved is a failure with its code
        if saved is None:
            click.echo("nothing saved")
            return
        log_change("save", conn, started, record=saved.record_id, version=saved.version, outcome=saved.outcome, embedded=saved.embedded)
        echo_saved(conn, saved, as_json=False)


def echo_saved(conn: psycopg.Connection, saved: Saved, as_json: bool) -> None:
    """What a save through the write path did to one record (edit, restore), as it is stored now."""
    record = stored.get(conn, saved.record_id)
    if record is None:
        raise Failure("unknown_record", f"record {saved.record_id} was {saved.outcome} as version {saved.version}, then deleted by another session")
    if as_json:
        click.echo(json_text({"outcome": saved.outcome, "embeddedNow": saved.embedded, **stored.as_json(record)}))
        return
    vector = "embedded now" if saved.embedded else ("vector kept" if record["embedded"] else "no vector")
    click.echo(
        f'{saved.outcome} "{record["provider"]} / {record["method"]}": record {saved.record_id}, '
        f"version {saved.version}, {'enabled' if record['enabled'] else 'draft'}, {vector}"
    )


@cli.command("history")
@NAME_ARGUMENT
@click.option("--json", "as_json", is_flag=True, help='Print {"record": {...} | null, "history": [...]}.')
@click.pass_obj
def history(settings: Settings, name, as_json):
    """Show the earlier versions of a record, newest first: PROVIDER METHOD, or one "Provider / Method".

    Also a record since renamed or deleted, by a name it had. Every update and delete keeps the
    version it replaced, with who saved it, who replaced it and when. Bring one back with
    `payrail-embedder restore HISTORY_ID`.
    """
    with settings.connect() as conn:
        provider, method = stored.resolve_former_name(conn, name)
        found = history_module.provider_method_history(conn, provider, method)
    if as_json:
        click.echo(json_text(found))
        return
    record = found["record"]
    if record is None:
        click.echo(f"{provider} / {method}: no such record now (deleted or renamed)")
    else:
        state = ("enabled" if record["enabled"] else "draft") + (", embedded" if record["embedded"] else ", no vector")
        click.echo(
            f"{record['provider']} / {record['method']}: record {record['recordId']}, version {record['version']}, "
            f"{state}, saved {record['savedAt']} by {escape_controls(record['savedBy'])}"
        )
    for version in found["history"]:
        # Role names are the database's to allow: any character but NUL.
        saved_by, changed_by, session_user = (escape_controls(version[key]) for key in ("savedBy", "changedBy", "changedBySessionUser"))
        click.echo(
            f"\nhistory {version['historyId']}: version {version['version']} of record {version['recordId']}, saved "
            f"{version['savedAt']} by {saved_by}; {version['operation']}d {version['changedAt']} by "
            f"{changed_by} (session {session_user})"
        )
        click.echo(f"  {version['provider']} / {version['method']} ({'enabled' if version['enabled'] else 'draft'})")
        click.echo(f"  docs: {version['docsUrl'] or '-'}")
        for url in version["urls"]:
            click.echo(f"  url:  {url}")
        for line in version["guidance"].split("\n"):
            click.echo(f"  {line}")
    if found["history"]:
        click.echo("\nrestore one with: payrail-embedder restore HISTORY_ID   (--as-draft: as a draft)")


@cli.command("restore")
@click.argument("history_id", type=click.IntRange(min=1))
@click.option("--as-draft", is_flag=True, help="Restore it as a draft (disabled), e.g. to check it with preview before enabling it.")
@JSON_OPTION
@click.pass_obj
def restore(settings: Settings, history_id, as_draft, as_json):
    """Bring back the fields of an earlier version (HISTORY_ID, from `history`), through the write path.

    The record keeps its enabled state (a draft with --as-draft): other content restored into an
    enabled record is embedded first, and the record stays enabled. A deleted record comes back
    as a new draft. The version it replaces is kept in the history, so a restore can be undone.
    """
    started = time.monotonic()
    with settings.connect() as conn:
        restored = history_module.restore(conn, settings.embedder, history_id, as_draft=as_draft)
        if restored is None:
            raise Failure("unknown_record", f"there is no history entry {history_id}; `payrail-embedder history PROVIDER METHOD` lists them")
        entry, outcome = restored
        if isinstance(outcome, Refused):
            raise Failure("invalid_input", f"not restored: {outcome.reason}")
        if isinstance(outcome, Conflict):
            raise Failure("unavailable", f"not restored: {outcome.reason}; run it again")
        log_change(
            "restore",
            conn,
            started,
            record=outcome.record_id,
            history=history_id,
            version=outcome.version,
            outcome=outcome.outcome,
            embedded=outcome.embedded,
        )
        if outcome.record_id != entry["provider_method_id"] and not as_json:
            click.echo(f"record {entry['provider_method_id']} was deleted since: restored as a new record, a draft until enabled")
        echo_saved(conn, outcome, as_json)


@cli.group()
def model():
    """Show, switch or tune the registry's embedding model; install and list tuned models."""


@model.command("show")
@JSON_OPTION
@click.pass_obj
def model_show(settings: Settings, as_json):
    """Print the registry's embedding model and how many records carry a vector from it."""
    with settings.connect() as conn:
        info = switch.describe(conn)
    if as_json:
        click.echo(json_text(info))
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
@JSON_OPTION
@click.pass_obj
def model_switch_command(settings: Settings, new_model, batch_size, as_json):
    """Re-embed every record with NEW_MODEL, then make it the registry's model in one transaction.

    NEW_MODEL runs on the backend of --embedder. Until the switch, search keeps answering with
    the current model; staged vectors are kept batch by batch, so an interrupted run resumes.
    The golden queries are embedded with NEW_MODEL before the switch too. Exits 1 and lists the
    records left pending when the embedder fails.
    """
    started = time.monotonic()
    embedder = replace(settings, model=new_model).embedder()
    with settings.connect() as conn:
        with progress("model_switch", sum(1 for _ in switch.ids_to_stage(conn, new_model))) as advance:
            report = switch.switch_model(conn, embedder, batch_size=batch_size, progress=advance)
        log_change(
            "model_switch",
            conn,
            started,
            failed=report.error is not None,
            model=report.model,
            previous=report.previous.name if report.previous else None,
            switched=report.switched,
            staged=report.staged,
            moved=report.moved,
            drafts_cleared=report.drafts_cleared,
            pending=len(report.pending),
            golden_queries=report.golden_queries or None,
            error=report.error,
        )
    if as_json:
        click.echo(json_text(report.to_json()))
    elif report.switched:
        click.echo(
            f"switched to {report.model} ({report.dimensions} dimensions): {report.staged} embedded now, "
            f"{report.moved} records moved, {report.drafts_cleared} drafts left without a vector"
            + (f", {report.golden_queries} golden queries embedded" if report.golden_queries else "")
        )
    elif report.error is None:
        click.echo(f"the registry already uses {report.model} ({report.dimensions} dimensions)")
    else:
        echo_pending(report)
        click.echo(f"not switched: the registry still uses {report.previous.name if report.previous else 'no model'}; rerun to resume")
    if report.error is not None:
        sys.exit(EXIT_STATUS["unavailable"])


@model.command("tune")
@click.argument("golden_file", metavar="[GOLDEN.jsonl]", required=False, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--validation-fraction",
    type=click.FloatRange(0, 1, min_open=True, max_open=True),
    default=tuning.TuneOptions.validation_fraction,
    show_default=True,
    help="Keep about this share of the queries aside to decide, split by provider: no training query names a validation query's providers.",
)
@click.option(
    "--seed",
    type=int,
    default=tuning.TuneOptions.seed,
    show_default=True,
    help="Seeds the split and the training: the same inputs and seed give the same model.",
)
@click.option("--epochs", type=click.IntRange(1, 100), default=tuning.TuneOptions.epochs, show_default=True, help="Passes over the training pairs.")
@click.option(
    "--batch-size",
    type=click.IntRange(2, 1024),
    default=tuning.TuneOptions.batch_size,
    show_default=True,
    help="Pairs per training step; each query's negatives are the other records of its step.",
)
@click.option(
    "--learning-rate",
    type=click.FloatRange(0, 1, min_open=True),
    default=tuning.TuneOptions.learning_rate,
    show_default=True,
    help="Peak learning rate (AdamW, linear decay after a 10% warm-up).",
)
@click.option(
    "--record-pairs",
    type=click.Choice(tuning.RECORD_PAIRS),
    default=tuning.TuneOptions.record_pairs,
    show_default=True,
    help="Also train on queries made from the records: each enabled record's Purpose line against its record. "
    "auto: only when there are no golden queries; on: beside them too; off: never.",
)
@click.option("--threads", type=click.IntRange(1, 1024), help="CPU threads to train on (default: torch's, one per core). The same count gives the same model.")
@click.option("--force", is_flag=True, help="Keep a model even when the one trained to decide does not beat the registry's model on validation.")
@JSON_OPTION
@click.pass_obj
def model_tune(settings: Settings, golden_file, validation_fraction, seed, epochs, batch_size, learning_rate, record_pairs, threads, force, as_json):
    """Fine-tune the registry's local model on its golden queries (or GOLDEN.jsonl, eval's format).

    Each query is paired with the record text of each relevant record, as the registry embeds it,
    and trained against the other records of its batch. Queries on a seeded share of the providers
    are kept aside, and a first model trained without them decides: eval's metrics on them are
    printed before and after. If it raises MRR@3 there, a second model is trained the same way on
    every query and kept as BASE-tuned-<content hash> in the models directory under the data
    directory, with its figures on the queries it trained on (optimistic: the validation figures
    are the honest ones); otherwise nothing is kept and the command exits 2 (--force keeps it).
    With no golden queries, --record-pairs auto tunes on the records alone and decides on their
    Purpose lines. The registry is not changed: `model switch NAME` makes it the registry's model.
    Says how long it expects to take before it starts, and shows progress on standard error. The
    local backend only: OpenAI's models cannot be tuned.
    """
    options = tuning.TuneOptions(validation_fraction, seed, epochs, batch_size, learning_rate, threads, force, record_pairs)
    with settings.connect() as conn, contextlib.ExitStack() as training:
        advance: Callable[[int], None] | None = None
        done = 0

        def training_progress(stage: str, step: int, steps: int) -> None:
            nonlocal advance, done
            if step == 0:  # a training starts, and its progress lines' clock with it
                training.close()
                advance, done = training.enter_context(progress(stage, steps)), 0
            if advance is not None and step > done:
                advance(step - done)
                done = step
            if step >= steps:
                training.close()

        report = tuning.tune(
            conn,
            settings.embedder(),
            settings.models_dir,
            golden_file,
            options,
            announce=echo_tune_plan,
            progress=training_progress,
        )
    if as_json:
        click.echo(json_text(report.to_json()))
    else:
        echo_tune_report(report, golden_file)
    if not report.kept:
        sys.exit(EXIT_STATUS["invalid_input"])


def mrr_change(before: evaluation.EvaluationReport, after: evaluation.EvaluationReport) -> str:
    return f"MRR@3 {before.metrics[tuning.DECIDING_METRIC]:.3f} -> {after.metrics[tuning.DECIDING_METRIC]:.3f}"


def echo_tune_report(report: tuning.TuneReport, golden_file: Path | None) -> None:
    """model tune's result for people: the deciding figures, then the kept model's."""
    data = report.plan.data
    click.echo(f"validation: {len(report.plan.split.validation)} {'' if data.decides_on_golden else 'record '}queries on providers the training never saw")
    echo_side_by_side([report.plan.tuned_from, "tuned"], [report.before.metrics, report.after.metrics])
    change = mrr_change(report.before, report.after)
    final = report.final  # the kept model's
    if final is None:
        click.echo(f"not kept: {change} does not beat the registry's model {report.plan.tuned_from}; --force keeps it anyway")
        return
    click.echo(f"kept {report.model} in {report.path} (validation {change}{'' if report.better else ', kept by --force'}), in {duration(report.seconds)}")
    click.echo(
        f"it was then trained on all {final.before.queries} {'golden' if data.decides_on_golden else 'record'} queries "
        f"({final.pairs} pairs): {mrr_change(final.before, final.after)} on them, optimistic as it trained on them; "
        "the validation figures are the honest estimate"
    )
    click.echo(f"see it side by side: payrail-embedder eval{f' {golden_file}' if golden_file else ''} --compare {report.model}")
    click.echo(f"make it the registry's model: payrail-embedder model switch {report.model}")


def echo_tune_plan(plan: tuning.TunePlan) -> None:
    """What tune is about to do and how long it expects it to take, on standard error."""
    data, split = plan.data, plan.split
    queries = f"{len(data.usable)} of {data.golden_queries} golden queries name enabled records"
    made = f"{len(data.made)} queries made from the records' Purpose lines"
    lines = [
        f"tuning {plan.tuned_from} on {data.source}: {queries}" + (f"; {made}" if data.made else ""),
        f"split by provider{'' if data.decides_on_golden else ' (the record queries: no golden query to decide on)'}: "
        f"{len(split.validation)} validation queries over {len(split.validation_providers)} of {split.providers} providers; "
        f"{len(split.training)} training queries; {len(split.left_out)} naming both sides left out",
        f"expected: about {duration(plan.estimated_seconds)} if kept ({plan.steps} training steps to decide ({plan.pairs} pairs), then "
        f"{plan.final_steps} on every query ({plan.final_pairs} pairs), at {plan.seconds_per_step:.1f} s a step, timed on one batch "
        f"on {plan.threads} thread{'s' if plan.threads > 1 else ''}; embedding {plan.records} records for each model, "
        f"{duration(plan.embedding_seconds)}; each ONNX export, about {duration(tuning.EXPORT_SECONDS)})",
    ]
    for line in lines:
        click.echo(line, err=True)


@model.command("install")
@click.argument("source", metavar="DIRECTORY", type=click.Path(exists=True, file_okay=False, path_type=Path))
@JSON_OPTION
@click.pass_obj
def model_install(settings: Settings, source, as_json):
    """Install a tuned model copied from another machine (its directory, named as the model).

    Checks that it holds directories and regular files only, within a model's size, and that its
    files hash to its name (nothing is copied otherwise), copies it into this installation's
    models directory and exports its ONNX graph here; a model already installed stays as it is.
    Install it on every machine that searches or saves (replicas, every backoffice host) before
    `model switch`.
    """
    path = tuned_models.install(source, settings.models_dir)
    if as_json:
        click.echo(json_text({"model": path.name, "path": str(path)}))
    else:
        click.echo(f"installed {path.name} in {path}")


@model.command("list")
@JSON_OPTION
@click.pass_obj
def model_list(settings: Settings, as_json):
    """List the tuned models installed on this machine, with how each was tuned and what it measured."""
    models = tuned_models.installed(settings.models_dir)
    if as_json:
        click.echo(json_text({"modelsDirectory": str(settings.models_dir), "models": models}))
        return
    if not models:
        click.echo(f"no tuned models in {settings.models_dir}")
    for item in models:
        tuning_report = item["tuning"] or {}
        measured, final = tuning_report.get("validation"), (tuning_report.get("final") or {}).get("trainedOn")
        scores = "".join(
            f", {label} MRR@3 {figures['before'][tuning.DECIDING_METRIC]:.3f} -> {figures['after'][tuning.DECIDING_METRIC]:.3f}"
            for label, figures in (("validation", measured), (f"on its {final and final['queries']} training queries (optimistic)", final))
            if figures
        )
        origin = f" (tuned from {tuning_report['tunedFrom']} {tuning_report.get('created', '')}{scores})" if tuning_report else ""
        click.echo(f"{item['name']}{origin}: {item['path']}")


@cli.command("mcp")
@click.option(
    "--http",
    "http_port",
    type=click.IntRange(1, 65535),
    help="Serve streamable HTTP on PORT (path /mcp, and GET /search with its OpenAPI document at /openapi.json) instead of stdio.",
)
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address --http listens on. Beyond loopback it needs --token-file; put a TLS reverse proxy in front.",
)
@click.option(
    "--token-file",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar="PAYRAIL_MCP_TOKEN_FILE",
    help="Agents' bearer tokens, one line per agent: NAME TOKEN (mode 600). Read again when it changes: delete a line to revoke.",
)
@click.pass_obj
def mcp(settings: Settings, http_port: int | None, host: str, token_file: Path | None):
    """Serve the search as an MCP server (one tool: search_provider_methods).

    Speaks stdio by default, for an agent host that starts this command; takes the same
    database and embedder settings as every other command. See docs/agents.md, "Over MCP".
    """
    from .api import Registry
    from .mcp_server import serve  # the MCP SDK loads only for this command

    if http_port is None and (host != "127.0.0.1" or token_file is not None):
        raise click.UsageError("--host and --token-file go with --http PORT; over stdio the agent host starts the server itself")
    # A busy port, a host beyond loopback without tokens or a wrong token file: invalid_input, named.
    serve(Registry(settings=settings), http_port, host, token_file)


@cli.group()
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
    password = read_password(password_stdin)
    logins.check_login(name, password)  # before the embedded server is started
    started = time.monotonic()
    with settings.connect() as conn:
        created = logins.add_operator(conn, name, password)
        log_change("operator_add", conn, started, login=name, outcome="created" if created else "updated")
    if as_json:
        click.echo(json_text({"login": name, "created": created, "grants": list(logins.OPERATOR_GRANTS)}))
    else:
        click.echo(f"{'created' if created else 'updated'} login {name} with payrail_operator and payrail_embedder: sign in to the backoffice as {name}")


def read_password(password_stdin: bool) -> str:
    """The password from the first line of standard input, or asked for twice on the terminal."""
    if not password_stdin:
        return click.prompt("Password", hide_input=True, confirmation_prompt=True)
    line = sys.stdin.buffer.readline()
    try:
        return line.decode("utf-8").removesuffix("\n").removesuffix("\r")
    except UnicodeDecodeError:
        raise Failure("invalid_input", "the password on standard input is not UTF-8 text") from None


@cli.group()
def agent():
    """Give an agent a PostgreSQL login that may only search."""


@agent.command("add")
@click.argument("name")
@click.option("--password-stdin", is_flag=True, help="Read the password from the first line of standard input instead of asking for it.")
@click.option("--no-password", is_flag=True, help="No password: for peer or certificate authentication (pg_hba.conf).")
@click.option("--connection-limit", default=20, show_default=True, type=click.IntRange(1, 10_000), help="Connections the login may hold at once.")
@click.option("--statement-timeout", default="2s", show_default=True, help="Longest statement: a search waiting on a lock or a slow disk ends.")
@click.option("--idle-in-transaction-timeout", default="10s", show_default=True, help="Longest idle time inside a transaction before the session ends.")
@JSON_OPTION
@click.pass_obj
def agent_add(settings: Settings, name, password_stdin, no_password, connection_limit, statement_timeout, idle_in_transaction_timeout, as_json):
    """Create the login NAME granted payrail_agent only, with a connection limit and timeouts.

    The login can call the search functions and read nothing else (docs/security.md); search
    holds its sessions to the timeouts given here. Asks for the password twice (or reads it with
    --password-stdin; --no-password for peer or certificate authentication); the server
    receives only its SCRAM verifier. For an existing role it sets the same, unless that role
    could read more than an agent may (a superuser, an operator).
    """
    if password_stdin and no_password:
        raise click.UsageError("--password-stdin and --no-password: choose one")
    login = logins.AgentLogin(name, None if no_password else read_password(password_stdin), connection_limit, statement_timeout, idle_in_transaction_timeout)
    logins.check_agent(login)  # before the embedded server is started
    started = time.monotonic()
    with settings.connect() as conn:
        try:
            created = logins.add_agent(conn, login)
        except psycopg.errors.InvalidParameterValue as error:
            raise Failure("invalid_input", f"{error.diag.message_primary}; nothing was changed") from None
        log_change("agent_add", conn, started, login=name, outcome="created" if created else "updated")
    if as_json:
        click.echo(json_text({"login": name, "created": created, "grants": ["payrail_agent"], "connectionLimit": connection_limit}))
    else:
        how = "without a password (peer or certificate authentication)" if no_password else "with a password"
        click.echo(
            f"{'created' if created else 'updated'} login {name} {how}, granted payrail_agent only, at most {connection_limit} connections, "
            f"statement_timeout {statement_timeout}: agents connect as postgresql://{name}@HOST/DATABASE"
        )


def positive_option(name: str, default: int, help: str):
    return click.option(name, default=default, show_default=True, type=click.IntRange(min=1), help=help)


@cli.command("backoffice")
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
    max_upload_mb,
):
    """Serve the operators' web interface: records, edits, history, Try a query, import and export.

    Operators sign in with a PostgreSQL role granted payrail_operator and payrail_embedder, and
    its password, which PostgreSQL must check; every change is made as that role, through the
    same write path as import. Prints the URL it serves; on the embedded default, operators sign
    in with a login made by `payrail-embedder operator add NAME`.
    """
    from .backoffice.server import serve  # the web stack loads only for this command
    from .backoffice.sessions import SessionLimits

    limits = SessionLimits(session_idle_timeout, session_max_age, session_recheck, max_sessions, max_sessions_per_role)
    serve(settings, host, port, limits, max_upload_mb * 1_000_000, public_url)
