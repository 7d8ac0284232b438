"""Enable, disable or delete many records at once: those named by id, or every one the records list's filter matches.

The backoffice's bulk actions (and the command line's `enable` / `disable`) call set_enabled. It
changes only `enabled`, saving each record as stored through the write path's statement
(payrail.save_provider_methods) in one transaction, so the table's triggers do what they do for a
single save: a new version of each record changed, saved_by the acting role, the
history keeping the version before. The rule that decides is the database's: an enabled record
needs a vector of its current content by the registry's model (provider_methods_enabled_needs_
embedding_check, asked through payrail.provider_method_states). A draft without one is left a
draft and counted as refused: the others are enabled all the same, since an operator who enables
"every draft" after an import wants what can be found enabled now, and the rest named with what
to do. Unlike a single save, a bulk enable embeds nothing: `payrail-embedder sync` embeds every
draft that needs it, outside any transaction, and a web request never waits for thousands of
embeddings. Anything else that fails (the database, a lock that kept deadlocking) changes nothing.

delete_records is the same shape for payrail.delete_provider_method: records golden queries name
are kept and counted (unless with_golden_queries), the others deleted.

Each action that changes something is one bulk action of the registry (payrail.begin_bulk_action,
in its transaction): the history shows its versions as one action, and undo.py undoes it.

A bulk action does what was confirmed. Its plan (which records it changes) is what a question
shows: a preview's result, whose digest() a confirmation carries. Given that digest (`confirmed`),
the action locks the records its selection names now, reads the selection again under those
locks, and refuses (ChangedSinceAsked, nothing changed) unless it would change exactly the same
records: one that came to match the filter since the question, one that stopped matching or was
deleted, or one whose state moved into or out of the change (a draft enabled meanwhile by someone
else) all refuse it. Without a digest (`--yes`, ticked rows) the action does what its selection
names when its transaction locks it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass

import psycopg
from psycopg import sql

from ..base.errors import CodedError
from ..base.reports import Report
from ..base.safe_text import json_text
from . import stored
from .changes import AsStored
from .write import TransientFailure, answered, retry_transient

# What a bulk action keeps of its selection, in words: the first ids, the filter's first characters.
SELECTION_IDS_SHOWN = 20
SELECTION_TEXT_SHOWN = 200
# How often a bulk action locks its selection again when records came to match it between the
# lock and the read under it (each time, another writer's commit landed in between).
LOCK_ATTEMPTS = 3


@dataclass(frozen=True)
class Selection:
    """The records a bulk action is for: record_ids when given, else every record the records
    list's filter matches (text and state as stored.list_records takes them; neither: every record)."""

    record_ids: tuple[int, ...] | None = None
    text: str = ""
    state: str | None = None

    @classmethod
    def of_ids(cls, record_ids: Iterable[int]) -> Selection:
        return cls(record_ids=tuple(dict.fromkeys(record_ids)))

    @classmethod
    def matching(cls, text: str = "", state: str | None = None) -> Selection:
        """ValueError for an unknown state (one of stored.STATES or None)."""
        stored.check_state(state)
        return cls(text=text, state=state)

    def _ids(self) -> sql.Composed:
        """A statement selecting the ids of the records it names, in id order (_locked adds the lock)."""
        if self.record_ids is not None:
            where = sql.SQL("pm.id = any({}::bigint[])").format(sql.Literal(list(self.record_ids)))
        else:
            # The records the list shows for the filter (payrail.list_provider_methods).
            where = sql.SQL("pm.id = any(select l.id from payrail.list_provider_methods({}, {}) as l)").format(
                sql.Literal(self.text.replace("\x00", "") or None), sql.Literal(self.state)
            )
        return sql.SQL("select pm.id from payrail.provider_methods as pm where {} order by pm.id").format(where)

    def describe(self) -> str:
        """What it names, in words, as the bulk action keeps it (payrail.bulk_actions.selection)."""
        if self.record_ids is not None:
            shown = ", ".join(map(str, self.record_ids[:SELECTION_IDS_SHOWN]))
            more = len(self.record_ids) - SELECTION_IDS_SHOWN
            return f"record{'s' if len(self.record_ids) != 1 else ''} {shown}" + (f" and {more:,} more" if more > 0 else "")
        text = self.text.replace("\x00", "")
        words = [f"text {json_text(text[:SELECTION_TEXT_SHOWN] + ('…' if len(text) > SELECTION_TEXT_SHOWN else ''))}" if text else ""]
        words.append(f"state {self.state}" if self.state else "")
        return ", ".join(filter(None, words)) or "every record"


