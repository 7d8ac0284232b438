"""The write path: save records' public fields and enabled state, embedding changed content first.

`import`, `payrail-embedder edit` and the backoffice all save through save_changes. The rules are
the database's: payrail.save_provider_method writes a record, the table's constraints and triggers
judge it, and SQL says which record a change is for, how its names are stored, whether its
content changed and whether it conflicts (payrail.plan_provider_method_changes). This module
orders the work so that

1. every change is checked against every rule, in a transaction that is rolled back, before
   anything is embedded (a bad last line of a long file costs no embedding request); a save that
   embeds nothing skips this, its own statements refusing the same way;
2. content that changes, and records enabled without a current vector, are embedded with the
   registry's model, outside any transaction (no lock is held while the embedding service works);
3. fields and vectors are saved in one transaction, records locked in id order (so concurrent
   writers never deadlock each other), each checked against the version that was read.

Checks and saves first go in one pipelined batch, without a savepoint per change: the common case
(nothing refused, no other writer) costs one round trip. When something is refused or raced,
the batch is rolled back and done again change by change, each in a savepoint, to learn which.
Callers that stream (catalog.import_records) pass batches of bounded size.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import TypeVar

import numpy as np
import psycopg
from psycopg.rows import dict_row

from ..base import errcodes
from ..base.errors import CodedError, database_reason
from ..embedders import Embedder, EmbeddingUnavailable, batched, checked_vectors, made_once, record_text
from ..postgres import connection
from . import refusals
from .embedding_model import adopt_embedder_model, require_embedder_model
from .records import ProviderMethod, unstorable_fields, with_ascii_hosts

T = TypeVar("T")

# How often one change is planned and saved again when another writer changes its record meanwhile.
SAVE_ATTEMPTS = 3


@dataclass(frozen=True)
class Change:
    """Save these public fields (and enabled, None: keep it) for one record."""

    record: ProviderMethod
    # None: the record with the same provider and method (compared as the unique key compares), or a new one.
    record_id: int | None = None
    # The version the caller read and showed: a save over another version is a Conflict. 0: the
    # record must be new. None: the write path reads the version itself and, when another writer
    # changes the record meanwhile, plans the change again (import).
    expected_version: int | None = None


@dataclass(frozen=True)
class Saved:
    record_id: int
    version: int
    outcome: str  # "created", "updated" or "unchanged"
    embedded: bool


@dataclass(frozen=True)
class Refused:
    """Rules refused the change; nothing of it was saved."""

    reason: str
    # The JSON names of the fields the rules are about (empty when they are about none in particular).
    fields: tuple[str, ...] = ()
    # For a change of the same record as an earlier change in the same save: that change's position.
    same_as: int | None = None
    # Every rule the change breaks, in words.
    rules: tuple[refusals.BrokenRule, ...] = ()

    @classmethod
    def of(cls, rules: tuple[refusals.BrokenRule, ...]) -> Refused:
        return cls(refusals.reason(rules), tuple(dict.fromkeys(f for rule in rules for f in rule.fields)), rules=rules)


@dataclass(frozen=True)
class Conflict:
    """The record is not at the version the caller read: saved by someone else meanwhile, or deleted."""

    reason: str

    @classmethod
    def of(cls, error: psycopg.Error) -> Conflict:
        """The database's words for an edit conflict (PYE03, payrail._edit_conflict)."""
        return cls(error.diag.message_primary or str(error))


Unsaved = Refused | Conflict
Outcome = Saved | Unsaved


@dataclass(frozen=True)
class Embedding:
    """A vector made for a change's text, and the embedder (hence the model) that made it."""

    vector: np.ndarray
    embedder: Embedder


@dataclass
class _Plan:
    """What SQL says about one change before it is saved."""

    change: Change
    record_id: int | None
    version: int | None
    # The names as the database stores them (payrail._canonical_name): what is embedded and saved.
    provider: str
    method: str
    key: tuple[str, str]
    needs_embedding: bool
    # Why the change conflicts with the record as stored (payrail._edit_conflict), or None.
    conflict: str | None
    embedding: Embedding | None = None
    # What a check or the save decided: why the change stays unsaved, or what it saved.
    unsaved: Unsaved | None = None
    saved: Saved | None = None

    @property
    def text(self) -> str:
        return record_text(self.provider, self.method, self.change.record.guidance)

    @property
    def outcome(self) -> Outcome | None:
        return self.saved if self.saved is not None else self.unsaved


