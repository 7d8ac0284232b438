"""The write path: import and export of catalog files, and sync of missing or stale vectors."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import psycopg
from psycopg.rows import dict_row

from .embedders import Embedder, EmbeddingUnavailable, checked_vectors, content_hash, record_text
from .records import Line, ProviderMethod, Refusal


class RegistryModelMismatch(Exception):
    """The embedder's model is not the registry's model."""


@dataclass
class ImportReport:
    created: int = 0
    updated: int = 0
    unchanged: int = 0
    refused: list[Refusal] = field(default_factory=list)
    saved: bool = False

    def to_json(self) -> dict:
        return {
            "created": self.created,
            "updated": self.updated,
            "unchanged": self.unchanged,
            "refused": [{"source": r.source, "line": r.line, "reason": r.reason} for r in self.refused],
            "saved": self.saved,
        }


@dataclass
class SyncReport:
    embedded: int = 0
    # Edited after they were read: the edit wins and its new content is embedded in a further pass.
    changed_meanwhile: int = 0
    # "Provider / Method" of every record still without a current vector when sync stopped.
    pending: list[str] = field(default_factory=list)
    # Why sync stopped early (the embedder failed); None when it ran to the end.
    error: str | None = None

    def to_json(self) -> dict:
        report = {"embedded": self.embedded, "changed_meanwhile": self.changed_meanwhile, "pending": self.pending}
        if self.error is not None:
            report["error"] = self.error
        return report


def ensure_registry_model(conn: psycopg.Connection, embedder: Embedder, dimensions: int) -> None:
    """Records the embedder's model as the registry's when none is set; refuses another model."""
    row = conn.execute("select name, dimensions from payrail.get_embedding_model()").fetchone()
    if row is None:
        conn.execute("select payrail.set_embedding_model(%s, %s)", (embedder.model_name, dimensions))
    elif (row[0], row[1]) != (embedder.model_name, dimensions):
        raise RegistryModelMismatch(
            f"the registry uses model {row[0]} ({row[1]} dimensions) but the embedder is configured for "
            f"{embedder.model_name} ({dimensions} dimensions); set PAYRAIL_EMBEDDER / PAYRAIL_EMBEDDING_MODEL "
            "to the registry's model"
        )


def error_reason(error: psycopg.Error) -> str:
    diag = error.diag
    reason = diag.message_primary or str(error)
    if diag.constraint_name and diag.constraint_name not in reason:
        reason += f" ({diag.constraint_name})"
    if diag.message_hint:
        reason += f". Hint: {diag.message_hint}"
    return reason


def _existing_records(conn: psycopg.Connection, lines: Sequence[Line]) -> tuple[list, dict]:
    """For each line: its normalized key; and the stored records under those keys."""
    rows = conn.execute(
        """
        select payrail._normalize_name(k.provider) as provider_key, payrail._normalize_name(k.method) as method_key
        from unnest(%s::text[], %s::text[]) with ordinality as k(provider, method, position)
        order by k.position
        """,
        ([ln.record.provider for ln in lines], [ln.record.method for ln in lines]),
    ).fetchall()
    keys = [(row[0], row[1]) for row in rows]
    stored = conn.execute(
        """
        select payrail._normalize_name(pm.provider) as provider_key, payrail._normalize_name(pm.method) as method_key,
               pm.provider, pm.method, pm.urls, pm.docs_url, pm.guidance, pm.enabled,
               (pm.embedding is not null and pm.embedding_model = m.name) as has_current_vector
        from payrail.provider_methods as pm
        left join payrail.get_embedding_model() as m on true
        where (payrail._normalize_name(pm.provider), payrail._normalize_name(pm.method))
              in (select * from unnest(%s::text[], %s::text[]))
        """,
        ([k[0] for k in keys], [k[1] for k in keys]),
    )
    stored.row_factory = dict_row
    return keys, {(row["provider_key"], row["method_key"]): row for row in stored.fetchall()}


def _is_unchanged(record: ProviderMethod, stored: dict) -> bool:
    return (
        (record.provider, record.method, record.urls, record.docs_url, record.guidance)
        == (stored["provider"], stored["method"], stored["urls"], stored["docs_url"], stored["guidance"])
        and record.enabled in (None, stored["enabled"])
    )


UPSERT = """
insert into payrail.provider_methods as pm
  (provider, method, urls, docs_url, guidance, enabled, embedding, embedding_model, embedding_content_hash)
values (%(provider)s, %(method)s, %(urls)s, %(docs_url)s, %(guidance)s, coalesce(%(enabled)s, false),
        %(embedding)s, %(embedding_model)s, %(embedding_content_hash)s)
