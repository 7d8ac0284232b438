"""Embedding stored records batch by batch: sync (missing or stale vectors) and the staging of a model switch.

sync also embeds the golden queries that lack a vector by the registry's model (golden.embed_missing).

Both read the records to embed, embed them a batch at a time (one embedding request each) and
commit each batch on its own, writing a vector only while its record still holds the content
it was made from. A record edited meanwhile is embedded again with its new content, a few
passes at most; a failing embedder stops the run and leaves the rest listed as pending. sync
reads and writes through the write path's statement (write.answered): each batch's records as
stored, which it answers with the texts to embed, then their vectors, which it saves or
refuses as stale.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import psycopg
from psycopg.rows import dict_row

from ..base.errors import reason
from ..base.reports import Report
from ..embedders import Embedder, EmbeddingUnavailable, checked_vectors
from ..postgres import connection
from . import golden, stored
from .changes import AsStored, Embedding
from .embedding_model import RegistryModelMismatch, registry_model, require_embedder_model
from .write import answered

# Records to embed, shortest texts first: a batch is padded to its longest text, so batches of
# similar lengths spare the local model most of its work (sync of the 2,479 benchmark records:
# 2.4x faster than in id order).
EMBEDDING_ORDER = "char_length(pm.provider) + char_length(pm.method) + char_length(pm.guidance), pm.id"

# Records edited while they were embedded get this many further passes before they are left pending.
PASSES = 3


@dataclass
class BatchRun:
    """What one run of embed_in_batches did."""

    # Vectors written.
    done: int = 0
    # Edited after they were read: the edit wins and its new content is embedded in a further pass.
    changed_meanwhile: int = 0
    # "Provider / Method" of every record still without a vector when the run stopped.
    pending: list[str] = field(default_factory=list)
    # Why the run stopped early (the embedder or the database failed); None when it ran to the end.
    error: str | None = None


# The id and name ("Provider / Method") of each record to embed, in the order to embed them.
ReadIds = Callable[[], Iterable[tuple[int, str]]]
# Reads the records of these ids that still need a vector, in the order to embed them.
ReadRecords = Callable[[Sequence[int]], list[dict]]
# Writes one batch's vectors inside a transaction; returns the ids it did not write (changed meanwhile).
WriteBatch = Callable[[Sequence[dict], Sequence], list[int]]


def record_name(record: dict) -> str:
    return f"{record['provider']} / {record['method']}"


def default_batch_size(embedder: Embedder) -> int:
    """One embedding request per batch: the backend's own batch (2,048 inputs for OpenAI, 64 locally)."""
    return embedder.batch_size


def embed_in_batches(
    conn: psycopg.Connection,
    embedder: Embedder,
    read_ids: ReadIds,
    read_records: ReadRecords,
    write_batch: WriteBatch,
    *,
    batch_size: int | None = None,
    progress: Callable[[int], None] = lambda done: None,
) -> BatchRun:
    """Embeds the records read_ids names (read_records reads them) and writes them with write_batch, a transaction per batch.

    conn must be in autocommit mode, so each batch is its own transaction: a crash or a failing
    embedder keeps what was committed, and the next run embeds only the rest. Each batch's
    writes lock records in id order, like every writer of the registry, and a batch that
    another transaction deadlocked is written again (its vectors are kept). Memory holds one
    batch's records and vectors, and the id and name of each record to embed (about 100 bytes:
    what the report lists as pending when the database fails), never every record's text.
    """
    if not conn.autocommit:
        raise ValueError("embedding in batches needs a connection in autocommit mode, so each batch commits on its own")
    batch_size = batch_size or default_batch_size(embedder)
    run = BatchRun()
    todo, todo_names = array("q"), []
    for record_id, name in read_ids():
        todo.append(record_id)
        todo_names.append(name)
    for _ in range(PASSES):
        changed = array("q")
        changed_names: list[str] = []
        for start in range(0, len(todo), batch_size):
            try:
                # Read when its turn comes: a record embedded or deleted meanwhile is left out.
                batch = read_records(todo[start : start + batch_size])
                if not batch:
                    continue
                vectors = checked_vectors(embedder.embed([r["text"] for r in batch]), len(batch), embedder.model_name)
                unwritten = connection.retry_transient(lambda: _write(conn, write_batch, batch, vectors))
            except (EmbeddingUnavailable, RegistryModelMismatch, psycopg.Error) as error:
                run.error = reason(error)
                run.pending = todo_names[start:] + changed_names
                return run
            run.done += len(batch) - len(unwritten)
            changed.extend(unwritten)
            name_of = {r["id"]: record_name(r) for r in batch}
            changed_names += [name_of[i] for i in unwritten]
            progress(len(batch))
        run.changed_meanwhile += len(changed)
        todo, todo_names = changed, changed_names
        if not todo:
            return run
    run.pending = todo_names
    run.error = f"{len(todo)} record(s) were edited again during each of {PASSES} passes; run again to embed them"
    return run


def _write(conn: psycopg.Connection, write_batch: WriteBatch, batch: Sequence[dict], vectors: Sequence) -> list[int]:
    """One batch in one transaction, its records in id order (embedded shortest first)."""
    by_id = sorted(zip(batch, vectors), key=lambda pair: pair[0]["id"])
    with conn.transaction():
        return write_batch([record for record, _ in by_id], [vector for _, vector in by_id])


# Whether record pm, a row of payrail.provider_method_states (the rule's one statement), has no
# vector of its current content by the registry's model.
NEEDS_SYNC = "not pm.has_current_vector"