class TransientFailure(CodedError):
    """Another transaction kept getting in the way (deadlock, serialization); rerun later. Never a refusal."""

    code = "unavailable"


PLAN = """
select record_id, record_version, provider, method, provider_key, method_key, needs_embedding, conflict
from payrail.plan_provider_method_changes(%s, %s, %s, %s, %s, %s)
"""

SAVE = """
select record_id, record_version, outcome
from payrail.save_provider_method(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
"""


def _plan(conn: psycopg.Connection, changes: Sequence[Change]) -> list[_Plan]:
    # Text PostgreSQL cannot hold is not sent: _check_rules refuses such a change, naming the field.
    storable = [not unstorable_fields(c.record) for c in changes]
    columns = [
        [c.record_id for c in changes],
        [c.record.provider if ok else None for c, ok in zip(changes, storable)],
        [c.record.method if ok else None for c, ok in zip(changes, storable)],
        [c.record.guidance if ok else None for c, ok in zip(changes, storable)],
        [c.record.enabled for c in changes],
        [c.expected_version for c in changes],
    ]
    rows = conn.cursor(row_factory=dict_row).execute(PLAN, columns).fetchall()
    return [
        _Plan(
            change,
            row["record_id"],
            row["record_version"],
            row["provider"],
            row["method"],
            (row["provider_key"], row["method_key"]),
            row["needs_embedding"],
            row["conflict"],
        )
        for change, row in zip(changes, rows)
    ]


def _refusal(conn: psycopg.Connection, error: psycopg.Error, plan: _Plan) -> Refused:
    """Every rule the change breaks, in words (refusals), for the error the database refused it with."""
    change = plan.change
    # The record the values are saved as: a new one when the caller says so, else the one found.
    record_id = change.record_id if change.record_id is not None else (None if change.expected_version == 0 else plan.record_id)
    return Refused.of(refusals.broken_rules(conn, error, record_id, change.record))


def _save_arguments(plan: _Plan, as_draft_check: bool) -> tuple:
    """The arguments of payrail.save_provider_method for one planned change.

    as_draft_check: only to see whether every field rule holds (the caller rolls back): saved as
    a draft without a vector, so the vector rules, which the write path satisfies by embedding,
    do not get in the way.
    """
    record = plan.change.record
    expected = plan.change.expected_version
    if as_draft_check:
        expected = 0 if expected == 0 else None
    elif expected is None:
        expected = plan.version or 0
    embedding = None if as_draft_check else plan.embedding
    return (
        plan.change.record_id if plan.change.record_id is not None else plan.record_id,
        expected,
        plan.provider,
        plan.method,
        list(record.urls),
        record.docs_url,
        record.guidance,
        False if as_draft_check else record.enabled,
        embedding.vector if embedding is not None else None,
        embedding.embedder.model_name if embedding is not None else None,
        record.mixed_scripts,
    )


def _save_one(conn: psycopg.Connection, plan: _Plan, *, as_draft_check: bool = False) -> Saved:
    """payrail.save_provider_method for one planned change, in a savepoint."""
    arguments = _save_arguments(plan, as_draft_check)
    with conn.transaction():
        record_id, version, outcome = connection.one_row(conn.execute(SAVE, arguments))
    return Saved(record_id, version, outcome, arguments[8] is not None)


class _NotInOneBatch(Exception):
    """A change of a batch saved without savepoints failed: the batch is done again change by change."""


def _save_batch(conn: psycopg.Connection, plans: Sequence[_Plan], *, as_draft_check: bool = False) -> list[Saved]:
    """What every plan saved, by one pipelined round of payrail.save_provider_method, no
    savepoints; raises _NotInOneBatch when one fails (the transaction is then aborted) with an
    error that the change-by-change path decides (a refusal, a race)."""
    if not plans:
        return []
    arguments = [_save_arguments(plan, as_draft_check) for plan in plans]
    cursor = conn.cursor()
    try:
        cursor.executemany(SAVE, arguments, returning=True)
    except psycopg.Error as error:
        if errcodes.refuses_input(error.sqlstate) or error.sqlstate == errcodes.RECORD_CHANGED:
            raise _NotInOneBatch from error
        raise
    saved = []
    for args in arguments:
        record_id, version, outcome = connection.one_row(cursor)
        saved.append(Saved(record_id, version, outcome, args[8] is not None))
        cursor.nextset()
    return saved


