"""What the registry holds: drafts written as an operator writes them in psql, rows read back, and
the rule their vectors keep (whole or nothing)."""

from __future__ import annotations

import hashlib

import numpy as np
import psycopg
from psycopg.rows import dict_row

from payrail_embedder.embedders import record_text
from payrail_embedder.postgres.connection import connect
from payrail_test_support.openai_fake import FAKE_DIMENSIONS, fake_embedding


def content_hash(provider: str, method: str, guidance: str) -> bytes:
    """payrail._content_hash's digest, for loaders that write enabled records by binary COPY at
    benchmark scale; the database refuses an enabled record whose hash is not its content's, so a
    wrong copy here fails loudly. The registry's own code lets SQL hash."""
    return hashlib.sha256(f"{provider}\x1f{method}\x1f{guidance}".encode()).digest()


def insert_drafts(url: str, count: int) -> list[str]:
    """count new drafts, without vectors, inserted with plain SQL; returns their "provider / method" names."""
    names = [(f"Provider {n:04d}", f"Method {n:04d}", f"Purpose: generated record number {n} for sync.") for n in range(count)]
    with psycopg.connect(url) as conn:
        with conn.cursor() as cursor:
            cursor.executemany("insert into payrail.provider_methods (provider, method, guidance) values (%s, %s, %s)", names)
    return [f"{p} / {m}" for p, m, _ in names]


def rows(url: str) -> list[dict]:
    """Every record with its embedding columns, in id order."""
    with connect(url) as conn:
        cursor = conn.cursor(row_factory=dict_row)
        return cursor.execute(
            """
            select pm.id, pm.provider, pm.method, pm.guidance, pm.enabled, pm.content_hash,
                   pm.embedding, pm.embedding_model, pm.embedding_content_hash, m.name as registry_model
            from payrail.provider_methods as pm left join payrail.get_embedding_model() as m on true
            order by pm.id
            """
        ).fetchall()


def assert_whole_or_nothing(row: dict, dimensions=FAKE_DIMENSIONS) -> bool:
    """A record either has the vector of its current content by the registry's model, or none at
    all and is disabled; True when it has one."""
    if row["embedding"] is None:
        assert (row["embedding_model"], row["embedding_content_hash"], row["enabled"]) == (None, None, False), row
        return False
    assert row["embedding_model"] == row["registry_model"], row
    assert row["embedding_content_hash"] == row["content_hash"], row
    expected = fake_embedding(record_text(row["provider"], row["method"], row["guidance"]), dimensions)
    np.testing.assert_allclose(row["embedding"].to_numpy(), expected, rtol=1e-6, atol=1e-7)
    return True


def scanned(conn, text: str, state_condition: str = "true") -> list[tuple[str, str]]:
    """What the filter matched before the list entries: every record's text read, lower-cased,
    searched; (provider, method) in the list's order."""
    return [
        tuple(row)
        for row in conn.execute(
            f"""select pm.provider, pm.method from payrail.provider_method_states as pm
                where pg_catalog.strpos(pg_catalog.lower(pm.provider || ' ' || pm.method || ' ' || pm.guidance || ' '
                      || pg_catalog.array_to_string(pm.urls, ' ') || ' ' || coalesce(pm.docs_url, '')), pg_catalog.lower(%s)) > 0
                  and {state_condition}
                order by pg_catalog.lower(pm.provider), pg_catalog.lower(pm.method), pm.id""",
            (text,),
        ).fetchall()
    ]