on conflict ((payrail._normalize_name(provider)), (payrail._normalize_name(method))) do update set
  provider = excluded.provider,
  method = excluded.method,
  urls = excluded.urls,
  docs_url = excluded.docs_url,
  guidance = excluded.guidance,
  enabled = coalesce(%(enabled)s, pm.enabled),
  -- No vector computed means the content is unchanged: the stored vector stays.
  embedding = coalesce(excluded.embedding, pm.embedding),
  embedding_model = coalesce(excluded.embedding_model, pm.embedding_model),
  embedding_content_hash = coalesce(excluded.embedding_content_hash, pm.embedding_content_hash)
returning (xmax = 0) as created
"""


def import_records(
    conn: psycopg.Connection,
    embedder_factory: Callable[[], Embedder],
    items: Iterable[Line | Refusal],
    *,
    skip_invalid: bool = False,
) -> ImportReport:
    """Upserts records by (provider, method) in one transaction, embedding new or changed content first.

    Any refused line refuses the whole import unless skip_invalid; then only the valid lines are saved.
    """
    report = ImportReport()
    lines: list[Line] = []
    for item in items:
        if isinstance(item, Refusal):
            report.refused.append(item)
        else:
            lines.append(item)

    with conn.transaction():
        keys, stored = _existing_records(conn, lines) if lines else ([], {})
        first_line_of_key: dict[tuple[str, str], Line] = {}
        to_write: list[tuple[Line, bool]] = []
        for line, key in zip(lines, keys):
            if key in first_line_of_key:
                earlier = first_line_of_key[key]
                report.refused.append(
                    Refusal(line.source, line.line, f"same provider and method as {earlier.source}:{earlier.line}")
                )
                continue
            first_line_of_key[key] = line
            current = stored.get(key)
            if current is not None and _is_unchanged(line.record, current) and current["has_current_vector"]:
                report.unchanged += 1
                continue
            content_changed = current is None or (line.record.provider, line.record.method, line.record.guidance) != (
                current["provider"],
                current["method"],
                current["guidance"],
            )
            to_write.append((line, content_changed or not current["has_current_vector"]))

        if report.refused and not skip_invalid:
            return report

        needing_vectors = [line for line, needs_vector in to_write if needs_vector]
        vectors: dict[int, object] = {}
        model_name = None
        if needing_vectors:
            embedder = embedder_factory()
            texts = [record_text(ln.record.provider, ln.record.method, ln.record.guidance) for ln in needing_vectors]
            computed = embedder.embed(texts)
            ensure_registry_model(conn, embedder, len(computed[0]))
            model_name = embedder.model_name
            vectors = {id(ln): vector for ln, vector in zip(needing_vectors, computed)}

        for line, _ in to_write:
            record = line.record
            vector = vectors.get(id(line))
            params = {
                "provider": record.provider,
                "method": record.method,
                "urls": record.urls,
                "docs_url": record.docs_url,
                "guidance": record.guidance,
                "enabled": record.enabled,
                "embedding": vector,
                "embedding_model": model_name if vector is not None else None,
                "embedding_content_hash": (
                    content_hash(record.provider, record.method, record.guidance) if vector is not None else None
                ),
            }
            try:
                with conn.transaction():
                    created = conn.execute(UPSERT, params).fetchone()[0]
            except psycopg.Error as error:
                report.refused.append(Refusal(line.source, line.line, error_reason(error)))
                continue
            if created:
                report.created += 1
            else:
                report.updated += 1

        if report.refused and not skip_invalid:
            raise psycopg.Rollback()  # the whole import, and only it
        report.saved = True
    return report


def export_records(conn: psycopg.Connection) -> Iterable[str]:
    """Every record as a JSON line, in a stable order; `import` reads this back unchanged."""
    cursor = conn.cursor(row_factory=dict_row)
    cursor.execute(
        """
        select provider, method, urls, docs_url, guidance, enabled
        from payrail.provider_methods
        order by payrail._normalize_name(provider), payrail._normalize_name(method)
        """
    )
    for row in cursor:
        record = ProviderMethod(row["provider"], row["method"], row["urls"], row["docs_url"], row["guidance"], row["enabled"])
        yield json.dumps(record.to_json(), ensure_ascii=False)


# Records to embed, shortest texts first: a batch is padded to its longest text, so batches of
# similar lengths spare the local model most of its work (sync of the 2,479 benchmark records:
# 2.4x faster than in id order).
EMBEDDING_ORDER = "char_length(pm.provider) + char_length(pm.method) + char_length(pm.guidance), pm.id"


def records_to_sync(conn: psycopg.Connection, ids: Sequence[int] | None = None) -> list[dict]:
    """Records whose vector is missing or from another model than the registry's (of ids, when given)."""
    cursor = conn.cursor(row_factory=dict_row)
    cursor.execute(
        f"""
        select pm.id, pm.provider, pm.method, pm.guidance, pm.content_hash
        from payrail.provider_methods as pm
        left join payrail.get_embedding_model() as m on true
        where (pm.embedding is null or pm.embedding_model is distinct from m.name)
          and (%(ids)s::bigint[] is null or pm.id = any(%(ids)s::bigint[]))
        order by {EMBEDDING_ORDER}
        """,
        {"ids": list(ids) if ids is not None else None},
    )
    return cursor.fetchall()


