"""The registry's records: import, export, list, sync, edit, history and restore."""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import time
from pathlib import Path

import click
import psycopg

from ..base import input_files
from ..base.errors import EXIT_STATUS
from ..base.output_files import output_file
from ..base.progress import progress
from ..base.reports import emit
from ..faces import edit as edit_module
from ..quality import golden_rankings, restores
from ..registry import advice, catalog, sources, stored
from ..registry import history as history_module
from ..registry import sync as sync_module
from ..registry.changes import Conflict, Refused, Saved
from ..registry.records import RECORD_LINE, Line, parse_lines
from ..registry.write import save_change
from ..settings import Settings
from .common import BATCH_SIZE_OPTION, JSON_OPTION, NAME_ARGUMENT, Failure, embedding_run_fields, log_change


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


@click.command("import")
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, allow_dash=True, path_type=Path))
@click.option("--skip-invalid", is_flag=True, help="Save the valid lines even when some are refused.")
@click.option(
    "--enable", "enable", is_flag=True, help="Enable every record of the files, whatever their lines say (a catalog you trust): agents can find them at once."
)
@click.option(
    "--source",
    metavar="NAME",
    help='Where the records came from, for every line whatever it says (default: a line\'s own "source", else its file\'s name for a new record; - is "stdin").',
)
@JSON_OPTION
@click.pass_obj
def import_(settings: Settings, files, skip_invalid, enable, source, as_json):
    """Upsert records from JSON Lines FILES, by (provider, method); - reads standard input.

    Each line: {"provider", "method", "urls", "docsUrl", "guidance", "enabled"}, and optionally
    "source": where the record came from, which `list --source`, the bulk commands and eval's
    figures by source go by (default: a new record gets the file's name, without its folders;
    an existing one keeps its own). Every line is
    checked against every rule first; new or changed content is then embedded and saved with the
    fields, a transaction per 2,048 lines (a rerun finishes an import that stopped midway). One
    refused line saves nothing unless --skip-invalid; exits 2 when a line was refused. Ends with
    the advice on the records it created or updated, a line per piece ("412 records have no
    Purpose line"; `advise` lists them), which never refuses a line.
    """
    started = time.monotonic()
    with contextlib.ExitStack() as opened:
        # Each input opened once (a pipe read once, into a temporary file), then read a batch at a
        # time in each pass (checked, then saved), never held whole.
        inputs = [opened.enter_context(input_files.open_input(path, line_limit=RECORD_LINE)) for path in files]
        total = count_lines(inputs)

        def lines():
            items = (
                item
                for path, each in zip(files, inputs, strict=True)
                for item in catalog.sourced(parse_lines(each.lines(), each.source), sources.of_file(path), source)
            )
            # Content is embedded before it is saved, so every record imported can be enabled.
            return (
                dataclasses.replace(item, record=dataclasses.replace(item.record, enabled=True)) if enable and isinstance(item, Line) else item
                for item in items
            )

        with settings.connect() as conn:
            for path in files if source is None else ():
                sources.check(conn, sources.of_file(path), f"the name of {path},", " Or give one with --source NAME.")
            if source is not None:
                sources.check(conn, source, "--source")
            started_at = advice.clock(conn)
            with progress("import", total) as advance:
                report = catalog.import_records(conn, settings.embedder, lines, skip_invalid=skip_invalid, progress=advance)
            report = dataclasses.replace(report, registry=stored.registry_held(conn), advice=advice.saved_since(conn, started_at))
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
    emit(report, as_json)
    if report.not_imported and not as_json:
        click.echo("Fix the refused lines and import again, or import with --skip-invalid to save the valid lines alone.", err=True)
    if report.refused:
        sys.exit(EXIT_STATUS["invalid_input"])


@click.command("export")
@click.option(
    "-o",
    "--output",
    metavar="FILENAME",
    type=click.Path(dir_okay=False, allow_dash=True),
    default="-",
    help="File to write (default: standard output), whole or not at all: it is renamed into place once written.",
)
@click.pass_obj
def export(settings: Settings, output):
    """Write every record as JSON Lines, in the format `import` reads (enabled included)."""
    with settings.connect() as conn, output_file(output) as written:
        for line in catalog.export_records(conn):
            written.write((line + "\n").encode("utf-8"))


@click.command("list")
@click.option("--text", default="", help="Only records whose provider, method, guidance or URLs contain TEXT, ignoring case.")
@click.option("--state", type=click.Choice(stored.STATES), help="Only records in this state.")
@click.option("--source", metavar="NAME", help="Only records that came from NAME (exactly as written: `list --sources` names them).")
@click.option("--sources", "list_sources", is_flag=True, help="List the sources instead: each with how many records, and enabled ones, came from it.")
@JSON_OPTION
@click.pass_obj
def list_(settings: Settings, text, state, source, list_sources, as_json):
    """List the records by provider and method (ignoring case): state, version, source, when and by whom saved.

    The backoffice's filters: --text matches provider, method, guidance and URLs ignoring case;
    --state is enabled, draft (with a vector of its current content) or "draft needing an
    embedding"; --source is where they came from (an import's file name, backoffice, edit, psql).
    With --json: {"records": [{"recordId", "provider", "method", "state", "version", "source",
    "savedAt", "savedBy"}, ...]}; with --sources, {"sources": [{"source", "records", "enabled"}, ...]}.
    """
    if list_sources and (text or state or source):
        raise click.UsageError("--sources lists every source; it takes no --text, --state or --source")
    with settings.connect() as conn:
        listed = history_module.listed_sources(conn) if list_sources else history_module.listed_records(conn, text, state, source)
    emit(listed, as_json)


