"""The agent path's round trips, counted on the wire (a real TCP proxy reading what the client
sends): an exact name is one, a semantic search two (the name path's answer says which model to
embed with; the search with the vector checks it in SQL), through the Python API and the MCP tool,
prepared or not; a pooled connection the server dropped is found by using it, not by a check
before every use, and costs no failed search. Writes take the same shape: a batch is one call of
payrail.save_provider_methods, answered with what needs a vector, then one with the vectors."""

from __future__ import annotations

import anyio
import psycopg
import pytest

from payrail_embedder.api import Registry
from payrail_embedder.backoffice import actions
from payrail_embedder.embedders import OpenAIEmbedder
from payrail_embedder.postgres import connection, pool
from payrail_embedder.registry import catalog
from payrail_embedder.registry.embedding_model import EmbeddingModel, model_of_embedding_required
from payrail_embedder.registry.records import Line, ProviderMethod
from payrail_embedder.registry.search import NeedsEmbedding, _name_path
from payrail_test_support.agent_helpers import SEMANTIC_QUERY, expected_semantic_matches, import_catalog, mcp_client
from payrail_test_support.openai_fake import FAKE_MODEL
from payrail_test_support.pgbouncer import start_pgbouncer
from payrail_test_support.round_trips import RoundTripCounter

EXACT_NAME = "Stripe"


@pytest.fixture
def registry(database_url, openai_fake, cli_env, monkeypatch, tmp_path):
    """A registry holding the agent helpers' catalog; the process environment an agent configured
    like cli_env has (the Registry reads it)."""
    import_catalog(database_url, openai_fake, tmp_path)
    for key, value in cli_env.items():
        if key.startswith(("PAYRAIL_", "OPENAI_")):
            monkeypatch.setenv(key, value)


@pytest.fixture
def counter(registry, database_url):
    """A counting proxy in front of that registry."""
    counter = RoundTripCounter(database_url)
    yield counter
    counter.close()


@pytest.mark.parametrize("prepared", [True, False], ids=["prepared", "unprepared"])
def test_the_python_api_asks_once_for_a_name_and_twice_for_a_need(counter, prepared):
    assert_round_trips(counter, prepared)


def test_through_a_transaction_pooler_too(server, database_url, registry):
    bouncer = start_pgbouncer(server.admin_url, pool_mode="transaction", pool_size=1)
    through_pooler = RoundTripCounter(bouncer.through(database_url))
    try:
        assert_round_trips(through_pooler, prepared=False)
    finally:
        through_pooler.close()
        bouncer.stop()


def assert_round_trips(counter: RoundTripCounter, prepared: bool) -> None:
    with Registry(counter.url(), prepared_statements=prepared) as registry:
        for _ in range(6):  # warm: the pool open, psycopg's statements prepared (after 5 uses)
            registry.search_provider_methods(EXACT_NAME)
            registry.search_provider_methods(SEMANTIC_QUERY)
        with counter.counting() as by_name:
            assert len(registry.search_provider_methods(EXACT_NAME)["matches"]) == 2
        with counter.counting() as by_need:
            answer = registry.search_provider_methods(SEMANTIC_QUERY)
    assert [match.to_json() for match in answer["matches"]] == expected_semantic_matches(SEMANTIC_QUERY)
    assert (by_name, by_need) == ([1], [2])


def test_the_mcp_tool_asks_once_for_a_name_and_twice_for_a_need(counter, cli_env, openai_fake, tmp_path):
    async def main():
        with open(tmp_path / "mcp-stderr.log", "w") as errlog:
            async with mcp_client({**cli_env, "PAYRAIL_DATABASE_URL": counter.url()}, errlog) as client:
                for _ in range(6):
                    await client.call_tool("search_provider_methods", {"query": EXACT_NAME})
                    await client.call_tool("search_provider_methods", {"query": SEMANTIC_QUERY})
                with counter.counting() as by_name:
                    await client.call_tool("search_provider_methods", {"query": EXACT_NAME})
                with counter.counting() as by_need:
                    semantic = await client.call_tool("search_provider_methods", {"query": SEMANTIC_QUERY})
        return by_name, by_need, semantic

    by_name, by_need, semantic = anyio.run(main)
    assert semantic.structured_content == {"matches": expected_semantic_matches(SEMANTIC_QUERY)}
    assert (by_name, by_need) == ([1], [2])


