"""The soak benchmark as CI runs it: benchmarks/soak.py for 30 seconds in a real subprocess on one
embedded server, and its checker (payrail_test_support.search_checker) shown to catch the wrong
answers it exists to catch.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import psycopg
import pytest
from pgvector.psycopg import register_vector

from payrail_test_support import REPO
from payrail_test_support.agent_helpers import CATALOG, NAME_QUERIES, SEMANTIC_QUERY, import_catalog
from payrail_test_support.openai_fake import FAKE_MODEL, fake_embedding
from payrail_test_support.search_checker import SEARCH_SQL, check_answer

SOAK_SECONDS = 30


@pytest.fixture
def soak_database(servers):
    """A fresh database on the embedded PostgreSQL 18 (one server: the run takes 30 seconds)."""
    server = servers("pg18")
    url = server.create_database()
    yield url
    server.drop_database(url)


@pytest.mark.slow
def test_soak_for_30_seconds_finds_no_violation(soak_database):
    result = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "soak.py"), "--seconds", str(SOAK_SECONDS), "--json", "--database-url", soak_database],
        capture_output=True,
        text=True,
        timeout=SOAK_SECONDS + 150,
        cwd=REPO,
    )
    assert result.stdout.strip(), result.stderr
    summary = json.loads(result.stdout)
    assert result.returncode == 0, summary
    assert (summary["violations"], summary["unexpected_errors"]) == (0, 0), summary
    assert summary["searches"] > 0 and summary["name_path"] > 0 and summary["semantic_path"] > 0, summary
    assert summary["edits"] > 0 and summary["syncs"] > 0, summary
    # Every kind of edit ran, the cycles completed, and the refusal was tried.
    assert set(summary["edits_by_kind"]) >= {"enable", "disable", "urls", "draft_guidance", "cycle_enable"}, summary
    assert summary["cycles_completed"] > 0 and summary["refused_as_expected"] > 0, summary
    assert summary["history_entries"] == summary["edits"], summary
    assert summary["seconds"] < SOAK_SECONDS + 20, summary  # it stops by itself


def test_the_checker_catches_wrong_answers(database_url, openai_fake, tmp_path):
    """check_answer, given answers that break the contract, reports each; a right answer passes."""
    import_catalog(database_url, openai_fake, tmp_path)
    query = SEMANTIC_QUERY
    vector = fake_embedding(query)
    with psycopg.connect(database_url, autocommit=True) as conn:
        register_vector(conn)

        def search(q, v=None):
            return conn.execute(SEARCH_SQL, (q, v, FAKE_MODEL if v is not None else None)).fetchall()

        def row_of(provider, method):
            return conn.execute(
                "select provider, method, urls, docs_url, guidance from payrail.provider_methods where provider = %s and method = %s",
                (provider, method),
            ).fetchone()

        right = search(query, vector)
        assert len(right) == 3
        assert check_answer(conn, query, "semantic", right, vector)[0] == []
        name_query = NAME_QUERIES[0]  # a provider: the name path
        assert len(search(name_query)) > 1
        assert check_answer(conn, name_query, "name", search(name_query), None)[0] == []

        def problems(rows, q=query, path="semantic", v=vector):
            found, _ = check_answer(conn, q, path, rows, v)
            assert found, rows
            return " ".join(found)

        draft = next(r for r in CATALOG if not r["enabled"])
        assert "disabled record" in problems([row_of(draft["provider"], draft["method"]), *right[:2]])
        assert "semantic path: returned" in problems(list(reversed(right)))
        assert "semantic path: returned" in problems(right[:2])  # a partial answer
        assert "other fields than stored" in problems([(*right[0][:2], ["https://elsewhere.example"], *right[0][3:]), *right[1:]])
        assert "does not exist" in problems([("Nobody", "Nothing", [], None, "x"), *right[1:]])
        assert "name path" in problems(search(name_query)[:1], q=name_query, path="name", v=None)
        assert "name path" in problems(right, q=name_query, path="semantic")

        # A vector made from other content, under the current content's hash: only the vector tells.
        other = fake_embedding("something else entirely")
        assert not np.allclose(other, fake_embedding(query))
        with psycopg.connect(database_url) as writer:
            writer.execute(
                "update payrail.provider_methods set embedding = %s::vector where provider = %s and method = %s",
                (str(other.tolist()), *right[0][:2]),
            )
        assert "not made from its content" in problems(right)