@dataclass(frozen=True)
class BulkResult(Report):
    """What set_enabled did (or, previewed, would do) to each record of a selection, by id."""

    enabled: bool  # what the records were set to
    changed: tuple[int, ...]
    # Already enabled (or already drafts): nothing to do, no new version.
    already: tuple[int, ...]
    # Drafts not enabled: no vector of their current content by the registry's model.
    needing_embedding: tuple[int, ...]
    # Ids given that name no record (never existed, or deleted since the page was read).
    missing: tuple[int, ...]
    # False for a preview: nothing was written.
    applied: bool = True
    # The bulk action it was (payrail.bulk_actions.id); None when nothing was changed.
    bulk_action: int | None = None

    @property
    def selected(self) -> int:
        """How many existing records the selection named."""
        return len(self.changed) + len(self.already) + len(self.needing_embedding)

    @property
    def verb(self) -> str:
        return "enable" if self.enabled else "disable"

    @property
    def acting_on(self) -> tuple[int, ...]:
        """The records it changes (or would)."""
        return self.changed

    def digest(self) -> str:
        """What a confirmation carries: what it does to which records (_digest)."""
        return _digest(self.verb, self.acting_on)

    def refusals(self) -> list[str]:
        """Why some named records were not changed, in words; empty when none was refused."""
        words = []
        if self.needing_embedding:
            n = len(self.needing_embedding)
            has, its, them = ("has", "its", "it") if n == 1 else ("have", "their", "them")
            words.append(
                f"{_count(n, 'draft')} {has} no embedding of {its} current content yet, so agents could not find {them}: "
                f"run `payrail-embedder sync` first, then enable {them} again (or save each from its page, which embeds it)"
            )
        return words + _missing(self.missing)

    def describe(self) -> list[str]:
        return [self.in_words()]

    def in_words(self) -> str:
        """One paragraph for people: what changed, what was already so, and each refusal."""
        verb = self.verb
        if not (self.selected or self.missing):
            return f"No record matched: nothing {'was' if self.applied else 'would be'} {verb}d."
        sentence = f"{f'{verb}d' if self.applied else f'would {verb}'} {_count(len(self.changed), 'record')}".capitalize()
        if self.already:
            n = len(self.already)
            state = ("enabled" if self.enabled else "a draft") if n == 1 else ("enabled" if self.enabled else "drafts")
            sentence += f"; {n:,} {'was' if n == 1 else 'were'} {state} already"
        return sentence + "." + "".join(f" Not {verb}d: {reason}." for reason in self.refusals())

    def log_fields(self) -> dict:
        """The operators' log line's fields (event bulk_enable), the same from every face."""
        return {
            "failed": bool(self.refusals()),
            "enabled": self.enabled,
            "changed": len(self.changed),
            "already": len(self.already),
            "needing_embedding": len(self.needing_embedding) or None,
            "missing": len(self.missing) or None,
            "bulk_action": self.bulk_action,
        }

    def to_json(self) -> dict:
        return {
            "enabled": self.enabled,
            "applied": self.applied,
            "changed": list(self.changed),
            "already": list(self.already),
            "needingEmbedding": list(self.needing_embedding),
            "missing": list(self.missing),
            "refusals": self.refusals(),
            "bulkAction": self.bulk_action,
        }


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def _digest(verb: str, acting_on: tuple[int, ...]) -> str:
    """A plan's fingerprint: what it does to which records. Records it leaves alone (already so,
    refused, missing) are not in it: one of them moving changes nothing the action does."""
    return hashlib.sha256(json.dumps([verb, sorted(acting_on)]).encode()).hexdigest()


class ChangedSinceAsked(CodedError):
    """The records a bulk action names, or their states, are not those of the plan the operator
    confirmed: another writer changed them between the question and the answer. Nothing was
    changed; `now` is what the action would do now (a plan, applied False), to ask again."""

    def __init__(self, now: BulkResult | BulkDeleteResult) -> None:
        super().__init__(
            f"nothing was {now.verb}d: the records it would {now.verb} changed since you were asked "
            f"(another writer's change); it would now {now.verb} {_count(len(now.acting_on), 'record')}"
        )
        self.now = now


def _missing(ids: tuple[int, ...]) -> list[str]:
    return [f"{_count(len(ids), 'record')} named no record (deleted meanwhile, or never there)"] if ids else []


def moved_since(shown: BulkResult | BulkDeleteResult, now: BulkResult | BulkDeleteResult) -> dict[str, list[int]]:
    """What differs between the plan a question showed and the plan now, in words each with its
    record ids (sorted): the records it would change now and did not then, and the reverse."""
    before, after = set(shown.acting_on), set(now.acting_on)
    return {
        f"would be {now.verb}d now and were not when you were asked": sorted(after - before),
        f"would not be {now.verb}d now (changed, deleted or no longer matching)": sorted(before - after),
    }


