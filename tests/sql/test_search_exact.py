"""The semantic path is exact: payrail.search_provider_methods returns what a plain NumPy cosine
ordering of every enabled record returns (ties by normalized provider, then method), on random data:
payrail_test_support.ranking's semantic path.

The data mixes what an optimisation of the ordering could get wrong: vectors of any length (cosine,
not inner product), exact copies and power-of-two multiples under other names (exact ties, so the
names decide), names whose raw and normalized orders differ, and disabled records nearer than any.
"""

from __future__ import annotations

import numpy as np
import psycopg
import pytest
from pgvector.psycopg import register_vector

from payrail_test_support.ranking import semantic_path

DIMENSIONS = 24
MODEL = "random-test-model"
PROVIDERS = ["Acme", "bravo", "CHARLIE", "delta   Works", "Echo", "foxtrot  Labs"]


def random_registry(rng: np.random.Generator) -> list[dict]:
    records = []

    def add(vector, origin=None, enabled=True):
        number = len(records)
        provider = PROVIDERS[int(rng.integers(len(PROVIDERS)))]
        # Zero-padded so the order of names is the same in every collation.
        method = ("Method " if number % 2 else "METHOD ") + f"{number:04d}"
        # origin: the record whose direction this is; equal origins mean equal cosine distances.
        records.append(
            {"provider": provider, "method": method, "vector": vector.astype(np.float32), "enabled": enabled, "origin": number if origin is None else origin}
        )

    for _ in range(160):
        add(rng.standard_normal(DIMENSIONS) * rng.uniform(0.05, 20))
    originals = [r["vector"] for r in records]
    for index in rng.choice(len(originals), 40, replace=False):
        add(originals[index].copy(), index)  # an exact tie under another name
    for index in rng.choice(len(originals), 30, replace=False):
        add(originals[index] * (2.0 if index % 2 else 0.5), index)  # same direction: an exact tie in cosine
    for index in rng.choice(len(originals), 30, replace=False):
        add(originals[index].copy(), index, enabled=False)  # as near as the original, but never shown
    return records


def load(database_url: str, records: list[dict]) -> None:
    with psycopg.connect(database_url) as conn:
        register_vector(conn)
        conn.execute("select payrail.set_embedding_model(%s, %s)", (MODEL, DIMENSIONS))
        with conn.cursor() as cursor:
            cursor.executemany(
                """
                insert into payrail.provider_methods
                  (provider, method, guidance, enabled, embedding, embedding_model, embedding_content_hash)
                values (%(provider)s, %(method)s, 'Purpose: random test record.', %(enabled)s, %(vector)s, %(model)s,
                        payrail._content_hash(%(provider)s, %(method)s, 'Purpose: random test record.'))
                """,
                [{**r, "model": MODEL} for r in records],
            )


@pytest.mark.parametrize("seed", [1, 2])
def test_semantic_order_equals_numpy_exact_cosine(database_url, seed):
    rng = np.random.default_rng(seed)
    records = random_registry(rng)
    load(database_url, records)
    queries = [rng.standard_normal(DIMENSIONS) for _ in range(40)]
    # Queries pointing exactly at copied or scaled records: the top 3 is decided by names.
    queries += [records[int(i)]["vector"] * 3.0 for i in rng.choice(range(160, 230), 20, replace=False)]

    tied_answers = 0
    with psycopg.connect(database_url, autocommit=True) as conn:
        register_vector(conn)
        for number, query in enumerate(queries):
            expected = semantic_path(records, query, lambda record: record["vector"])
            rows = conn.execute(
                "select provider, method from payrail.search_provider_methods(%s, %s, %s)",
                (f"random semantic query {number}", query.astype(np.float32), MODEL),
            ).fetchall()
            assert rows == [(r["provider"], r["method"]) for r in expected], f"query {number}"
            tied_answers += len({r["origin"] for r in expected}) < 3
    # The data really exercised the tie-break.
    assert tied_answers >= 10