def _key_digest(key: tuple) -> bytes:
    """A fixed-size stand-in for a change's key: a streamed import remembers one per line."""
    return hashlib.blake2b(repr(key).encode("utf-8", "surrogatepass"), digest_size=16).digest()


def _check_rules(
    conn: psycopg.Connection,
    plans: Sequence[_Plan],
    seen: dict[bytes, int] | None = None,
    positions: Sequence[int] | None = None,
    *,
    in_database: bool = True,
) -> None:
    """Sets the outcome of every change some rule refuses, checking all of them as drafts in a
    transaction that is rolled back: nothing is written, nothing is embedded.

    seen: the keys of changes checked before (key digest to position), for a caller that checks
    in batches; updated with these. positions: what to record for each change and report as
    same_as (default: its index). in_database False: only what is judged before any statement
    (text PostgreSQL cannot hold, a record named twice, an edit conflict), for a save that embeds
    nothing, which its own statements check as well (and roll back when a rule refuses).
    """
    first_of_key = {} if seen is None else seen
    for index, plan in enumerate(plans):
        position = index if positions is None else positions[index]
        problems = unstorable_fields(plan.change.record)
        if problems:
            plan.unsaved = Refused.of(refusals.unstorable(problems))
            continue
        key = _key_digest(("id", plan.record_id) if plan.change.record_id is not None else ("name", plan.key))
        if key in first_of_key:
            plan.unsaved = Refused("the same record as an earlier change", ("provider", "method"), first_of_key[key])
            continue
        first_of_key[key] = position
        if plan.conflict is not None:
            plan.unsaved = Conflict(plan.conflict)
    if not in_database:
        return
    to_check = sorted((p for p in plans if p.outcome is None), key=_lock_order)

    def check_once() -> None:
        try:
            with conn.transaction(force_rollback=True):
                _save_batch(conn, to_check, as_draft_check=True)
            for plan in to_check:
                plan.unsaved = None  # checked: no rule refuses it
            return
        except _NotInOneBatch:
            pass
        with conn.transaction(force_rollback=True):
            for plan in to_check:
                plan.unsaved = None  # a check that was redone starts afresh
                try:
                    _save_one(conn, plan, as_draft_check=True)
                except psycopg.Error as error:
                    if not errcodes.refuses_input(error.sqlstate):
                        raise
                    plan.unsaved = _refusal(conn, error, plan)

    retry_transient(check_once)


def _lock_order(plan: _Plan) -> tuple:
    """Existing records by id, new ones by name after them: every writer locks records in this order."""
    return plan.record_id is None, plan.record_id or 0, plan.key


def _embed(
    conn: psycopg.Connection,
    embedder_factory: Callable[[], Embedder],
    plans: Sequence[_Plan],
    progress: Callable[[int], None] = lambda done: None,
) -> None:
    """Vectors for every plan that needs one, a request per backend batch; refuses before any
    request when the embedder is not the registry's model."""
    todo = [p for p in plans if p.needs_embedding and p.embedding is None]
    if not todo:
        return
    embedder = require_embedder_model(conn, embedder_factory())
    for batch in batched(todo, embedder.batch_size):
        vectors = checked_vectors(embedder.embed([p.text for p in batch]), len(batch), embedder.model_name)
        for plan, vector in zip(batch, vectors):
            plan.embedding = Embedding(vector, embedder)
        progress(len(batch))


def _replanned(conn: psycopg.Connection, plans: Sequence[_Plan]) -> list[_Plan]:
    """The same changes planned against the records as they are now (one query), each keeping its
    vector if its text is the same."""
    fresh_plans = _plan(conn, [plan.change for plan in plans])
    for plan, fresh in zip(plans, fresh_plans):
        if plan.embedding is not None and fresh.text == plan.text:
            fresh.embedding = plan.embedding
    return fresh_plans


