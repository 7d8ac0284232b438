"""The bulk actions the registry recorded (payrail.bulk_actions, and the records each changed), and
undoing an operator's last one in one step.

Undo does what a person expects of it, as new versions with history entries, never by rewriting
the history: the undo of an enable disables those same records again, the undo of a disable
enables them again, and the undo of a delete brings the deleted records back from the history
through the write path (their last version's fields, as new records since a deleted record's id
is not reused; their content embedded first, those that were enabled enabled again); the golden
queries a delete took with it are not in the history, and stay gone. The undo is a bulk action
itself, recorded as undoing the other: an action is undone once, and an undo is not undone.

Only your last bulk action is undone (the last one payrail._author() names, as the registry
stamps the author), and only while every record it changed is as it left it: a record saved,
enabled, disabled or deleted since, or (for a delete) a name another record has taken since,
refuses the undo in words and changes nothing. Re-doing it by hand is then a bulk action of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime

import psycopg
from psycopg.rows import dict_row

from ..base.errors import CodedError
from ..base.reports import Report
from ..base.safe_text import escape_controls
from ..embedders import Embedder
from . import bulk, stored
from .changes import Change, Outcome, Saved
from .write import check_changes, retry_transient, save_changes

# What undoing each operation does, in words: the verb, and what it is done to.
UNDOING = {"enable": "disable", "disable": "enable", "delete": "restore"}
DONE = {"enable": "enabled", "disable": "disabled", "delete": "deleted", "undo": "undid"}

ACTION_COLUMNS = """
  a.id, a.operation, a.selection, a.undoes, a.with_golden_queries, a.done_at, a.done_by,
  (select pg_catalog.count(*) from payrail.bulk_action_records as r where r.bulk_action_id = a.id) as records,
  (select u.id from payrail.bulk_actions as u where u.undoes = a.id) as undone_by
"""


@dataclass(frozen=True)
class BulkAction:
    """One bulk action as the registry recorded it."""

    id: int
    operation: str  # enable, disable, delete or undo
    selection: str
    undoes: int | None
    with_golden_queries: bool
    done_at: datetime
    done_by: str
    # How many records it changed.
    records: int
    # The undo that undid it, if one did.
    undone_by: int | None

    def done(self) -> str:
        """What it did, in words: 'disabled 12 records (text "acme")'; the filter's control characters escaped."""
        if self.operation == "undo":
            return f"undid bulk action {self.undoes} ({_records(self.records)})"
        golden = " and took them out of their golden queries" if self.with_golden_queries else ""
        return f"{DONE[self.operation]} {_records(self.records)} ({escape_controls(self.selection)}){golden}"

    def what(self) -> str:
        """Who did what: 'ada disabled 12 records (text "acme")' (the role name's control characters escaped)."""
        return f"{escape_controls(self.done_by)} {self.done()}"

    def in_words(self) -> str:
        """'bulk action 12: ada disabled 12 records (text "acme") at 2026-05-04 09:12:33 UTC'."""
        return f"bulk action {self.id}: {self.what()} at {self.done_at.astimezone(UTC).strftime('%Y-%m-%d %H:%M:%S UTC')}"

    @property
    def undo_in_words(self) -> str:
        """What undoing it does: 'disable these 12 records again', 'restore these 12 deleted records'."""
        these = "this record" if self.records == 1 else f"these {self.records:,} records"
        if self.operation == "delete":
            return f"restore {these.replace('record', 'deleted record')}"
        return f"{UNDOING.get(self.operation, 'undo')} {these} again"

    def to_json(self) -> dict:
        return {
            "bulkAction": self.id,
            "operation": self.operation,
            "selection": self.selection,
            "undoes": self.undoes,
            "withGoldenQueries": self.with_golden_queries,
            "doneAt": self.done_at.isoformat(),
            "doneBy": self.done_by,
            "records": self.records,
            "undoneBy": self.undone_by,
        }


def _records(n: int) -> str:
    return f"{n:,} record{'' if n == 1 else 's'}"


def _actions(conn: psycopg.Connection, where: str, parameters: tuple) -> list[BulkAction]:
    rows = conn.cursor(row_factory=dict_row).execute(f"select {ACTION_COLUMNS} from payrail.bulk_actions as a where {where}", parameters).fetchall()
    return [BulkAction(**row) for row in rows]


