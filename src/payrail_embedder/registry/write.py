"""The write path: save records' public fields and enabled state, embedding changed content first.

Writes take search's shape (db/WRITES.md). One statement, payrail.save_provider_methods, takes a
batch of changes, judges conflicts and every rule in the database, and saves the whole batch, or
nothing and answers why: each change refused (every rule, in words), in conflict, or needing a
vector, with the text to embed and the registry's model. This module calls it in autocommit mode,
embeds what it named holding nothing (no transaction is open while the service works), and calls
again with the vectors (one whose content changed meanwhile is stale, asked for again). Import,
edit, sync, restore, the bulk actions and the backoffice save so; a preview saves in a transaction
it measures, then commits or rolls back (measured.save_measured).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TypeVar

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from ..base import errcodes
from ..base.errors import CodedError, database_reason
from ..embedders import Embedder, EmbeddingUnavailable, batched, checked_vectors, made_once
from ..postgres import connection
from ..postgres.connection import SelfPinned
from . import refusals, stored
from .changes import AnyChange, AsStored, Change, Conflict, Embedding, Outcome, Refused, as_json, saved_of, unsaved_of
from .changes import Saved as Saved  # the write path's words, where its callers find them
from .embedding_model import EmbeddingModel, embedder_for, refuse_another_model, refuse_other_dimensions
from .records import unstorable_fields, with_ascii_hosts

T = TypeVar("T")
M = TypeVar("M")
M_co = TypeVar("M_co", covariant=True)

# Calls of one save: a refusal dropped (skip_invalid), the vectors asked for, content that changed
# again while it was embedded; then the save gives up (TransientFailure).
MOST_CALLS = 5

# What an answer says of a change the batch saved.
SAVED = ("created", "updated", "unchanged")
SAVE = SelfPinned("select * from payrail.save_provider_methods(payrail.provider_method_changes(%s, %b), %s, %s)")
# The record read (by the statement's snapshot) and deleted (locked, its version checked) in one statement.
DELETE = SelfPinned(
    f"select {stored.RECORD_COLUMNS}, payrail.delete_provider_method(pm.id, %s, %s) from {stored.RECORDS} as pm where pm.id operator(pg_catalog.=) %s"
)
DELETE_ALONE = SelfPinned("select payrail.delete_provider_method(%s, %s, %s)")


class TransientFailure(CodedError):
    """Another transaction kept getting in the way (deadlock, serialization); rerun later. Never a refusal."""

    code = "unavailable"


def retry_transient(transaction: Callable[[], T]) -> T:
    """transaction(), run again when another transaction deadlocked or serialized it; TransientFailure when that kept happening."""
    try:
        return connection.retry_transient(transaction)
    except psycopg.Error as error:
        if error.sqlstate not in errcodes.TRANSIENT:
            raise
        raise TransientFailure(f"other transactions kept getting in the way ({database_reason(error)}); nothing was saved, run it again") from error


def answered(
    conn: psycopg.Connection, changes: Sequence[AnyChange], embeddings: Sequence[Embedding | None], embed_drafts: bool = True, checked: bool = False
) -> list[dict]:
    """One call of payrail.save_provider_methods: its answer, one row per change, in order (the vectors
    go beside the JSON, in binary). The write path's one step, for a caller that decides itself what to
    do with each answer (sync)."""
    vectors = [e.vector if e is not None else None for e in embeddings] if any(e is not None for e in embeddings) else None
    try:
        cursor = conn.cursor(row_factory=dict_row).execute(SAVE, (Jsonb([as_json(c, e) for c, e in zip(changes, embeddings)]), vectors, embed_drafts, checked))
    except psycopg.Error as error:
        if error.sqlstate == errcodes.INVALID_PARAMETER_VALUE and error.diag.column_name == "embedding":
            # The database refused the vector the model returned (its length: payrail._is_storable_vector_length).
            model = next(e.model for e in embeddings if e is not None)
            raise EmbeddingUnavailable(f"{model} returned an embedding the registry cannot store: {database_reason(error)}") from error
        raise
    return cursor.fetchall()


def storable(changes: Sequence[AnyChange]) -> tuple[list[AnyChange], dict[int, Refused]]:
    """Each change with its URLs' hosts as the registry stores them (records.with_ascii_hosts), and
    the refusals of those holding text PostgreSQL cannot hold, which are never sent."""
    ready: list[AnyChange] = []
    refused = {}
    for i, change in enumerate(changes):
        problems = unstorable_fields(change.record) if isinstance(change, Change) else []
        if problems:
            refused[i] = Refused.of(refusals.unstorable(problems))
        ready.append(change if problems or isinstance(change, AsStored) else replace(change, record=with_ascii_hosts(change.record)))
    return ready, refused


def embedded(embedder_factory: Callable[[], Embedder], answers: Sequence[dict], progress: Callable[[int], None]) -> list[Embedding]:
    """Vectors of the texts the answers name, by the model they name (any, while the registry has
    none), a request per backend batch; refused before any request when the embedder makes another model's."""
    named = answers[0]["embedding_model"]
    model = EmbeddingModel(named, answers[0]["embedding_dimensions"]) if named is not None else None
    embedder = embedder_for(model, embedder_factory())
    refuse_another_model(model, embedder)
    made = []
    for batch in batched(answers, embedder.batch_size):
        vectors = checked_vectors(embedder.embed([a["embedding_text"] for a in batch]), len(batch), embedder.model_name)
        refuse_other_dimensions(model, embedder, vectors[0].size)
        made += [Embedding(vector, embedder.model_name, bytes(a["embedding_content_hash"])) for a, vector in zip(batch, vectors)]
        progress(len(batch))
    return made


