"""Faults: PostgreSQL stopped and restarted under a sync and under searches; an embedding service
that fails during a sync. Each leaves clear errors, every record valid, and a rerun that converges.

The restart tests start their own embedded PostgreSQL (18 and 16) and stop it with pg_ctl through
the server handle; the CLI runs in real subprocesses against it, with the fake OpenAI server.
(Failures of the embedding service during search, and kill -9 of a sync, are in
test_openai_backend.py and test_write_path.py.)
"""

from __future__ import annotations

import json
import subprocess
import threading

import psycopg
import pytest

from payrail_embedder import SearchUnavailable
from payrail_embedder.embedders import OpenAIEmbedder
from payrail_embedder.faces.api import Registry
from payrail_embedder.postgres.connection import connect, one_row, one_value
from payrail_embedder.registry import sync
from payrail_test_support import CLI, REPO
from payrail_test_support.agent_helpers import SEMANTIC_QUERY, expected_name_matches, expected_semantic_matches, import_catalog
from payrail_test_support.cli import cli_json, run_cli, without_registry
from payrail_test_support.environments import cli_environment
from payrail_test_support.openai_fake import FAKE_MODEL, SwitchAt
from payrail_test_support.stored import assert_whole_or_nothing, insert_drafts, rows

NAME_QUERY = "Stripe"
# What a client whose connection the stopping server ended reports (the server's notice, or
# libpq's own words when the socket closed first).
CONNECTION_LOST = ("terminating connection due to administrator command", "server closed the connection unexpectedly")


class HoldRequest(list):
    """Stands in for FakeOpenAI.requests: the n-th request is held (its answer waits) until released.

    The fake appends each request before it answers, so `reached` means the client has sent
    request n and waits for its answer.
    """

    def __init__(self, n: int):
        super().__init__()
        self.n = n
        self.reached = threading.Event()
        self.released = threading.Event()

    def append(self, item):
        super().append(item)
        if len(self) == self.n:
            self.reached.set()
            self.released.wait(60)


def records(url: str) -> list[dict]:
    # Enabled first: an import numbers its new records in name order, not file order.
    return sorted(rows(url), key=lambda record: (not record["enabled"], record["id"]))


def holding_environment(registry_url: str, openai_fake, tmp_path) -> dict[str, str]:
    """The CLI environment for tests that hold a request at the fake: the client waits for as long
    as the test holds it (never its own timeout), so what happens meanwhile is the test's doing."""
    return {**cli_environment(registry_url, openai_fake, tmp_path), "PAYRAIL_EMBEDDING_TIMEOUT": "300", "PAYRAIL_EMBEDDING_RETRIES": "0"}


def expected_answers() -> dict[str, dict]:
    return {
        NAME_QUERY: {"matches": expected_name_matches(NAME_QUERY)},
        SEMANTIC_QUERY: {"matches": expected_semantic_matches(SEMANTIC_QUERY)},
    }


def assert_search_unavailable(env: dict, query: str, detail: str) -> None:
    """search --json fails with search_unavailable and the reason: never an empty or partial answer."""
    code, payload, _ = cli_json(env, "search", query, "--json")
    assert code == 1 and payload["error"] == "search_unavailable", payload
    assert detail in payload["detail"], payload


# --- PostgreSQL stops and restarts ----------------------------------------------------------------


