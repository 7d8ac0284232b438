"""Enable, disable or delete many records at once: those named by id, or every one the records list's filter matches.

The backoffice's bulk actions (and the command line's `enable` / `disable`) call set_enabled. It
saves each record as stored with its new `enabled` through the write path's statement
(payrail.save_provider_methods), in one transaction, so the table's triggers do what they do for
a single save: a new version of each record changed, saved_by the acting role, the history
keeping the version before. The rule that decides is the database's: an enabled record needs a
vector of its current content by the registry's model, and the statement answers which drafts
have none (needs_embedding). Such a draft is left a draft and counted as refused: the others are
enabled all the same, since an operator who enables "every draft" after an import wants what can
be found enabled now, and the rest named with what to do. Unlike a single save, a bulk enable
embeds nothing: `payrail-embedder sync` embeds every draft that needs it, outside any
transaction, and a web request never waits for thousands of embeddings. Anything else that fails
(the database, a lock that kept deadlocking) changes nothing.

delete_records is the same shape for payrail.delete_provider_method: records golden queries name
are kept and counted (unless with_golden_queries), the others deleted.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import psycopg
from psycopg import sql

from ..base.reports import Report
from . import stored
from .changes import AsStored
from .write import answered, retry_transient


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

    @property
    def selected(self) -> int:
        """How many existing records the selection named."""
        return len(self.changed) + len(self.already) + len(self.needing_embedding)

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
        verb = "enable" if self.enabled else "disable"
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
        }


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def _missing(ids: tuple[int, ...]) -> list[str]:
    return [f"{_count(len(ids), 'record')} named no record (deleted meanwhile, or never there)"] if ids else []


def count(conn: psycopg.Connection, selection: Selection) -> int:
    """How many records the selection names now (what a confirmation says before set_enabled or delete_records)."""
    query = sql.SQL("select count(*) from ({}) as s").format(selection._ids())
    row = conn.execute(query).fetchone()
    return row[0] if row else 0


def set_enabled(conn: psycopg.Connection, selection: Selection, enabled: bool, *, preview: bool = False) -> BulkResult:
    """Sets enabled on every record of the selection that the rules allow, in one transaction;
    preview: the same, rolled back, to say what it would do.

    Enabling leaves a draft without a current vector a draft (BulkResult.needing_embedding, its
    reason in refusals()); the rest are enabled all the same. Disabling is never refused. Each
    record changed gets a new version and a history entry, saved by the acting role, as a single
    save makes; a record already so is left alone (no new version). The write path's statement
    locks the records in id order (every writer's lock order), so a concurrent save waits or is
    waited for, never overwritten half-way. A deadlock redoes the transaction (TransientFailure
    when it keeps happening); any other failure raises and changes nothing. conn may be in
    autocommit mode or in a transaction (then a savepoint is used, and the caller's commit decides).
    """

    def once() -> BulkResult:
        with conn.transaction(force_rollback=preview):
            ids = [row[0] for row in conn.execute(selection._ids())]
            outcomes = dict(zip(ids, _saved_as_stored(conn, ids, enabled)))
            # The save is all or nothing: the drafts that need a vector, and records deleted
            # meanwhile, are left out, and the others saved.
            kept = [record_id for record_id in ids if outcomes[record_id] == "ready"]
            if kept:
                outcomes |= dict(zip(kept, _saved_as_stored(conn, kept, enabled)))
        found = [record_id for record_id in ids if outcomes[record_id] != "conflict"]
        return BulkResult(
            enabled,
            tuple(record_id for record_id in found if outcomes[record_id] == "updated"),
            tuple(record_id for record_id in found if outcomes[record_id] == "unchanged"),
            tuple(record_id for record_id in found if outcomes[record_id] == "needs_embedding"),
            _not_found(selection, found),
            applied=not preview,
        )

    return retry_transient(once)


def _saved_as_stored(conn: psycopg.Connection, ids: list[int], enabled: bool) -> list[str]:
    """Each record as stored, with enabled, through payrail.save_provider_methods: each one's outcome."""
    if not ids:
        return []
    return [answer["outcome"] for answer in answered(conn, [AsStored(record_id, enabled) for record_id in ids], [None] * len(ids), embed_drafts=False)]


def _locked(conn: psycopg.Connection, selection: Selection) -> list[int]:
    """The ids of the records the selection names, locked for update in id order (every writer's lock order)."""
    return [row[0] for row in conn.execute(selection._ids() + sql.SQL(" for update"))]


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
        }


def delete_records(conn: psycopg.Connection, selection: Selection, *, with_golden_queries: bool = False, preview: bool = False) -> BulkDeleteResult:
    """Deletes every record of the selection through payrail.delete_provider_method (a single
    delete's rules, no version check), in one transaction; preview: says what it would do.

    A record golden queries name is kept and counted (named_by_golden_queries) while the others
    are deleted, unless with_golden_queries: then it leaves those queries, and each query that
    named only records deleted here goes too. The history keeps each deleted record's last version
    (restore brings it back as a draft). Failures and deadlocks as for set_enabled.
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
            if deleted and not preview:
                conn.execute(
                    "select payrail.delete_provider_method(d.id, null, %s) from pg_catalog.unnest(%s::bigint[]) with ordinality as d(id, n) order by d.n",
                    (with_golden_queries, deleted),
                )
        return BulkDeleteResult(tuple(deleted), tuple(sorted(named)), _not_found(selection, ids), applied=not preview)

    return retry_transient(once)