def save_changes(
    conn: psycopg.Connection,
    embedder_factory: Callable[[], Embedder],
    changes: Sequence[AnyChange],
    *,
    all_or_nothing: bool = True,
    embeddings: Sequence[Embedding | None] | None = None,
    embed_drafts: bool = True,
    checked: bool = False,
    progress: Callable[[int], None] = lambda done: None,
    in_transaction: Callable[[psycopg.Connection], None] | None = None,
) -> list[Outcome | None]:
    """Saves changes through payrail.save_provider_methods, embedding what it asks for first; one outcome per change, in order.

    all_or_nothing: one refused change or conflict saves nothing (and embeds nothing when a rule
    refuses it), and the changes nothing refused have no outcome (None); otherwise the others are
    saved. embeddings: vectors made for the changes before (a preview's), used while their content
    is the change's. embed_drafts False: a draft is saved without a vector (sync embeds it later).
    checked: check_changes passed these changes already, so the first call does not judge their
    fields again before it asks for vectors (the save still refuses what changed meanwhile).
    in_transaction(conn) runs first in each call's transaction, so what it writes commits with the
    changes, or rolls back when they are not saved (bulk.undo begins its bulk action there).
    Refused.same_as is the position in changes. progress is called with the number of changes each
    embedding request covered. conn must be in autocommit mode. Raises EmbeddingUnavailable and
    RegistryModelMismatch (nothing saved), TransientFailure, and psycopg errors that are not a
    refusal of a change (the database went away).
    """
    if not conn.autocommit:
        raise ValueError("save_changes needs a connection in autocommit mode")
    embedder_factory = made_once(embedder_factory)  # one embedder (one model load) per save
    sent, refused = storable(changes)
    outcomes: list[Outcome | None] = [refused.get(i) for i in range(len(changes))]
    made: list[Embedding | None] = list(embeddings) if embeddings is not None else [None] * len(changes)
    if all_or_nothing and refused:
        return [outcome for outcome in check_changes(conn, changes)]  # every refusal named, nothing saved
    todo = [i for i in range(len(changes)) if i not in refused]
    for _ in range(MOST_CALLS):
        if not todo:
            return outcomes
        answers = retry_transient(lambda: _call(conn, [sent[i] for i in todo], [made[i] for i in todo], embed_drafts, checked, in_transaction))
        unsaved = {i: unsaved_of(a, todo) for i, a in zip(todo, answers) if a["outcome"] in ("refused", "conflict")}
        if unsaved:
            for i, outcome in unsaved.items():
                outcomes[i] = outcome
            if all_or_nothing:
                return outcomes
            todo = [i for i in todo if i not in unsaved]
            continue
        needing = [(i, a) for i, a in zip(todo, answers) if a["outcome"] == "needs_embedding"]
        if not needing:
            for i, answer in zip(todo, answers):
                outcomes[i] = saved_of(answer, made[i])
            return outcomes
        for (i, _), embedding in zip(needing, embedded(embedder_factory, [a for _, a in needing], progress)):
            made[i] = embedding
    raise TransientFailure("the records kept changing while they were embedded and saved; nothing was saved, run it again")