def get_action(conn: psycopg.Connection, action_id: int) -> BulkAction | None:
    found = _actions(conn, "a.id = %s", (action_id,))
    return found[0] if found else None


def last_action(conn: psycopg.Connection) -> BulkAction | None:
    """Your last bulk action: the latest whose author is the one this connection writes as (payrail._author)."""
    found = _actions(conn, "a.id = (select max(l.id) from payrail.bulk_actions as l where l.done_by = payrail._author())", ())
    return found[0] if found else None


@dataclass(frozen=True)
class BulkChange:
    """One record's part in a bulk action: the version it found (its history entry keeps it) and the one it left."""

    record_id: int
    version_before: int | None
    version_after: int | None
    action: BulkAction


def changes_of(conn: psycopg.Connection, record_ids: Iterable[int]) -> list[BulkChange]:
    """Every bulk action's part in these records, for their history."""
    rows = conn.execute(
        "select r.record_id, r.version_before, r.version_after, r.bulk_action_id from payrail.bulk_action_records as r where r.record_id = any(%s)",
        (list(record_ids),),
    ).fetchall()
    actions = {action.id: action for action in _actions(conn, "a.id = any(%s)", ([row[3] for row in rows],))}
    return [BulkChange(record_id, before, after, actions[action_id]) for record_id, before, after, action_id in rows]


@dataclass(frozen=True)
class UndoResult(Report):
    """What undoing a bulk action did (or, previewed, would do), or why it cannot be undone."""

    action: BulkAction
    # The records the undo changes (enable, disable), or those the action deleted (restore).
    records: tuple[int, ...]
    # "Provider / Method" of each, as the undo finds them (a deleted record's from the history).
    names: dict[int, str]
    # Why it is not undone (nothing was changed); empty when it is (or can be).
    refusals: tuple[str, ...] = ()
    applied: bool = True
    # The records a restore created, in the order of records.
    restored: tuple[int, ...] = ()
    # How many of the records a restore brings back were enabled when they were deleted (and are again).
    reenabled: int = 0
    # The bulk action the undo was.
    undone_as: int | None = None

    @property
    def acting_on(self) -> tuple[int, ...]:
        return () if self.refusals else self.records

    def in_words(self) -> str:
        action = self.action
        if self.refusals:
            return f"Not undone: {'; '.join(self.refusals)}. Nothing was changed."
        verb = UNDOING[action.operation]
        n = _records(len(self.records))
        if not self.applied:
            what = f"restore {n} it deleted, as new records" if verb == "restore" else f"{verb} {n} again"
            return f"Would {what}, undoing {action.in_words()}.{self._golden_note()}"
        if verb == "restore":
            shown = ", ".join(map(str, self.restored[:CHANGED_SHOWN])) + (
                f" and {len(self.restored) - CHANGED_SHOWN:,} more" if len(self.restored) > CHANGED_SHOWN else ""
            )
            done = f"Restored {n} that bulk action {action.id} deleted, as new records {shown} ({self.reenabled:,} enabled again, content embedded first)"
        else:
            done = f"{verb.capitalize()}d {n} again"
        return f"{done}: bulk action {action.id} is undone (as bulk action {self.undone_as}).{self._golden_note()}"

    def _golden_note(self) -> str:
        if not self.action.with_golden_queries:
            return ""
        return " The golden queries it deleted with them are not restored (the history keeps none): add them again with `payrail-embedder golden add`."

    def describe(self) -> list[str]:
        return [self.in_words()]

    def to_json(self) -> dict:
        return {
            "undone": self.action.to_json(),
            "applied": self.applied and not self.refusals,
            "records": list(self.records),
            "restored": list(self.restored),
            "reenabled": self.reenabled,
            "refusals": list(self.refusals),
            "undoneAs": self.undone_as,
        }

    def log_fields(self) -> dict:
        """The operators' log line's fields (event bulk_undo), the same from every face."""
        return {
            "failed": bool(self.refusals),
            "bulk_action": self.action.id,
            "undone_as": self.undone_as,
            "records": len(self.records),
            "reason": "; ".join(self.refusals) or None,
        }


