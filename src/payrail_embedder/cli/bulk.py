"""Records by name or by filter: `show` one, `enable`, `disable` or `delete` many at once, and `undo` the last of those."""

from __future__ import annotations

import sys
import time

import click

from ..base.reports import emit
from ..base.safe_text import escape_controls
from ..registry import advice, bulk, stored
from ..registry import undo as undo_module
from ..settings import Settings
from .common import JSON_OPTION, Failure, log_change

NAMES_ARGUMENT = click.argument("names", nargs=-1, metavar="[RECORD]...")
FILTER_OPTIONS = (
    click.option("--text", default="", help="Every record whose provider, method, guidance or URLs contain TEXT, ignoring case (as `list`)."),
    click.option("--state", type=click.Choice(stored.STATES), help="Every record in this state (as `list`)."),
    click.option("--all", "every", is_flag=True, help="Every record of the registry."),
    click.option(
        "--yes",
        "-y",
        is_flag=True,
        help="Do it without asking (for scripts): to the records the selection names when it runs. Without it, asks on the terminal "
        "when more than one record would change, then does exactly that or nothing.",
    ),
    JSON_OPTION,
)


def filter_options(command):
    for option in reversed(FILTER_OPTIONS):
        command = option(command)
    return command


@click.command("show")
@click.argument("name", nargs=-1, metavar="PROVIDER METHOD")
@JSON_OPTION
@click.pass_obj
def show(settings: Settings, name, as_json):
    """Show one record and what it is to agents: PROVIDER METHOD, one "Provider / Method", or a
    provider's name when it has one method (with several, they are listed).

    Then the advice on how it fits the editorial template, as `advise` gives it (never a refusal;
    agents never see it); with --json, "advice": [{"code", "advice", "fix"}, ...].
    """
    with settings.connect() as conn:
        row = stored.find_by_name(conn, name)
        emit(stored.ShownRecord(row, tuple(advice.advice_on(conn, stored.record_of(row)))), as_json)


def selection_of(conn, names: tuple[str, ...], text: str, state: str | None, every: bool) -> bulk.Selection:
    """RECORD arguments (a record id, "Provider / Method", or a provider's name: all its methods),
    or the list's filter (--text, --state), or --all; one of them."""
    given = [bool(names), bool(text or state), every]
    if sum(given) != 1:
        raise click.UsageError('name records (an id, "Provider / Method" or a provider), or give --text / --state, or --all: one of them')
    if names:
        return bulk.Selection.of_ids(record_id for name in names for record_id in stored.ids_named(conn, name))
    return bulk.Selection.matching(text, state)


# The records a question names, at most: the count says the rest.
NAMES_SHOWN = 20


def confirmed(
    conn, preview: bulk.BulkResult | bulk.BulkDeleteResult | undo_module.UndoResult, verb: str, question: str | None = None, names: dict[int, str] | None = None
) -> bool:
    """Whether to go on without --yes: at once for one record; else the preview said, with the
    records it names, then asked on a terminal."""
    acting_on = preview.acting_on
    if len(acting_on) <= 1:
        return True
    if not sys.stdin.isatty():
        raise Failure("invalid_input", f"this would {verb} {len(acting_on):,} records: add --yes to do it without asking (standard input is not a terminal)")
    click.echo(preview.in_words(), err=True)
    names = names or bulk.names(conn, acting_on[:NAMES_SHOWN])
    for record_id in acting_on[:NAMES_SHOWN]:
        click.echo(f"  {escape_controls(names.get(record_id, f'record {record_id}'))}", err=True)
    if len(acting_on) > NAMES_SHOWN:
        click.echo(f"  ... and {len(acting_on) - NAMES_SHOWN:,} more", err=True)
    return click.confirm(question or f"{verb.capitalize()} these {len(acting_on):,} records?", err=True)


def changed_since(conn, shown: bulk.BulkResult | bulk.BulkDeleteResult, error: bulk.ChangedSinceAsked) -> Failure:
    """The refusal of an answer whose question is out of date, naming what moved."""
    moved = bulk.moved_since(shown, error.now)
    names = bulk.names(conn, [record_id for ids in moved.values() for record_id in ids[:5]])
    words = [
        f"{len(ids):,} {what} ({', '.join(escape_controls(names.get(i, f'record {i}')) for i in ids[:5])}{', ...' if len(ids) > 5 else ''})"
        for what, ids in moved.items()
        if ids
    ]
    return Failure("unavailable", f"{error}: {'; '.join(words)}. Run it again to be asked again")


def set_enabled(settings: Settings, names, text, state, every, yes, as_json, enabled: bool) -> None:
    verb = "enable" if enabled else "disable"
    started = time.monotonic()
    with settings.connect() as conn:
        selection = selection_of(conn, names, text, state, every)
        if yes:
            result = bulk.set_enabled(conn, selection, enabled)
        else:
            # What the question shows is what is done, or nothing (bulk.ChangedSinceAsked).
            preview = bulk.set_enabled(conn, selection, enabled, preview=True)
            if not confirmed(conn, preview, verb):
                click.echo("nothing changed", err=True)
                return
            try:
                result = bulk.set_enabled(conn, selection, enabled, confirmed=preview.digest())
            except bulk.ChangedSinceAsked as error:
                raise changed_since(conn, preview, error) from None
        log_change("bulk_enable", conn, started, **result.log_fields())
    emit(result, as_json)
    if result.refusals():
        sys.exit(2)


