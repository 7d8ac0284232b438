"""Switching the registry's embedding model: stage every record's vector by the new model while
the current one stays in force, then switch in one transaction (payrail.switch_embedding_model).
The golden queries get their vectors by the new model before the switch too (kept by model, so
nothing moves); those of other models go with it."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial

import psycopg
from psycopg.rows import dict_row

from ..base import errcodes
from ..base.errors import reason
from ..base.reports import Report
from ..embedders import Embedder, EmbeddingUnavailable, checked_vectors
from ..postgres import connection
from ..registry import golden
from ..registry.embedding_model import EmbeddingModel, registry_model
from ..registry.sync import EMBEDDING_ORDER, PASSES, embed_in_batches, pending_warnings, records_by_ids


@dataclass
class SwitchReport(Report):
    model: str
    previous: EmbeddingModel | None
    dimensions: int | None = None
    # Vectors staged by this run; records staged by an interrupted earlier run are not embedded again.
    staged: int = 0
    # Edited while they were being embedded: staged again with their new content.
    changed_meanwhile: int = 0
    switched: bool = False
    # Of the switch itself: records given their staged vector, drafts left without one.
    moved: int = 0
    drafts_cleared: int = 0
    # Golden queries given a vector by the new model by this run.
    golden_queries: int = 0
    pending: list[str] = field(default_factory=list)
    error: str | None = None

    def to_json(self) -> dict:
        report = {
            "model": self.model,
            "dimensions": self.dimensions,
            "previous": {"model": self.previous.name, "dimensions": self.previous.dimensions} if self.previous else None,
            "staged": self.staged,
            "changedMeanwhile": self.changed_meanwhile,
            "switched": self.switched,
            "moved": self.moved,
            "draftsCleared": self.drafts_cleared,
            "pending": self.pending,
        }
        if self.golden_queries:
            report["goldenQueriesEmbedded"] = self.golden_queries
        if self.error is not None:
            report["error"] = self.error
        return report

    def describe(self) -> list[str]:
        if self.switched:
            return [
                f"switched to {self.model} ({self.dimensions} dimensions): {self.staged} embedded now, "
                f"{self.moved} records moved, {self.drafts_cleared} drafts left without a vector"
                + (f", {self.golden_queries} golden queries embedded" if self.golden_queries else "")
            ]
        if self.error is None:
            return [f"the registry already uses {self.model} ({self.dimensions} dimensions)"]
        return [f"not switched: the registry still uses {self.previous.name if self.previous else 'no model'}; rerun to resume"]

    def warnings(self) -> list[str]:
        return pending_warnings(self.pending, self.error) if not self.switched and self.error is not None else []


# Whether record pm has no staged vector of its current content by %(model)s.
NEEDS_STAGING = """not exists (
  select from payrail.embedding_staging as s
  where s.provider_method_id = pm.id and s.model = %(model)s and s.content_hash = pm.content_hash)"""


def ids_to_stage(conn: psycopg.Connection, model: str) -> Iterable[tuple[int, str]]:
    """The id and name of each record without a staged vector of its current content by model, in embedding order."""
    return conn.execute(
        f"""select pm.id, pm.provider || ' / ' || pm.method from payrail.provider_methods as pm
            where {NEEDS_STAGING} order by {EMBEDDING_ORDER}""",
        {"model": model},
    )


def records_to_stage(conn: psycopg.Connection, model: str, ids: Sequence[int] | None = None) -> list[dict]:
    """Records without a staged vector of their current content by model (of ids, when given)."""
    ids = [i for i, _ in ids_to_stage(conn, model)] if ids is None else ids
    return records_by_ids(conn, ids, NEEDS_STAGING, {"model": model})


STAGE = """
insert into payrail.embedding_staging as s (provider_method_id, model, content_hash, embedding)
select pm.id, %(model)s, pm.content_hash, %(embedding)s
from payrail.provider_methods as pm
where pm.id = %(id)s and pm.content_hash = %(content_hash)s
on conflict (provider_method_id, model) do update
  set content_hash = excluded.content_hash, embedding = excluded.embedding, staged_at = pg_catalog.now()