def test_connections_the_server_dropped_are_found_by_use_and_cost_no_search(counter):
    with Registry(counter.url(), pool_size=3) as registry:
        registry.search_provider_methods(EXACT_NAME)
        assert registry.pool is not None
        with registry.pool.connection() as first, registry.pool.connection() as second, registry.pool.connection() as third:
            assert len({first.info.backend_pid, second.info.backend_pid, third.info.backend_pid}) == 3
        with psycopg.connect(counter.url(), autocommit=True) as admin:
            dropped = admin.execute(
                "select count(pg_catalog.pg_terminate_backend(pid)) from pg_catalog.pg_stat_activity where application_name = %s and datname = current_database()",
                (pool.APPLICATION_NAME,),
            ).fetchone()[0]
        assert dropped == 3
        for query in (EXACT_NAME, SEMANTIC_QUERY, EXACT_NAME, SEMANTIC_QUERY):
            assert registry.search_provider_methods(query)["matches"]


def test_the_name_paths_answer_names_the_model_whatever_its_name(database_url):
    """The model is read from PYE01's detail, a name with parentheses and dots included; from a
    registry whose db/ predates that detail it is asked for (one statement more, same model)."""
    model = "acme/embed (v2.1) (beta)"
    with connection.connect(database_url, autocommit=True) as conn:
        conn.execute("select payrail.set_embedding_model(%s, 3)", (model,))
        answer = _name_path(conn, "find a hotel", None)
        assert answer == NeedsEmbedding(EmbeddingModel(model, 3))
        with pytest.raises(psycopg.Error) as older:
            conn.execute("do $$ begin raise exception using errcode = 'PYE01', message = 'needs a query embedding'; end $$")
        assert model_of_embedding_required(conn, older.value) == EmbeddingModel(model, 3)


def test_writes_are_one_call_each_way_an_import_batch_a_save_and_a_delete(database_url, openai_fake):
    """An import batch of new content: one call answered with the texts to embed, one saving them
    with their vectors; the same file again, one call. A backoffice content save: whether any golden
    query could change, then the two calls; a URL-only save one call; a delete one statement that
    reads and deletes the record."""
    counter = RoundTripCounter(database_url)
    embedder = OpenAIEmbedder(FAKE_MODEL, api_key="test-key", base_url=openai_fake.base_url, timeout=5, max_retries=0)
    records = [ProviderMethod(f"Provider {n}", f"Method {n}", [f"https://api.example/{n}"], None, f"Purpose: thing {n}.", True) for n in range(40)]
    lines = [Line("catalog.jsonl", n + 1, record) for n, record in enumerate(records)]
    try:
        with connection.connect(counter.url(), autocommit=True) as conn:
            with counter.counting() as imported:
                first = catalog.import_records(conn, lambda: embedder, lines)
            with counter.counting() as reimported:
                again = catalog.import_records(conn, lambda: embedder, lines)
            ids = [dict(conn.execute("select provider, id from payrail.provider_methods").fetchall())[f"Provider {n}"] for n in range(3)]
            content, url_only = (
                ProviderMethod("Provider 0", "Method 0", ["https://api.example/0"], None, "Purpose: thing 0, edited.", True),
                ProviderMethod("Provider 1", "Method 1", ["https://api.example/1", "https://mirror.example/1"], None, "Purpose: thing 1.", True),
            )
            with counter.counting() as content_save:
                embedded = actions.save_record(conn, lambda: embedder, content, ids[0], 1)
            with counter.counting() as url_only_save:
                kept = actions.save_record(conn, lambda: embedder, url_only, ids[1], 1)
            with counter.counting() as delete:
                deleted, problem = actions.delete(conn, ids[2], 1)
    finally:
        counter.close()
    assert (first.created, again.unchanged) == (40, 40)
    assert embedded.saved is not None and (embedded.saved.outcome, embedded.saved.embedded) == ("updated", True)
    assert kept.saved is not None and (kept.saved.outcome, kept.saved.embedded, kept.saved.has_current_vector) == ("updated", False, True)
    assert problem is None and deleted is not None and deleted["provider"] == "Provider 2"
    assert (imported, reimported, content_save, url_only_save, delete) == ([2], [1], [3], [2], [1])