@click.command("sync")
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
            emit(sync_module.WouldSync([sync_module.record_name(r) for r in sync_module.records_to_sync(conn)]), as_json)
            return
        with progress("sync", sum(1 for _ in sync_module.ids_to_sync(conn))) as advance:
            report = sync_module.sync(conn, settings.embedder(), batch_size=batch_size, progress=advance)
        report = dataclasses.replace(report, registry=stored.registry_held(conn))
        log_change(
            "sync",
            conn,
            started,
            failed=bool(report.pending or report.error),
            embedded=report.embedded,
            changed_meanwhile=report.changed_meanwhile,
            **embedding_run_fields(report),
        )
    emit(report, as_json)
    if report.pending or report.error:
        sys.exit(EXIT_STATUS["unavailable"])


@click.command("edit")
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
        emit(saved_record(conn, saved), as_json=False)


def saved_record(conn: psycopg.Connection, saved: Saved, deleted_since: int | None = None) -> history_module.SavedRecord:
    """What a save through the write path did to one record (edit, restore), as it is stored now."""
    record = stored.get(conn, saved.record_id)
    if record is None:
        raise Failure("unknown_record", f"record {saved.record_id} was {saved.outcome} as version {saved.version}, then deleted by another session")
    return history_module.SavedRecord(saved, record, deleted_since)


@click.command("history")
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
    emit(found, as_json)


def history_id_of(conn: psycopg.Connection, target: tuple[str, ...]) -> int:
    """The history id restore was given; a record's name instead (people type those) is refused
    with the ids of its versions."""
    if len(target) == 1 and target[0].isascii() and target[0].isdigit():
        if int(target[0]) < 1:
            raise Failure("invalid_input", f"a history id is 1 or more, not {target[0]}")
        return int(target[0])
    provider, method = stored.resolve_former_name(conn, target)
    versions = history_module.provider_method_history(conn, provider, method).versions
    ids = ", ".join(f"{v['historyId']} (version {v['version']})" for v in versions[:10]) or "none: it has no earlier version"
    raise Failure(
        "invalid_input",
        f"restore takes a history id, not a record; those of {provider} / {method}, newest first: {ids}. "
        f'`payrail-embedder history "{provider} / {method}"` shows what each holds',
    )


@click.command("restore")
@click.argument("target", nargs=-1, required=True, metavar="HISTORY_ID")
@click.option("--as-draft", is_flag=True, help="Restore it as a draft (disabled), e.g. to check it with preview before enabling it.")
@click.option("--yes", "-y", is_flag=True, help="Restore without asking (for scripts); it still prints what it changes.")
@JSON_OPTION
@click.pass_obj
def restore(settings: Settings, target, as_draft, yes, as_json):
    """Bring back the fields of an earlier version (HISTORY_ID, from `history`), through the write path.

    First it shows what the restore changes, field by field, and which golden queries' top three
    it changes (measured as an edit's preview is: saved in a transaction and rolled back), then
    asks on the terminal; without a terminal it restores nothing (exit 2) unless --yes. What it restores
    is what it showed: a save of the record meanwhile is a conflict (exit 1).

    The record keeps its enabled state (a draft with --as-draft): other content restored into an
    enabled record is embedded first, and the record stays enabled. A deleted record comes back
    as a new draft. The version it replaces is kept in the history, so a restore can be undone.
    Given a record's name instead, says the history ids of its versions. With --json:
    {"preview": {"historyId", "recordId", "version", "currentVersion", "deletedSince", "fields",
    "effect"}, "restored": true | false, and, restored, "outcome", "embeddedNow" and the record}.
    """
    started = time.monotonic()
    with settings.connect() as conn:
        history_id = history_id_of(conn, target)
        preview = restores.preview_restore(conn, settings.embedder, history_id, as_draft=as_draft)
        if preview is None:
            raise Failure("unknown_record", f"there is no history entry {history_id}; `payrail-embedder history PROVIDER METHOD` lists them")
        outcome = preview.outcome
        if isinstance(outcome, Saved) and not preview.changes_nothing:
            if not as_json:
                click.echo("\n".join(preview.describe()))
            if not (yes or confirmed_restore(preview, as_json)):
                emit(restores.Restored(preview, None), as_json)
                return
            outcome = save_change(conn, settings.embedder, preview.restoring.change, preview.embedding)
        if isinstance(outcome, Refused):
            raise Failure("invalid_input", f"not restored: {outcome.reason}")
        if isinstance(outcome, Conflict):
            raise Failure("unavailable", f"not restored: {outcome.reason}; nothing was changed, run it again to see what it changes now")
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
        entry = preview.restoring.entry
        deleted_since = entry["provider_method_id"] if outcome.record_id != entry["provider_method_id"] else None
        restored = restores.Restored(preview, saved_record(conn, outcome, deleted_since))
    emit(restored, as_json)


def confirmed_restore(preview: restores.RestorePreview, as_json: bool) -> bool:
    """The operator's answer to the restore shown (with --json, shown on standard error); refused
    in words off a terminal (no --yes)."""
    if not sys.stdin.isatty():
        raise Failure(
            "invalid_input",
            f"not restored: restoring {preview.label} asks first, and standard input is not a terminal; add --yes to restore it without asking",
        )
    if as_json:
        click.echo("\n".join(preview.describe()), err=True)
    return click.confirm(f"Restore {preview.label}?", err=True)