@pytest.mark.slow
def test_postgres_stopped_during_a_sync_fails_it_clearly_and_a_rerun_after_restart_converges(own_server, registry_url, openai_fake, tmp_path):
    env = holding_environment(registry_url, openai_fake, tmp_path)
    import_catalog(registry_url, openai_fake, tmp_path)
    names = insert_drafts(registry_url, 20)
    hold = openai_fake.requests = HoldRequest(3)
    sync = subprocess.Popen(
        [str(CLI), "sync", "--batch-size", "5", "--json"],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # Two batches committed; the third batch's vectors are on their way when the server stops.
        assert hold.reached.wait(60), sync.communicate()
        own_server.stop()
    finally:
        hold.released.set()
        stdout, stderr = sync.communicate(timeout=60)

    assert sync.returncode == 1 and "Traceback" not in stderr, (stdout, stderr)
    summary = json.loads(stdout)
    assert summary["embedded"] == 10 and summary["pending"] == names[10:], summary
    assert any(reason in summary["error"] for reason in CONNECTION_LOST), summary

    # While the server is down, sync says so, with the server's reason.
    result = run_cli(env, "sync", "--json")
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    failure = json.loads(result.stdout)
    assert failure["error"] == "unavailable" and "Is the server running" in failure["detail"], failure

    own_server.start()
    # The catalog's records kept their vectors; the drafts have the vector of their content or none.
    assert [assert_whole_or_nothing(r) for r in records(registry_url)] == [True] * 7 + [True] * 10 + [False] * 10
    code, summary, _ = cli_json(env, "sync", "--json")
    assert (code, without_registry(summary)) == (0, {"embedded": 10, "changedMeanwhile": 0, "pending": []})
    assert all(assert_whole_or_nothing(r) for r in records(registry_url))


@pytest.mark.slow
def test_postgres_stopped_during_searches_is_search_unavailable_and_search_answers_again_after_restart(own_server, registry_url, openai_fake, tmp_path):
    env = holding_environment(registry_url, openai_fake, tmp_path)
    import_catalog(registry_url, openai_fake, tmp_path)
    expected = expected_answers()
    # A long-lived agent process (the Python API, as the MCP server holds it): one pool throughout.
    agent = Registry(
        registry_url,
        embedder=OpenAIEmbedder(FAKE_MODEL, api_key="test-key", base_url=openai_fake.base_url, timeout=2, max_retries=0),
        connect_timeout=1,
    )
    try:
        for query, answer in expected.items():
            assert [m.to_json() for m in agent.search_provider_methods(query)["matches"]] == answer["matches"]

        # A search in flight: it asked the database (the query is not a name) and let its
        # connection go, now waits for the query embedding; the server stops before it connects again.
        hold = openai_fake.requests = HoldRequest(1)
        search = subprocess.Popen(
            [str(CLI), "search", SEMANTIC_QUERY, "--json"],
            env=env,
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert hold.reached.wait(60), search.communicate()
            own_server.stop()
        finally:
            hold.released.set()
            stdout, stderr = search.communicate(timeout=60)
        assert search.returncode == 1 and "Traceback" not in stderr, (stdout, stderr)
        payload = json.loads(stdout)
        assert payload["error"] == "search_unavailable", payload
        assert payload["detail"].startswith("cannot reach the database: "), payload

        # While it is down: both paths, from a new process and from the long-lived one.
        assert_search_unavailable(env, NAME_QUERY, "cannot reach the database")
        assert_search_unavailable(env, SEMANTIC_QUERY, "cannot reach the database")
        with pytest.raises(SearchUnavailable, match="cannot reach the database"):
            agent.search_provider_methods(NAME_QUERY)

        own_server.start()
        for query, answer in expected.items():
            # The same Registry, on its first call: its pool gives up its backed-off reconnection
            # attempt and opens a fresh connection, rather than answering search_unavailable for as
            # long as the last backoff delay.
            assert [m.to_json() for m in agent.search_provider_methods(query)["matches"]] == answer["matches"]
        assert cli_json(env, "search", SEMANTIC_QUERY, "--json")[:2] == (0, expected[SEMANTIC_QUERY])
    finally:
        agent.close()


# --- the embedding service fails during a sync ----------------------------------------------------


@pytest.mark.parametrize("behaviour", ["wrong_dimensions", "500", "malformed"])
def test_embedding_service_failing_during_a_sync_leaves_every_record_valid(behaviour, database_url, openai_fake, tmp_path):
    """Enabled records, a catalog draft whose content changed, and fresh drafts: the failure in the
    second batch keeps the first batch's vectors, drops no other, and writes no vector of other
    content or dimensions; the rerun, once the service is well, embeds the rest.
    (sync as `payrail-embedder sync` runs it, in process; the CLI's exit code and report on these
    failures are in test_write_path.py.)
    """
    import_catalog(database_url, openai_fake, tmp_path)
    names = insert_drafts(database_url, 8)
    with psycopg.connect(database_url) as conn:
        # The catalog's draft had a vector; its content changes, so it loses it.
        conn.execute("update payrail.provider_methods set guidance = guidance || ' Edited.' where not enabled")
    assert [assert_whole_or_nothing(r) for r in records(database_url)] == [True] * 6 + [False] * 9
    embedder = OpenAIEmbedder(FAKE_MODEL, api_key="test-key", base_url=openai_fake.base_url, timeout=2, max_retries=0)

    with psycopg.connect(database_url) as conn:
        (catalog_draft,) = conn.execute("select provider || ' / ' || method from payrail.provider_methods where not enabled order by id limit 1").fetchone()

    openai_fake.requests = SwitchAt(openai_fake, 2, behaviour)
    with connect(database_url, autocommit=True) as conn:
        report = sync.sync(conn, embedder, batch_size=4)
    # Sync embeds the shortest texts first: the fresh drafts (all of one length, so in id order),
    # then the catalog draft. The first batch holds four fresh drafts; the failure leaves the rest.
    assert report.embedded == 4 and report.pending == names[4:] + [catalog_draft] and report.error, report
    assert [assert_whole_or_nothing(r) for r in records(database_url)] == [True] * 6 + [False] + [True] * 4 + [False] * 4

    openai_fake.behaviour = "ok"
    with connect(database_url, autocommit=True) as conn:
        report = sync.sync(conn, embedder, batch_size=4)
    assert report.to_json() == {"embedded": 5, "changedMeanwhile": 0, "pending": []}
    assert all(assert_whole_or_nothing(r) for r in records(database_url))


def test_a_statement_that_returns_no_row_where_one_was_promised_fails_clearly(server):
    """one_row and one_value: the statements that always return a row (a function call, an
    aggregate, select exists) read it through them, so a broken promise is a psycopg error that
    says so, not a TypeError further on."""
    with psycopg.connect(server.admin_url, autocommit=True) as conn:
        assert one_value(conn.execute("select 42")) == 42
        with pytest.raises(psycopg.DataError, match="returned none .*SELECT 0"):
            one_row(conn.execute("select 1 where false"))