class NoSuchBulkAction(CodedError):
    """No bulk action has that id (a form is anyone's to write)."""

    code = "invalid_input"


class _NotUndone(Exception):
    """Raised in a restore's transaction when the action is no longer yours to undo: it rolls back."""

    def __init__(self, refusals: list[str]) -> None:
        self.refusals = refusals


# The undo of an action whose undo another session committed meanwhile fails on this constraint.
UNDONE_ONCE = "bulk_actions_undoes_key"


def _why_not(conn: psycopg.Connection, action_id: int) -> tuple[BulkAction, list[str]]:
    """The action, and why it is not yours to undo now (empty when it is). NoSuchBulkAction when there is none."""
    action, last = get_action(conn, action_id), last_action(conn)
    if action is None:
        raise NoSuchBulkAction(f"there is no bulk action {action_id}")
    if last is None or last.id != action.id:
        yours = f"yours is bulk action {last.id}" if last else "you have none"
        return action, [f"bulk action {action.id} is not your last bulk action ({yours}): only your last is undone"]
    if action.operation == "undo":
        return action, [f"your last bulk action ({action.id}) was the undo of bulk action {action.undoes}; an undo is not undone: do it again instead"]
    if action.undone_by is not None:
        return action, [f"bulk action {action.id} is undone already (by bulk action {action.undone_by})"]
    return action, []


def undo(conn: psycopg.Connection, embedder_factory: Callable[[], Embedder], action_id: int, *, preview: bool = False) -> UndoResult:
    """Undoes your last bulk action, action_id (the one the question showed), in one transaction;
    preview: says what it would do. A result with refusals changed nothing. Raises
    NoSuchBulkAction, what the write path raises for a restore (EmbeddingUnavailable: nothing
    restored), TransientFailure and database errors. conn must be in autocommit mode for a restore.
    """
    action, refusals = _why_not(conn, action_id)
    if refusals:
        return _refused(action, refusals)
    if action.operation == "delete":
        return _restore(conn, embedder_factory, action, preview)
    return _set_enabled_back(conn, action, preview)


def _refused(action: BulkAction, refusals: list[str]) -> UndoResult:
    return UndoResult(action, (), {}, tuple(refusals), applied=False)


def _undone_meanwhile(error: psycopg.errors.UniqueViolation, action: BulkAction) -> UndoResult:
    if error.diag.constraint_name != UNDONE_ONCE:
        raise error
    return _refused(action, [f"bulk action {action.id} was undone by another session meanwhile"])


def _set_enabled_back(conn: psycopg.Connection, action: BulkAction, preview: bool) -> UndoResult:
    """The undo of an enable or a disable: the same records set back, each a new version."""
    enabled = action.operation == "disable"

    def once() -> UndoResult:
        with conn.transaction():
            changes = conn.execute(
                "select r.record_id, r.operation, r.version_after from payrail.bulk_action_records as r where r.bulk_action_id = %s order by r.record_id",
                (action.id,),
            ).fetchall()
            ids = [record_id for record_id, _, _ in changes]
            conn.execute("select from payrail.provider_methods as pm where pm.id = any(%s) order by pm.id for update", (ids,))
            # Read again under the locks: an undo or an action committed meanwhile is seen.
            current, refusals = _why_not(conn, action.id)
            rows = conn.cursor(row_factory=dict_row).execute(
                f"select pm.id, pm.provider, pm.method, pm.version, pm.has_current_vector from {stored.RECORDS} as pm where pm.id = any(%s)", (ids,)
            )
            now = {row["id"]: row for row in rows}
            names = {record_id: f"{row['provider']} / {row['method']}" for record_id, row in now.items()}
            refusals += _changed_since(changes, now, enabled)
            if refusals:
                return _refused(current, refusals)
            undone_as = None
            if not preview:
                undone_as = bulk.begin(conn, "undo", f"undo of bulk action {action.id}", undoes=action.id)
                conn.execute("update payrail.provider_methods as pm set enabled = %s where pm.id = any(%s)", (enabled, ids))
            return UndoResult(current, tuple(ids), names, applied=not preview, undone_as=undone_as)

    try:
        return retry_transient(once)
    except psycopg.errors.UniqueViolation as error:
        return _undone_meanwhile(error, action)