def names(conn: psycopg.Connection, record_ids: Iterable[int]) -> dict[int, str]:
    """ "Provider / Method" of the records of these ids that exist."""
    rows = conn.execute("select pm.id, pm.provider || ' / ' || pm.method from payrail.provider_methods as pm where pm.id = any(%s)", (list(record_ids),))
    return {record_id: name for record_id, name in rows}


def count(conn: psycopg.Connection, selection: Selection) -> int:
    """How many records the selection names now (what a confirmation says before set_enabled or delete_records)."""
    query = sql.SQL("select count(*) from ({}) as s").format(selection._ids())
    row = conn.execute(query).fetchone()
    return row[0] if row else 0


def set_enabled(conn: psycopg.Connection, selection: Selection, enabled: bool, *, preview: bool = False, confirmed: str | None = None) -> BulkResult:
    """Sets enabled on every record of the selection that the rules allow, in one transaction;
    preview: says what it would do, writing nothing.

    Enabling leaves a draft without a current vector a draft (BulkResult.needing_embedding, its
    reason in refusals()); the rest are enabled all the same. Disabling is never refused. Each
    record changed gets a new version and a history entry, saved by the acting role, as a single
    save makes; a record already so is left alone (no new version). Records are locked in id order
    (every writer's lock order), so a concurrent save waits or is waited for, never overwritten
    half-way. confirmed: the digest() of the plan the operator was shown; ChangedSinceAsked,
    nothing changed, unless the plan is the same under the locks. A deadlock redoes the
    transaction (TransientFailure when it keeps happening); any other failure raises and changes
    nothing. conn may be in autocommit mode or in a transaction (then a savepoint is used, and the
    caller's commit decides).
    """

    def once() -> BulkResult:
        with conn.transaction():
            ids = _locked(conn, selection)
            states = conn.execute(
                f"select pm.id, pm.enabled, pm.has_current_vector from {stored.RECORDS} as pm where pm.id = any(%s) order by pm.id",
                (ids,),
            ).fetchall()
            already = tuple(record_id for record_id, is_enabled, _ in states if is_enabled == enabled)
            needing = tuple(record_id for record_id, is_enabled, current in states if enabled and not is_enabled and not current)
            changed = tuple(record_id for record_id, is_enabled, current in states if is_enabled != enabled and (current or not enabled))
            plan = BulkResult(enabled, changed, already, needing, _not_found(selection, ids), applied=False)
            _check_confirmed(plan, confirmed)
            action = None
            if changed and not preview:
                action = begin(conn, plan.verb, selection.describe())
                _save_enabled(conn, changed, enabled)
        return BulkResult(enabled, changed, already, needing, plan.missing, applied=not preview, bulk_action=action)

    return retry_transient(once)


def _save_enabled(conn: psycopg.Connection, changed: tuple[int, ...], enabled: bool) -> None:
    """Each record as stored, with enabled, saved through payrail.save_provider_methods, all in
    the caller's transaction; the records were locked and judged: each is saved."""
    changes = [AsStored(record_id, enabled) for record_id in changed]
    outcomes = [answer["outcome"] for answer in answered(conn, changes, [None] * len(changes), embed_drafts=False)]
    if any(outcome != "updated" for outcome in outcomes):
        raise AssertionError(f"records locked to be {'enabled' if enabled else 'disabled'} were not all saved: {outcomes}")


def begin(conn: psycopg.Connection, operation: str, selection: str, *, undoes: int | None = None, with_golden_queries: bool = False) -> int:
    """Begins a bulk action in conn's transaction (payrail.begin_bulk_action): every record it then
    changes is written down as part of it. Its id."""
    row = conn.execute("select payrail.begin_bulk_action(%s, %s, %s, %s)", (operation, selection, undoes, with_golden_queries)).fetchone()
    assert row is not None
    return row[0]


def _check_confirmed(plan: BulkResult | BulkDeleteResult, confirmed: str | None) -> None:
    """ChangedSinceAsked unless the plan is the one confirmed (when one was)."""
    if confirmed is not None and plan.digest() != confirmed:
        raise ChangedSinceAsked(plan)