def _save_all(
    conn: psycopg.Connection,
    embedder_factory: Callable[[], Embedder],
    plans: list[_Plan],
    all_or_nothing: bool,
    in_transaction: Callable[[psycopg.Connection], None] | None = None,
) -> None:
    """Saves every plan without an outcome in one transaction.

    The registry's model is locked first, then the records, in id order (the lock order of every
    writer), and each change is planned again under those locks, so another writer's save since
    the first plan is seen, not overwritten (content that changed meanwhile is embedded now). A
    deadlock redoes the whole transaction, its locks released; vectors made are kept.
    in_transaction(conn) runs first in that transaction (each time it is redone).
    """
    pending = sorted((i for i, plan in enumerate(plans) if plan.outcome is None), key=lambda i: _lock_order(plans[i]))

    def save_once(one_batch: bool) -> None:
        with conn.transaction():
            if in_transaction is not None:
                in_transaction(conn)
            with_vector = [embedding for i in pending if (embedding := plans[i].embedding) is not None]
            if with_vector:
                _adopt(conn, with_vector[0])
            # The lock and the plan made under it go in one round trip.
            with conn.pipeline():
                conn.execute(
                    "select from payrail.provider_methods where id = any(%s) order by id for update",
                    ([plans[i].record_id for i in pending if plans[i].record_id is not None],),
                )
                for i, fresh in zip(pending, _replanned(conn, [plans[i] for i in pending])):
                    plans[i] = fresh
            _embed(conn, embedder_factory, [plans[i] for i in pending])
            if one_batch:
                embedded = [embedding for i in pending if (embedding := plans[i].embedding) is not None]
                # One embedder per save: its model, checked once (above, when vectors were made before).
                if embedded and not with_vector:
                    _adopt(conn, embedded[0])
                batch = [plans[i] for i in pending]
                for plan, saved in zip(batch, _save_batch(conn, batch)):
                    plan.saved = saved
                return
            for i in pending:
                _adopt(conn, plans[i].embedding)
                plans[i] = _save_until_decided(conn, embedder_factory, plans[i])
            if all_or_nothing and any(not isinstance(plan.outcome, Saved) for plan in plans):
                raise psycopg.Rollback()

    def save() -> None:
        try:
            save_once(one_batch=True)
        except _NotInOneBatch:
            save_once(one_batch=False)

    retry_transient(save)


def _adopt(conn: psycopg.Connection, embedding: Embedding | None) -> None:
    """adopt_embedder_model for a vector about to be saved; nothing for none."""
    if embedding is not None:
        adopt_embedder_model(conn, embedding.embedder, len(embedding.vector))


def retry_transient(transaction: Callable[[], T]) -> T:
    """transaction(), run again when another transaction deadlocked or serialized it; TransientFailure when that kept happening."""
    try:
        return connection.retry_transient(transaction)
    except psycopg.Error as error:
        if error.sqlstate not in errcodes.TRANSIENT:
            raise
        raise TransientFailure(f"other transactions kept getting in the way ({database_reason(error)}); nothing was saved, run it again") from error


def _save_until_decided(conn: psycopg.Connection, embedder_factory: Callable[[], Embedder], plan: _Plan) -> _Plan:
    """Saves one plan. A record created under the same name meanwhile (the plan said new) is
    planned again and saved over, for a change whose version the write path read itself.
    Returns the plan that was saved or decided."""
    for _ in range(SAVE_ATTEMPTS):
        try:
            plan.saved = _save_one(conn, plan)
            return plan
        except psycopg.Error as error:
            if error.sqlstate in errcodes.TRANSIENT:
                raise  # the whole transaction is redone
            if not _raced(plan, error):
                plan.unsaved = _outcome_of_failure(conn, error, plan)
                return plan
            last_error = error
        (plan,) = _replanned(conn, [plan])
        _embed(conn, embedder_factory, [plan])
        _adopt(conn, plan.embedding)
    raise TransientFailure(
        f'"{plan.provider} / {plan.method}" kept changing while it was saved ({database_reason(last_error)}); nothing was saved, run it again'
    )


def _raced(plan: _Plan, error: psycopg.Error) -> bool:
    """Whether another writer changed (or created) the record between the plan and the save, and
    the write path read the version itself (the caller did not ask for their own version)."""
    raced = error.sqlstate == errcodes.RECORD_CHANGED or (error.sqlstate == errcodes.UNIQUE_VIOLATION and plan.record_id is None)
    return raced and plan.change.expected_version is None