def record_name(record: dict) -> str:
    return f"{record['provider']} / {record['method']}"


def default_batch_size(embedder: Embedder) -> int:
    """One embedding request per batch: the backend's own batch (2,048 inputs for OpenAI, 64 locally)."""
    return getattr(embedder, "batch_size", 256)


def check_embedder_model(conn: psycopg.Connection, embedder: Embedder) -> None:
    """Refuses before any embedding request when the embedder is configured for another model."""
    row = conn.execute("select name from payrail.get_embedding_model()").fetchone()
    if row is not None and row[0] != embedder.model_name:
        raise RegistryModelMismatch(
            f"the registry uses model {row[0]} but the embedder is configured for {embedder.model_name}; "
            "set PAYRAIL_EMBEDDER / PAYRAIL_EMBEDDING_MODEL to the registry's model, or change the registry's "
            "model with `payrail-embedder model switch`"
        )


def embed_stored_records(embedder: Embedder, records: Sequence[dict]) -> list:
    """Checked vectors for rows read from payrail.provider_methods (provider, method, guidance)."""
    texts = [record_text(r["provider"], r["method"], r["guidance"]) for r in records]
    return checked_vectors(embedder.embed(texts), len(records), embedder.model_name)


def failure_reason(error: Exception) -> str:
    """What stopped a sync or a staging run, for its report."""
    return error_reason(error) if isinstance(error, psycopg.Error) else str(error)


# Records edited while sync embedded them get this many further passes before they are left pending.
SYNC_PASSES = 3


def sync(
    conn: psycopg.Connection,
    embedder: Embedder,
    *,
    batch_size: int | None = None,
    progress: Callable[[int], None] = lambda done: None,
) -> SyncReport:
    """Embeds every record whose vector is missing or stale, committing batch by batch.

    conn must be in autocommit mode, so each batch is its own transaction: a crash or a failing
    embedder keeps what was committed, and the next run embeds only the rest. A vector is written
    only while the record still holds the content it was made from; a record edited meanwhile
    is embedded again with its new content. When the embedder fails, sync stops and the report
    lists every record still pending, with the error.
    """
    if not conn.autocommit:
        raise ValueError("sync needs a connection in autocommit mode, so that every batch commits on its own")
    check_embedder_model(conn, embedder)
    batch_size = batch_size or default_batch_size(embedder)
    report = SyncReport()
    todo = records_to_sync(conn)
    for _ in range(SYNC_PASSES):
        changed: list[int] = []
        for start in range(0, len(todo), batch_size):
            batch = todo[start : start + batch_size]
            try:
                vectors = embed_stored_records(embedder, batch)
                with conn.transaction():
                    ensure_registry_model(conn, embedder, len(vectors[0]))
                    for record, vector in zip(batch, vectors):
                        written = conn.execute(
                            """
                            update payrail.provider_methods
                            set embedding = %s, embedding_model = %s, embedding_content_hash = content_hash
                            where id = %s and content_hash = %s
                            """,
                            (vector, embedder.model_name, record["id"], record["content_hash"]),
                        ).rowcount
                        if written:
                            report.embedded += 1
                        else:
                            changed.append(record["id"])
            except (EmbeddingUnavailable, RegistryModelMismatch, psycopg.Error) as error:
                report.error = failure_reason(error)
                report.pending = [record_name(r) for r in todo[start:]]
                if changed and not conn.broken:
                    report.pending += [record_name(r) for r in records_to_sync(conn, changed)]
                return report
            progress(len(batch))
        report.changed_meanwhile += len(changed)
        todo = records_to_sync(conn, changed)
        if not todo:
            return report
    report.pending = [record_name(r) for r in todo]
    return report
