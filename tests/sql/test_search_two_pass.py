"""The two-pass semantic search equals the plain exact ordering, on random data at real sizes.

payrail._search ranks half-precision unit vectors first (payrail.provider_method_half_vectors),
then re-ranks by exact distance the records within twice the rounding's error bound of the 3rd.
Here its answers are compared with the plain query it must equal (every enabled record, ordered by
pgvector's exact cosine distance, ties by normalized names) on data made to trouble the first
pass: random directions, near-copies packed closer than the error bound (so the bounded scan is
not enough and it must rescan), components across half precision's subnormal range, and exact
ties. The same comparison runs with the first pass over exact vectors (pgvector before 0.7) and
for preview_search's counted draft; and the error bound itself is checked against pgvector's own
arithmetic.
"""

from __future__ import annotations

import numpy as np
import psycopg
import pytest
from pgvector.psycopg import register_vector

from payrail_test_support.stored import content_hash

MODEL = "two-pass-test-model"
PLAIN_EXACT_ORDER = """
    select provider, method from payrail.provider_methods
    where enabled or id = %(draft)s
    order by embedding <=> l2_normalize(%(query)s), payrail._normalize_name(provider), payrail._normalize_name(method)
    limit 3
"""
SEARCH = "select provider, method from payrail.search_provider_methods(%s, %s, %s)"


def unit(vectors: np.ndarray) -> np.ndarray:
    return vectors / np.linalg.norm(vectors, axis=-1, keepdims=True)


def random_records(rng: np.random.Generator, dimensions: int) -> tuple[np.ndarray, np.ndarray]:
    """Vectors and enabled flags: the kinds of data listed in the module's docstring."""
    directions = rng.standard_normal((1500, dimensions)) * rng.uniform(0.01, 100, (1500, 1))
    centers = unit(rng.standard_normal((4, dimensions)))
    # 100 near-copies of each center, closer to each other than the first pass can tell apart.
    near_copies = np.repeat(centers, 100, axis=0) + rng.standard_normal((400, dimensions)) * (1e-4 / np.sqrt(dimensions))
    # Components from 1 down to 1e-9: many fall below half precision's normal range (6e-5).
    spread = rng.standard_normal((200, dimensions)) * 10.0 ** rng.uniform(-9, 0, (200, dimensions))
    # Exact copies and power-of-two multiples under other names: exact ties, the names decide.
    copies = directions[rng.choice(1500, 100, replace=False)] * rng.choice([1.0, 2.0, 0.25], (100, 1))
    vectors = np.vstack([directions, near_copies, spread, copies])
    enabled = rng.random(2200) > 0.1
    return vectors.astype(np.float32), enabled


def load(conn: psycopg.Connection, vectors: np.ndarray, enabled: np.ndarray) -> None:
    conn.execute("select payrail.set_embedding_model(%s, %s)", (MODEL, vectors.shape[1]))
    copy_sql = (
        "copy payrail.provider_methods (provider, method, guidance, enabled, embedding, embedding_model, embedding_content_hash) from stdin (format binary)"
    )
    guidance = "Purpose: random two-pass test record."
    with conn.cursor().copy(copy_sql) as copy:
        copy.set_types(["text", "text", "text", "bool", "vector", "text", "bytea"])
        for number, (vector, is_enabled) in enumerate(zip(vectors, enabled, strict=True)):
            # Providers in the reverse order of numbers, so names, not insertion, break ties.
            provider, method = f"Provider {9999 - number // 7:04d}", f"method {number:05d}"
            copy.write_row((provider, method, guidance, bool(is_enabled), vector, MODEL, content_hash(provider, method, guidance)))
    conn.commit()


def queries(rng: np.random.Generator, vectors: np.ndarray) -> list[np.ndarray]:
    dimensions = vectors.shape[1]
    return (
        list(rng.standard_normal((25, dimensions)))
        # At the near-copies, at exact copies, and at records with tiny components.
        + [vectors[1500 + 100 * k] + rng.standard_normal(dimensions) * 1e-5 for k in range(4)]
        + [vectors[i] * 3 for i in rng.choice(range(2100, 2200), 8, replace=False)]
        + [vectors[i] for i in rng.choice(range(1900, 2100), 8, replace=False)]
    )