def ids_to_sync(conn: psycopg.Connection) -> Iterable[tuple[int, str]]:
    """The id and name of each record whose vector is missing or stale, in the order sync embeds them."""
    return conn.execute(
        f"""select pm.id, pm.provider || ' / ' || pm.method from payrail.provider_method_states as pm
            where {NEEDS_SYNC} order by {EMBEDDING_ORDER}"""
    )


def records_by_ids(conn: psycopg.Connection, ids: Sequence[int], condition: str, parameters: dict | None = None) -> list[dict]:
    """The records of these ids for which condition (on pm, a row of payrail.provider_method_states) holds, in
    embedding order. Each is looked up by its id ("offset 0" keeps it a probe of the primary key,
    whatever a plan made without statistics would estimate)."""
    cursor = conn.cursor(row_factory=dict_row)
    cursor.execute(
        f"""
        select pm.id, pm.provider, pm.method, payrail._embedding_text(pm.provider, pm.method, pm.guidance) as text, pm.content_hash
        from pg_catalog.unnest(%(ids)s::bigint[]) as i(id),
        lateral (select * from payrail.provider_method_states as p where p.id = i.id offset 0) as pm
        where {condition}
        order by {EMBEDDING_ORDER}
        """,
        {"ids": list(ids), **(parameters or {})},
    )
    return cursor.fetchall()


def records_to_sync(conn: psycopg.Connection, ids: Sequence[int] | None = None) -> list[dict]:
    """Records whose vector is missing or from another model than the registry's (of ids, when given)."""
    return records_by_ids(conn, [i for i, _ in ids_to_sync(conn)] if ids is None else ids, NEEDS_SYNC)


@dataclass
class SyncReport(Report):
    embedded: int
    changed_meanwhile: int
    pending: list[str]
    error: str | None
    # Golden queries given a vector by the registry's model (golden.embed_missing).
    golden_queries: int = 0
    # What the registry holds after it (stored.counts), where the command asked.
    registry: dict | None = None

    def to_json(self) -> dict:
        report = {"embedded": self.embedded, "changedMeanwhile": self.changed_meanwhile, "pending": self.pending}
        if self.golden_queries:
            report["goldenQueriesEmbedded"] = self.golden_queries
        if self.error is not None:
            report["error"] = self.error
        if self.registry is not None:
            report["registry"] = self.registry
        return report

    def describe(self) -> list[str]:
        golden_queries = f", {self.golden_queries} golden quer{'y' if self.golden_queries == 1 else 'ies'} embedded" if self.golden_queries else ""
        return [
            f"{self.embedded} embedded, {self.changed_meanwhile} changed meanwhile, {len(self.pending)} pending{golden_queries}",
            *stored.findable_lines(self.registry),
        ]

    def warnings(self) -> list[str]:
        return pending_warnings(self.pending, self.error)


def pending_warnings(pending: list[str], error: str | None) -> list[str]:
    """The records an interrupted run left without a vector, and why."""
    return [f"pending: {name}" for name in pending] + ([f"Error: {error}"] if error else [])


@dataclass(frozen=True)
class WouldSync(Report):
    """sync --dry-run: the records sync would embed, in its order."""

    names: list[str]

    def to_json(self) -> dict:
        return {"wouldEmbed": self.names}

    def describe(self) -> list[str]:
        return [*self.names, f"{len(self.names)} records would be embedded"]


def sync(
    conn: psycopg.Connection,
    embedder: Embedder,
    *,
    batch_size: int | None = None,
    progress: Callable[[int], None] = lambda done: None,
) -> SyncReport:
    """Embeds every record whose vector is missing or stale, committing batch by batch, then
    every golden query without a vector by the registry's model.

    A vector is written only while the record still holds the content it was made from. When
    the embedder fails, sync stops and the report lists every record still pending, with the error.
    """
    embedder = require_embedder_model(conn, embedder)

    def needing(ids: Sequence[int]) -> list[dict]:
        """The records of ids that need a vector, as the write path answers them as stored: each with the text to embed."""
        return [
            {"id": a["record_id"], "provider": a["provider"], "method": a["method"], "text": a["embedding_text"], "content_hash": a["embedding_content_hash"]}
            for a in answered(conn, [AsStored(record_id) for record_id in ids], [None] * len(ids))
            if a["outcome"] == "needs_embedding"
        ]

    def write_vectors(batch: Sequence[dict], vectors: Sequence) -> list[int]:
        """Saves each record's vector; one whose content changed meanwhile (its vector stale) or that
        was deleted is left out (the batch is saved all or nothing), and returned."""
        left = [(AsStored(r["id"]), Embedding(v, embedder.model_name, bytes(r["content_hash"]))) for r, v in zip(batch, vectors)]
        unwritten: list[int] = []
        while left:
            outcomes = [a["outcome"] for a in answered(conn, [c for c, _ in left], [e for _, e in left])]
            if all(outcome in ("updated", "unchanged") for outcome in outcomes):
                break
            unwritten += [c.record_id for (c, _), outcome in zip(left, outcomes) if outcome != "ready"]
            left = [pair for pair, outcome in zip(left, outcomes) if outcome == "ready"]
        return unwritten

    run = embed_in_batches(
        conn,
        embedder,
        lambda: ids_to_sync(conn),
        needing,
        write_vectors,
        batch_size=batch_size,
        progress=progress,
    )
    report = SyncReport(run.done, run.changed_meanwhile, run.pending, run.error)
    if report.error is not None:  # the records' failure is the report's (a lost database is asked nothing more)
        return report
    try:
        model = registry_model(conn)
        if model is not None and golden.may_store_vectors(conn):
            report.golden_queries = golden.embed_missing(conn, embedder, model, batch_size=batch_size)
    except (EmbeddingUnavailable, psycopg.Error) as error:
        report.error = f"golden queries: {reason(error)}"
    return report