"""


def stage(
    conn: psycopg.Connection,
    embedder: Embedder,
    report: SwitchReport,
    *,
    batch_size: int | None,
    progress: Callable[[int], None],
) -> bool:
    """Stages a vector for every record that lacks one, a transaction per batch; False when it stopped early."""

    def write_staged(batch: Sequence[dict], vectors: Sequence) -> list[int]:
        if report.dimensions is not None and len(vectors[0]) != report.dimensions:
            raise EmbeddingUnavailable(f"{embedder.model_name} returned {len(vectors[0])} dimensions, earlier {report.dimensions}")
        report.dimensions = len(vectors[0])
        unwritten = []
        for record, vector in zip(batch, vectors, strict=True):
            if not conn.execute(STAGE, {"model": embedder.model_name, "embedding": vector, **record}).rowcount:
                unwritten.append(record["id"])
        return unwritten

    run = embed_in_batches(
        conn,
        embedder,
        lambda: ids_to_stage(conn, embedder.model_name),
        lambda ids: records_to_stage(conn, embedder.model_name, ids),
        write_staged,
        batch_size=batch_size,
        progress=progress,
    )
    report.staged += run.done
    report.changed_meanwhile += run.changed_meanwhile
    report.pending, report.error = run.pending, run.error
    return run.error is None and not run.pending


def switch_model(
    conn: psycopg.Connection,
    embedder: Embedder,
    *,
    batch_size: int | None = None,
    progress: Callable[[int], None] = lambda done: None,
) -> SwitchReport:
    """Re-embeds every record with embedder's model into payrail.embedding_staging, then switches.

    conn must be in autocommit mode: each staged batch commits, so an interrupted run resumes
    where it stopped. Search keeps the current model until the switch commits. Records edited
    after they were staged are staged again (up to PASSES times) before the switch is given up.
    """
    report = SwitchReport(model=embedder.model_name, previous=registry_model(conn))
    if report.previous is not None and report.previous.name == embedder.model_name:
        report.dimensions = report.previous.dimensions
        return report
    # pgvector's vector_dims is not on the package's path (connection.PACKAGE_PATH): its cast to real[] is found by type.
    row = conn.execute(
        "select pg_catalog.cardinality(embedding::pg_catalog.float4[]) from payrail.embedding_staging where model = %s limit 1",
        (embedder.model_name,),
    ).fetchone()
    report.dimensions = row[0] if row else None

    for attempt in range(1, PASSES + 1):
        if not stage(conn, embedder, report, batch_size=batch_size, progress=progress):
            return report
        if report.dimensions is None:
            # No record to embed: ask the model once for its dimensions.
            try:
                report.dimensions = len(checked_vectors(embedder.embed([embedder.model_name]), 1, embedder.model_name)[0])
            except EmbeddingUnavailable as error:
                report.error = str(error)
                return report
        model = EmbeddingModel(embedder.model_name, report.dimensions)
        try:
            report.golden_queries += golden.embed_missing(conn, embedder, model, batch_size=batch_size)
        except (EmbeddingUnavailable, psycopg.Error) as error:
            report.error = f"golden queries: {reason(error)}"
            return report
        try:
            report.moved, report.drafts_cleared = connection.retry_transient(partial(_switch, conn, model))
        except psycopg.Error as error:
            # PYE02: a record was edited after it was staged. Stage it again and retry, a few times.
            if error.sqlstate != errcodes.EMBEDDING_MODEL_MISMATCH or attempt == PASSES:
                raise
            continue
        report.switched = True
        return report
    raise AssertionError("PASSES must be at least 1")


def _switch(conn: psycopg.Connection, model: EmbeddingModel) -> tuple[int, int]:
    with conn.transaction():
        moved = connection.one_row(conn.execute("select embedded, drafts_cleared from payrail.switch_embedding_model(%s, %s)", (model.name, model.dimensions)))
        # The old model's vectors of golden queries are of no use once it is not in force.
        conn.execute("delete from payrail.golden_query_embeddings where model <> %s", (model.name,))
        return moved


@dataclass(frozen=True)
class ModelInfo(Report):
    """`model show`: the registry's model, how many records carry a vector from it, and what is staged for a switch."""

    model: str | None
    dimensions: int | None
    set_at: str | None
    records: int
    enabled: int
    embedded: int
    # Records staged for a switch, by the model they are staged for.
    staged: dict[str, int]

    def to_json(self) -> dict:
        return {
            "model": self.model,
            "dimensions": self.dimensions,
            "setAt": self.set_at,
            "records": self.records,
            "enabled": self.enabled,
            "embedded": self.embedded,
            "staged": self.staged,
        }

    def describe(self) -> list[str]:
        lines = [
            "no embedding model yet: the first import or sync sets it"
            if self.model is None
            else f"{self.model} ({self.dimensions} dimensions), since {self.set_at}"
        ]
        lines.append(f"{self.records} records, {self.enabled} enabled, {self.embedded} with a vector")
        lines += [f"staged for a switch to {name}: {count} records" for name, count in self.staged.items()]
        return lines


def model_info(conn: psycopg.Connection) -> ModelInfo:
    """The registry's model, how many records carry a vector from it, and what is staged for a switch."""
    cursor = conn.cursor(row_factory=dict_row)
    info = connection.one_row(
        cursor.execute(
            """
            select m.name as model, m.dimensions, m.set_at,
                   (select count(*) from payrail.provider_methods) as records,
                   (select count(*) from payrail.provider_methods where enabled) as enabled,
                   (select count(*) from payrail.provider_methods where embedding is not null) as embedded
            from (select) as one
            left join payrail.embedding_model as m on true
            """
        )
    )
    staged: dict[str, int] = {}
    if connection.one_value(conn.execute("select has_table_privilege('payrail.embedding_staging', 'select')")):
        staged = dict(conn.execute("select model, count(*) from payrail.embedding_staging group by model order by model").fetchall())
    set_at = info["set_at"].isoformat() if info["set_at"] else None
    return ModelInfo(info["model"], info["dimensions"], set_at, info["records"], info["enabled"], info["embedded"], staged)
