"""The agent path's round trips, counted on the wire (a real TCP proxy reading what the client
sends): an exact name is one, a semantic search two (the name path's answer says which model to
embed with; the search with the vector checks it in SQL), through the Python API and the MCP tool,
prepared or not; a pooled connection the server dropped is found by using it, not by a check
before every use, and costs no failed search."""

from __future__ import annotations

import anyio
import psycopg
import pytest

from payrail_embedder.api import Registry
from payrail_embedder.postgres import connection, pool
from payrail_embedder.registry.embedding_model import EmbeddingModel, model_of_embedding_required
from payrail_embedder.registry.search import NeedsEmbedding, _name_path
from payrail_test_support.agent_helpers import SEMANTIC_QUERY, expected_semantic_matches, import_catalog, mcp_client
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