def _changed_since(changes: list[tuple], now: dict[int, dict], enabled: bool) -> list[str]:
    """Why the records an enable or disable changed cannot be set back, in words: changed since."""
    moved = []
    for record_id, operation, version_after in changes:
        row = now.get(record_id)
        name = f"{escape_controls(row['provider'])} / {escape_controls(row['method'])}" if row else f"record {record_id}"
        if operation != "update":
            moved.append(f"{name} was {'created' if operation == 'insert' else 'deleted'} by it, which its undo does not undo")
        elif row is None:
            moved.append(f"{name} was deleted since")
        elif row["version"] != version_after:
            moved.append(f"{name} was saved since (version {row['version']} now; the action left version {version_after})")
        elif enabled and not row["has_current_vector"]:
            moved.append(f"{name} has no embedding of its content by the registry's model now (run `payrail-embedder sync` first)")
    return _named(moved)


def _named(reasons: list[str]) -> list[str]:
    """The first CHANGED_SHOWN reasons, and how many more."""
    more = len(reasons) - CHANGED_SHOWN
    return reasons[:CHANGED_SHOWN] + ([f"and {more:,} more"] if more > 0 else [])


# The records an undo's refusal names, at most.
CHANGED_SHOWN = 10

DELETED_VERSIONS = """
select h.* from payrail.bulk_action_records as r
join payrail.provider_method_history as h
  on h.provider_method_id = r.record_id and h.version = r.version_before and h.operation = 'delete'
where r.bulk_action_id = %s and r.operation = 'delete'
order by r.record_id
"""


def _restore(conn: psycopg.Connection, embedder_factory: Callable[[], Embedder], action: BulkAction, preview: bool) -> UndoResult:
    """The undo of a delete: each deleted record's last version, from the history, saved as a new
    record through the write path (embedded first; enabled as it was), all or none."""
    entries = conn.cursor(row_factory=dict_row).execute(DELETED_VERSIONS, (action.id,)).fetchall()
    if len(entries) != action.records:
        return _refused(action, [f"it changed {action.records - len(entries):,} records otherwise than by deleting them, which its undo does not undo"])
    ids = tuple(entry["provider_method_id"] for entry in entries)
    names = {entry["provider_method_id"]: f"{entry['provider']} / {entry['method']}" for entry in entries}
    changes = [Change(stored.record_of(entry), None, 0) for entry in entries]
    reenabled = sum(1 for entry in entries if entry["enabled"])
    if preview:
        return _restore_result(action, ids, names, check_changes(conn, changes), reenabled, preview=True)
    undone_as: list[int] = []

    def begin_undo(transaction: psycopg.Connection) -> None:
        # Asked again in the transaction that saves: an undo or action committed meanwhile is seen.
        _, refusals = _why_not(transaction, action.id)
        if refusals:
            raise _NotUndone(refusals)
        undone_as[:] = [bulk.begin(transaction, "undo", f"undo of bulk action {action.id}", undoes=action.id)]

    try:
        outcomes = save_changes(conn, embedder_factory, changes, in_transaction=begin_undo)
    except _NotUndone as refused:
        return _refused(action, refused.refusals)
    except psycopg.errors.UniqueViolation as error:
        return _undone_meanwhile(error, action)
    result = _restore_result(action, ids, names, outcomes, reenabled, preview=False)
    if result.refusals:
        return result
    restored = tuple(outcome.record_id for outcome in outcomes if isinstance(outcome, Saved))
    return replace(result, restored=restored, undone_as=undone_as[0], action=get_action(conn, action.id) or action)


def _restore_result(
    action: BulkAction, ids: tuple[int, ...], names: dict[int, str], outcomes: Sequence[Outcome | None], reenabled: int, *, preview: bool
) -> UndoResult:
    """What the restore did or would do, or each record the write path refuses to bring back and why (nothing restored)."""
    refusals = [
        f"{escape_controls(names[record_id])} cannot come back: {outcome.reason}"
        for record_id, outcome in zip(ids, outcomes)
        if outcome is not None and not isinstance(outcome, Saved)
    ]
    return UndoResult(action, ids, names, tuple(_named(refusals)), applied=not preview and not refusals, reenabled=reenabled)