def _call(
    conn: psycopg.Connection,
    changes: Sequence[AnyChange],
    embeddings: Sequence[Embedding | None],
    embed_drafts: bool,
    checked: bool,
    in_transaction: Callable[[psycopg.Connection], None] | None,
) -> list[dict]:
    """answered, after in_transaction in a transaction that commits only when the batch was saved."""
    if in_transaction is None:
        return answered(conn, changes, embeddings, embed_drafts, checked)
    with conn.transaction() as transaction:
        in_transaction(conn)
        answers = answered(conn, changes, embeddings, embed_drafts, checked)
        if any(answer["outcome"] not in SAVED for answer in answers):
            raise psycopg.Rollback(transaction)  # nothing saved: neither is what in_transaction wrote
    return answers


def save_change(conn: psycopg.Connection, embedder_factory: Callable[[], Embedder], change: AnyChange, embedding: Embedding | None = None) -> Outcome:
    """save_changes of one change: what became of it (alone, a change is always saved, refused or in conflict)."""
    (outcome,) = save_changes(conn, embedder_factory, [change], embeddings=[embedding])
    if outcome is None:
        raise AssertionError("save_changes left a change saved alone without an outcome")
    return outcome


def check_changes(
    conn: psycopg.Connection,
    changes: Sequence[AnyChange],
    *,
    seen: dict[bytes, int] | None = None,
    positions: Sequence[int] | None = None,
) -> list[Refused | Conflict | None]:
    """What save_changes would refuse, judged by the same statement in a transaction rolled back;
    nothing is embedded, nothing stays written.

    For changes checked in batches: seen carries the record keys of earlier batches (key to
    position: a change of the same record as an earlier one is refused), positions what
    Refused.same_as reports for each change (default: its index).
    """
    sent, refused = storable(changes)
    positions = list(range(len(changes))) if positions is None else list(positions)
    todo = [i for i in range(len(changes)) if i not in refused]

    def judged() -> list[dict]:
        with conn.transaction(force_rollback=True):
            return answered(conn, [sent[i] for i in todo], [None] * len(todo), True) if todo else []

    outcomes: list[Refused | Conflict | None] = [refused.get(i) for i in range(len(changes))]
    first_of_key = {} if seen is None else seen
    for i, answer in zip(todo, retry_transient(judged)):
        if answer["outcome"] in ("refused", "conflict"):
            outcomes[i] = unsaved_of(answer, [positions[j] for j in todo])
            continue
        record = ("id", sent[i].record_id) if sent[i].record_id is not None else ("name", answer["name_key"])
        # A fixed-size stand-in for the record: a streamed import remembers one per line.
        key = hashlib.blake2b(repr(record).encode("utf-8", "surrogatepass"), digest_size=16).digest()
        if key in first_of_key:
            outcomes[i] = Refused("the same record as an earlier change", ("provider", "method"), first_of_key[key])
        else:
            first_of_key[key] = positions[i]
    return outcomes


def delete_record(
    conn: psycopg.Connection, record_id: int, expected_version: int | None, *, with_golden_queries: bool = False
) -> tuple[dict | None, Conflict | Refused | None]:
    """Deletes the record through payrail.delete_provider_method if it is still at the version
    the caller read, reading it in the same statement: (the record as it was, as stored.get reads
    it, None); else (None, a Conflict, or the refusal naming the golden queries that name it, unless
    with_golden_queries: then it leaves them, and those it alone answered go too). The history
    keeps the deleted version (restore brings it back as a new draft), no golden query."""
    try:
        row = conn.cursor(row_factory=dict_row).execute(DELETE, (expected_version, with_golden_queries, record_id)).fetchone()
        if row is None:  # deleted meanwhile: the delete says so in its words
            conn.execute(DELETE_ALONE, (record_id, expected_version, with_golden_queries))
    except psycopg.Error as error:
        if error.sqlstate == errcodes.FOREIGN_KEY_VIOLATION:
            return None, Refused(database_reason(error))
        if error.sqlstate != errcodes.RECORD_CHANGED:
            raise
        return None, Conflict(error.diag.message_primary or str(error))
    return row, None