def _outcome_of_failure(conn: psycopg.Connection, error: psycopg.Error, plan: _Plan) -> Unsaved:
    if plan.embedding is not None and error.sqlstate == errcodes.INVALID_PARAMETER_VALUE and error.diag.column_name == "embedding":
        # The database refused the vector the model returned (its length: payrail._is_storable_vector_length).
        raise EmbeddingUnavailable(f"{plan.embedding.embedder.model_name} returned an embedding the registry cannot store: {database_reason(error)}") from error
    if error.sqlstate == errcodes.RECORD_CHANGED:
        return Conflict.of(error)
    if not errcodes.refuses_input(error.sqlstate):
        raise error
    return _refusal(conn, error, plan)


def check_changes(
    conn: psycopg.Connection,
    changes: Sequence[Change],
    *,
    seen: dict[bytes, int] | None = None,
    positions: Sequence[int] | None = None,
) -> list[Refused | Conflict | None]:
    """What save_changes would refuse, checked the same way; nothing is embedded or written.

    For changes checked in batches: seen carries the keys of earlier batches (a change of the
    same record as an earlier one is refused), positions what Refused.same_as reports for each
    change (default: its index).
    """
    plans = _plan(conn, _with_ascii_hosts(changes))
    _check_rules(conn, plans, seen, positions)
    return [p.unsaved for p in plans]


def _with_ascii_hosts(changes: Sequence[Change]) -> list[Change]:
    """Each change with its URLs' hosts as the registry stores them: internationalized ones in
    their ASCII form (records.with_ascii_hosts). Text PostgreSQL cannot hold stays for the check
    that names it."""
    return [c if unstorable_fields(c.record) else replace(c, record=with_ascii_hosts(c.record)) for c in changes]


def save_changes(
    conn: psycopg.Connection,
    embedder_factory: Callable[[], Embedder],
    changes: Sequence[Change],
    *,
    all_or_nothing: bool = True,
    checked: bool = False,
    seen: dict[bytes, int] | None = None,
    positions: Sequence[int] | None = None,
    progress: Callable[[int], None] = lambda done: None,
    in_transaction: Callable[[psycopg.Connection], None] | None = None,
) -> list[Outcome | None]:
    """Saves changes through payrail.save_provider_method, embedding changed content first; one outcome per change, in order.

    all_or_nothing: one refused change or conflict saves nothing (and embeds nothing when a rule
    refuses it), and the changes nothing refused have no outcome (None); otherwise the others
    are saved. checked: check_changes already passed these changes (the rules still hold at the
    save, which refuses what changed meanwhile); seen and positions as for check_changes.
    progress is called with the number of changes each embedding request covered.
    in_transaction(conn) runs first in the transaction that saves, so what it writes commits or
    rolls back with the changes (bulk.undo begins its bulk action there). conn must be in autocommit mode: the checks,
    the embedding and the save are separate steps. Raises EmbeddingUnavailable and
    RegistryModelMismatch (nothing saved), TransientFailure, and psycopg errors that are not a
    refusal of a change (the database went away).
    """
    if not conn.autocommit:
        raise ValueError("save_changes needs a connection in autocommit mode")
    embedder_factory = made_once(embedder_factory)  # one embedder (one model load) per save
    plans = _plan(conn, _with_ascii_hosts(changes))
    if not checked:
        # The checks in a transaction rolled back spare a refused change its embedding request;
        # a save that embeds nothing is checked by its own statements (a URL-only edit).
        _check_rules(conn, plans, seen, positions, in_database=any(p.needs_embedding for p in plans))
    if not (all_or_nothing and any(p.outcome is not None for p in plans)):
        _embed(conn, embedder_factory, [p for p in plans if p.outcome is None], progress)
        _save_all(conn, embedder_factory, plans, all_or_nothing, in_transaction)
    if all_or_nothing and not all(isinstance(p.outcome, Saved) for p in plans):
        # Nothing was saved; a change no rule refused has no outcome of its own.
        return [None if p.outcome is None or isinstance(p.outcome, Saved) else p.outcome for p in plans]
    return [p.outcome for p in plans]


def save_change(conn: psycopg.Connection, embedder_factory: Callable[[], Embedder], change: Change, *, checked: bool = False) -> Outcome:
    """save_changes of one change: what became of it. Alone, a change is always saved, refused
    or in conflict (only a change beside a refused one is left without an outcome)."""
    (outcome,) = save_changes(conn, embedder_factory, [change], checked=checked)
    if outcome is None:
        raise AssertionError("save_changes left a change saved alone without an outcome")
    return outcome


