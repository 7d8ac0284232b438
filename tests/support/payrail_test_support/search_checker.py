"""The soak benchmark's checker (benchmarks/soak.py): is a search answer right in the snapshot it
was given in? tests/postgres/test_soak.py shows it catches the wrong answers it exists to catch.

The connection must have pgvector's types registered (pgvector.psycopg.register_vector) and read
in the search's own REPEATABLE READ transaction; records must carry the fake OpenAI server's
embeddings of their content.
"""

from __future__ import annotations

import numpy as np
import psycopg

from payrail_embedder.embedders import record_text
from payrail_test_support.openai_fake import fake_embedding
from payrail_test_support.ranking import LIMIT, cosine_ranking, name_path

SEARCH_SQL = "select provider, method, urls, docs_url, guidance from payrail.search_provider_methods(%s, %s, %s)"
# Distances this close are ties within float32 arithmetic: either order is right.
TIE_TOLERANCE = 1e-5


def check_answer(conn: psycopg.Connection, query: str, path: str, rows: list[tuple], vector) -> tuple[list[str], bool]:
    """In the search's own snapshot: was each returned record fit to return, and was the answer exact?

    rows are SEARCH_SQL's; path is "name" or "semantic", the path that answered; vector is the
    query's embedding (semantic path). Returns the problems found, and whether equal distances
    came back in another order than the names give.
    """
    problems = []
    if len(rows) > LIMIT:
        problems.append(f"{len(rows)} rows")
    returned = [(r[0], r[1]) for r in rows]
    stored = conn.execute(
        """
        select r.provider, r.method, pm.id, pm.enabled, pm.urls, pm.docs_url, pm.guidance, pm.embedding,
               pm.embedding_model, pm.embedding_content_hash = pm.content_hash as hash_current, m.name as registry_model
        from unnest(%s::text[], %s::text[]) with ordinality as r(provider, method, position)
        left join payrail.provider_methods as pm on pm.provider = r.provider and pm.method = r.method
        left join payrail.embedding_model as m on true
        order by r.position
        """,
        ([p for p, _ in returned], [m for _, m in returned]),
    ).fetchall()
    for row, (provider, method, record_id, enabled, urls, docs_url, guidance, embedding, model, current, registry) in zip(rows, stored, strict=True):
        label = f"{provider} / {method}"
        if record_id is None:
            problems.append(f"returned {label}, which does not exist")
            continue
        if not enabled:
            problems.append(f"returned the disabled record {label}")
        if embedding is None or not current or model != registry:
            problems.append(f"returned {label} without a vector of its current content (hash current: {current})")
        elif not np.allclose(embedding.to_numpy(), fake_embedding(record_text(provider, method, guidance)), atol=1e-6):
            problems.append(f"returned {label}, whose vector was not made from its content")
        if (list(row[2]), row[3], row[4]) != (list(urls), docs_url, guidance):
            problems.append(f"returned {label} with other fields than stored")

    enabled = [
        {"provider": p, "method": m, "enabled": True, "vector": e.to_numpy()}
        for p, m, e in conn.execute("select provider, method, embedding from payrail.provider_methods where enabled")
    ]
    expected_by_name = [(r["provider"], r["method"]) for r in name_path(enabled, query)]
    if expected_by_name:
        if path != "name" or returned != expected_by_name:
            problems.append(f"name path: returned {returned} by the {path} path, expected {expected_by_name}")
        return problems, False
    if path != "semantic":
        problems.append(f"answered by the name path, but no enabled record has that name: {returned}")
        return problems, False
    more, near_tie = semantic_problems(returned, enabled, vector)
    return problems + more, near_tie


def semantic_problems(returned: list[tuple[str, str]], enabled: list[dict], vector) -> tuple[list[str], bool]:
    """The exact cosine top 3 over the snapshot's enabled records, ties by normalized names."""
    if not enabled:
        return ([] if not returned else [f"returned {returned} with no record enabled"]), False
    ranked = [((r["provider"], r["method"]), d) for d, r in cosine_ranking(enabled, vector, lambda r: r["vector"])]
    distance_of = dict(ranked)
    expected = [name for name, _ in ranked[:LIMIT]]
    if returned == expected:
        return [], False
    # Equal distances may come back in either order in float32: same length, and each position's
    # distance equal to the expected one within the tolerance.
    if len(set(returned)) == len(returned) == len(expected) and all(
        name in distance_of and abs(distance_of[name] - distance_of[want]) <= TIE_TOLERANCE for name, want in zip(returned, expected, strict=True)
    ):
        return [], True
    return [f"semantic path: returned {returned}, expected {expected}"], False