def _locked(conn: psycopg.Connection, selection: Selection) -> list[int]:
    """The ids of the records the selection names, locked for update in id order (every writer's
    lock order), as a statement after the locks reads them.

    A record another transaction was changing when the lock waited for it is locked as it
    matched before that change: the selection is read again, in a statement of its own, so one
    that stopped matching is left out. One that came to match between the two is not locked:
    the whole is locked again (TransientFailure when that keeps happening).
    """
    for _ in range(LOCK_ATTEMPTS):
        locked = {row[0] for row in conn.execute(selection._ids() + sql.SQL(" for update"))}
        ids = [row[0] for row in conn.execute(selection._ids())]
        if locked.issuperset(ids):
            return ids
    raise TransientFailure(f"records kept coming to match the selection while it was locked ({LOCK_ATTEMPTS} times); nothing was changed, run it again")


def _not_found(selection: Selection, found: list[int]) -> tuple[int, ...]:
    """The ids the selection gave that name no record."""
    existing = set(found)
    return tuple(record_id for record_id in selection.record_ids or () if record_id not in existing)


@dataclass(frozen=True)
class BulkDeleteResult(Report):
    """What delete_records did (or, previewed, would do) to each record of a selection, by id."""

    deleted: tuple[int, ...]
    # Kept: golden queries name them (delete_records without with_golden_queries).
    named_by_golden_queries: tuple[int, ...]
    missing: tuple[int, ...]
    applied: bool = True
    # The bulk action it was (payrail.bulk_actions.id); None when nothing was deleted.
    bulk_action: int | None = None

    def refusals(self) -> list[str]:
        """Why some named records were not deleted, in words; empty when none was refused."""
        words = []
        if self.named_by_golden_queries:
            n = len(self.named_by_golden_queries)
            words.append(
                f"golden queries name {_count(n, 'record')}, which search is measured on: remove "
                f"{'it' if n == 1 else 'them'} from those queries first, or delete with the golden queries too"
            )
        return words + _missing(self.missing)

    def describe(self) -> list[str]:
        return [self.in_words()]

    verb = "delete"

    @property
    def acting_on(self) -> tuple[int, ...]:
        """The records it deletes (or would)."""
        return self.deleted

    def digest(self) -> str:
        """What a confirmation carries: what it does to which records (_digest)."""
        return _digest(self.verb, self.acting_on)

    def in_words(self) -> str:
        """One paragraph for people: what was deleted, and each refusal."""
        if not (self.deleted or self.named_by_golden_queries or self.missing):
            return f"No record matched: nothing {'was' if self.applied else 'would be'} deleted."
        sentence = f"{'Deleted' if self.applied else 'Would delete'} {_count(len(self.deleted), 'record')}"
        if self.applied and self.deleted:
            sentence += " (the history keeps the last version of each)"
        return sentence + "." + "".join(f" Not deleted: {reason}." for reason in self.refusals())

    def to_json(self) -> dict:
        return {
            "applied": self.applied,
            "deleted": list(self.deleted),
            "namedByGoldenQueries": list(self.named_by_golden_queries),
            "missing": list(self.missing),
            "refusals": self.refusals(),
            "bulkAction": self.bulk_action,
        }


def delete_records(
    conn: psycopg.Connection, selection: Selection, *, with_golden_queries: bool = False, preview: bool = False, confirmed: str | None = None
) -> BulkDeleteResult:
    """Deletes every record of the selection through payrail.delete_provider_method (a single
    delete's rules, no version check), in one transaction; preview: says what it would do.

    A record golden queries name is kept and counted (named_by_golden_queries) while the others
    are deleted, unless with_golden_queries: then it leaves those queries, and each query that
    named only records deleted here goes too. The history keeps each deleted record's last version
    (restore brings it back as a draft). confirmed, failures and deadlocks as for set_enabled.
    """

    def once() -> BulkDeleteResult:
        with conn.transaction():
            ids = _locked(conn, selection)
            named: list[int] = []
            if not with_golden_queries:
                named = [
                    row[0] for row in conn.execute("select distinct r.record_id from payrail.golden_query_records as r where r.record_id = any(%s)", (ids,))
                ]
            deleted = sorted(set(ids) - set(named))
            plan = BulkDeleteResult(tuple(deleted), tuple(sorted(named)), _not_found(selection, ids), applied=False)
            _check_confirmed(plan, confirmed)
            action = None
            if deleted and not preview:
                action = begin(conn, "delete", selection.describe(), with_golden_queries=with_golden_queries)
                conn.execute(
                    "select payrail.delete_provider_method(d.id, null, %s) from pg_catalog.unnest(%s::bigint[]) with ordinality as d(id, n) order by d.n",
                    (with_golden_queries, deleted),
                )
        return BulkDeleteResult(plan.deleted, plan.named_by_golden_queries, plan.missing, applied=not preview, bulk_action=action)

    return retry_transient(once)