def delete_record(conn: psycopg.Connection, record_id: int, expected_version: int, *, with_golden_queries: bool = False) -> Conflict | Refused | None:
    """Deletes the record through payrail.delete_provider_method if it is still at the version
    the caller read; a Conflict otherwise. Refused, naming them, while golden queries name it,
    unless with_golden_queries: then it leaves them, and those it alone answered go too.

    The history keeps the deleted version (tg_provider_methods__record_history), so it can be
    restored as a new draft; it keeps no golden query.
    """
    try:
        conn.execute("select payrail.delete_provider_method(%s, %s, %s)", (record_id, expected_version, with_golden_queries))
    except psycopg.Error as error:
        if error.sqlstate == errcodes.FOREIGN_KEY_VIOLATION:
            return Refused(database_reason(error))
        if error.sqlstate != errcodes.RECORD_CHANGED:
            raise
        return Conflict.of(error)
    return None


@dataclass
class Prepared:
    """One change checked and its content embedded, not saved (prepare_change): what a preview
    shows the effect of before the operator saves it."""

    change: Change
    # Why it cannot be saved (a rule refuses it, or it conflicts); None when nothing stands in the way.
    outcome: Unsaved | None
    _plan: _Plan

    @property
    def record_id(self) -> int | None:
        """The record it changes; None for a new one."""
        return self.change.record_id if self.change.record_id is not None else self._plan.record_id

    @property
    def names(self) -> tuple[str, str]:
        """Its provider and method as the registry would store them."""
        return self._plan.provider, self._plan.method

    @property
    def embedding(self) -> Embedding | None:
        """Its new content's vector, made now, and the embedder whose model made it (the registry's,
        or the one its first vector makes it); None when the save keeps the stored vector (or has none)."""
        return self._plan.embedding

    def embedder_factory(self, embedder_factory: Callable[[], Embedder]) -> Callable[[], Embedder]:
        """embedder_factory for save_changes, answering this change's text with the vector made
        for it instead of asking the embedding service again."""
        embedding = self._plan.embedding
        if embedding is None:
            return embedder_factory
        return lambda: _Remembering(embedding.embedder, {self._plan.text: embedding.vector})


class _Remembering(Embedder):
    """An embedder that answers the texts it was given vectors for, and asks its embedder for the rest."""

    def __init__(self, embedder: Embedder, vectors: dict) -> None:
        self.embedder, self.vectors = embedder, vectors
        self.model_name, self.batch_size = embedder.model_name, embedder.batch_size

    def embed(self, texts: Sequence[str]) -> list:
        missing = [text for text in texts if text not in self.vectors]
        made = dict(zip(missing, self.embedder.embed(missing))) if missing else {}
        return [self.vectors[text] if text in self.vectors else made[text] for text in texts]


def prepare_change(conn: psycopg.Connection, embedder_factory: Callable[[], Embedder], change: Change) -> Prepared:
    """What save_changes does before it saves one change: checked against every rule as it would
    be (nothing embedded when one refuses it), then its changed content (or a record enabled
    without a current vector) embedded with the registry's model. Nothing is written. Raises what
    save_changes raises (EmbeddingUnavailable, RegistryModelMismatch, TransientFailure)."""
    if not conn.autocommit:
        raise ValueError("prepare_change needs a connection in autocommit mode")
    (plan,) = _plan(conn, _with_ascii_hosts([change]))
    _check_rules(conn, [plan], in_database=plan.needs_embedding)
    if plan.unsaved is None:
        _embed(conn, made_once(embedder_factory), [plan])
    return Prepared(change, plan.unsaved, plan)


@contextmanager
def tentatively_saved(conn: psycopg.Connection, prepared: Prepared) -> Iterator[Outcome]:
    """The prepared change saved in a transaction rolled back when the block ends: statements in
    the block see the registry as the save would leave it (every trigger ran: search's derived
    rows, the names as stored), nobody else does, and nothing of it stays. The record stays
    locked until the block ends. Yields the save's outcome; a refusal or conflict saved nothing."""
    plan = replace(prepared._plan, unsaved=None, saved=None)
    with conn.transaction(force_rollback=True):
        _adopt(conn, plan.embedding)
        try:
            outcome: Outcome = _save_one(conn, plan)
        except psycopg.Error as error:
            if not (errcodes.refuses_input(error.sqlstate) or error.sqlstate == errcodes.RECORD_CHANGED):
                raise
            outcome = _outcome_of_failure(conn, error, plan)
        yield outcome