@click.command("enable")
@NAMES_ARGUMENT
@filter_options
@click.pass_obj
def enable(settings: Settings, names, text, state, every, yes, as_json):
    """Enable records, so agents can find them: by name or id, or every record a filter matches.

    A draft without an embedding of its current content stays a draft and is named (run
    `payrail-embedder sync` first); the others are enabled, in one transaction, each with a new
    version in its history. Asks before changing more than one record (--yes: does not).
    Exits 2 when some record was refused.
    """
    set_enabled(settings, names, text, state, every, yes, as_json, True)


@click.command("disable")
@NAMES_ARGUMENT
@filter_options
@click.pass_obj
def disable(settings: Settings, names, text, state, every, yes, as_json):
    """Disable records, making them drafts agents cannot find: by name or id, or by a filter.

    One transaction, each record changed with a new version in its history. Asks before
    changing more than one record, naming them (--yes: does not); if what it would change is not
    what it asked about when you answer, changes nothing and says so (exit 1).
    """
    set_enabled(settings, names, text, state, every, yes, as_json, False)


@click.command("delete")
@NAMES_ARGUMENT
@filter_options
@click.option("--with-golden-queries", is_flag=True, help="Also take the records out of the golden queries that name them (a query left naming none goes too).")
@click.pass_obj
def delete(settings: Settings, names, text, state, every, yes, as_json, with_golden_queries):
    """Delete records: by name or id, or every record a filter matches.

    The history keeps each one's last version (`payrail-embedder restore` brings it back as a
    draft). A record that golden queries name is kept and named, unless --with-golden-queries.
    One transaction; asks before deleting more than one record, naming them (--yes: does not);
    if what it would delete is not what it asked about when you answer, deletes nothing and says
    so (exit 1). Exits 2 when some record was kept.
    """
    started = time.monotonic()
    with settings.connect() as conn:
        selection = selection_of(conn, names, text, state, every)
        if yes:
            result = bulk.delete_records(conn, selection, with_golden_queries=with_golden_queries)
        else:
            preview = bulk.delete_records(conn, selection, with_golden_queries=with_golden_queries, preview=True)
            if not confirmed(conn, preview, "delete"):
                click.echo("nothing deleted", err=True)
                return
            try:
                result = bulk.delete_records(conn, selection, with_golden_queries=with_golden_queries, confirmed=preview.digest())
            except bulk.ChangedSinceAsked as error:
                raise changed_since(conn, preview, error) from None
        log_change(
            "bulk_delete",
            conn,
            started,
            failed=bool(result.refusals()),
            deleted=len(result.deleted),
            kept=len(result.named_by_golden_queries) or None,
            bulk_action=result.bulk_action,
        )
    emit(result, as_json)
    if result.refusals():
        sys.exit(2)


@click.command("undo")
@click.option("--yes", "-y", is_flag=True, help="Undo it without asking (for scripts); without it, asks on the terminal when it changes more than one record.")
@JSON_OPTION
@click.pass_obj
def undo(settings: Settings, yes, as_json):
    """Undo your last bulk action (`enable`, `disable`, `delete`, or the backoffice's bulk buttons), in one step.

    The undo of an enable disables the same records again, the undo of a disable enables them
    again, each with a new version in its history; the undo of a delete brings the deleted
    records back from the history as new records (their content embedded first, those that were
    enabled enabled again), but not golden queries deleted with them. Yours: the last one the
    history names you as the author of. Refused, changing nothing, when any of its records
    changed since (saved, enabled, disabled or deleted, or its name taken), when it was undone
    already, or when it is an undo itself (exit 2). Asks first on a terminal, naming the records,
    when it changes more than one (--yes: does not).
    """
    started = time.monotonic()
    with settings.connect() as conn:
        last = undo_module.last_action(conn)
        if last is None:
            raise Failure("invalid_input", "you have no bulk action to undo: `enable`, `disable` and `delete` (and the backoffice's bulk buttons) make them")
        result = None
        if not yes:
            # The question names the action and its records; the answer undoes that action or nothing.
            preview = undo_module.undo(conn, settings.embedder, last.id, preview=True)
            verb = undo_module.UNDOING.get(last.operation, "undo")
            if preview.refusals:
                result = preview
            elif not confirmed(conn, preview, verb, f"Undo bulk action {last.id}: {last.undo_in_words}?", preview.names):
                click.echo("nothing changed", err=True)
                return
        if result is None:
            result = undo_module.undo(conn, settings.embedder, last.id)
        log_change("bulk_undo", conn, started, **result.log_fields())
    emit(result, as_json)
    if result.refusals:
        sys.exit(2)