def assert_search_equals_plain_order(conn: psycopg.Connection, query_vectors: list[np.ndarray]) -> None:
    for number, query in enumerate(query_vectors):
        query = query.astype(np.float32)
        expected = conn.execute(PLAIN_EXACT_ORDER, {"query": query, "draft": None}).fetchall()
        got = conn.execute(SEARCH, (f"two-pass query {number}", query, MODEL)).fetchall()
        assert got == expected, f"query {number}"


@pytest.mark.slow
@pytest.mark.parametrize("dimensions", [384, 1536])
def test_two_pass_search_equals_plain_exact_order(database_url, dimensions):
    rng = np.random.default_rng(dimensions)
    vectors, enabled = random_records(rng, dimensions)
    with psycopg.connect(database_url) as conn:
        register_vector(conn)
        load(conn, vectors, enabled)
        assert conn.execute("select count(*) from payrail.provider_method_half_vectors").fetchone()[0] == enabled.sum()
        query_vectors = queries(rng, vectors)
        assert_search_equals_plain_order(conn, query_vectors)

        # The near-copies really packed more than the bounded first pass keeps within its cutoff.
        dense = conn.execute(
            """
            select count(*) from payrail.provider_method_half_vectors
            where 1 + (unit_embedding <#> l2_normalize(%s)::halfvec)
                  <= (select 1 + (unit_embedding <#> l2_normalize(%s)::halfvec) as d
                      from payrail.provider_method_half_vectors order by d offset 2 limit 1)
                     + 2 * payrail._half_precision_error_bound(%s)
            """,
            (query_vectors[25], query_vectors[25], dimensions),
        ).fetchone()[0]
        assert dense > 64

        # pgvector before 0.7 has no halfvec, so db/ creates no half-precision table and the first
        # pass reads the exact vectors: the same answers.
        conn.execute("drop table payrail.provider_method_half_vectors")
        assert_search_equals_plain_order(conn, query_vectors)
        conn.rollback()


def test_preview_counts_its_draft_in_both_passes(database_url):
    rng = np.random.default_rng(7)
    vectors, enabled = random_records(rng, 384)
    with psycopg.connect(database_url) as conn:
        register_vector(conn)
        load(conn, vectors, enabled)
        drafts = conn.execute("select id, provider, method, embedding from payrail.provider_methods where not enabled order by id limit 30").fetchall()
        placed = 0
        for number, (draft_id, provider, method, embedding) in enumerate(drafts):
            # Half the queries right at the draft, so it must come first.
            query = embedding.to_numpy() * 2 if number % 2 else rng.standard_normal(384).astype(np.float32)
            expected = conn.execute(PLAIN_EXACT_ORDER, {"query": query, "draft": draft_id}).fetchall()
            got = conn.execute(
                "select provider, method from payrail.preview_search(%s, %s, %s, %s, %s)",
                (provider, method, f"preview query {number}", query, MODEL),
            ).fetchall()
            assert got == expected, f"draft {provider} / {method}"
            placed += (provider, method) in got
        assert placed >= 15


@pytest.mark.parametrize("dimensions", [3, 384, 1536, 3072])
def test_half_precision_error_bound_holds_for_pgvectors_arithmetic(database_url, dimensions):
    """1 + halfvec <#> (of unit vectors) stays within the bound of vector <=>, including for
    components below half precision's normal range and for near-parallel pairs."""
    rng = np.random.default_rng(dimensions)
    a = rng.standard_normal((300, dimensions)) * 10.0 ** rng.uniform(-8, 2, (300, dimensions))
    b = np.vstack([rng.standard_normal((150, dimensions)), a[:150] + rng.standard_normal((150, dimensions)) * 1e-3])
    with psycopg.connect(database_url) as conn:
        register_vector(conn)
        bound, largest_error = conn.execute(
            """
            select payrail._half_precision_error_bound(%(dimensions)s),
                   max(abs((1 + (l2_normalize(a)::halfvec <#> l2_normalize(b)::halfvec)) - (a <=> b)))
            from unnest(%(a)s::vector[], %(b)s::vector[]) as pairs(a, b)
            """,
            {"dimensions": dimensions, "a": list(a.astype(np.float32)), "b": list(b.astype(np.float32))},
        ).fetchone()
    assert largest_error <= bound
    assert bound < 0.004
