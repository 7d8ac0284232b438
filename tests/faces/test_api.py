"""The Python API (payrail_embedder.search_provider_methods / Registry) against a real PostgreSQL,
with the fake OpenAI server as the embedder, configured through the environment like the CLI.
"""

from __future__ import annotations

import os

import psycopg
import pytest

import payrail_embedder
from payrail_embedder.faces import api
from payrail_embedder.faces.api import Match, Registry
from payrail_embedder.postgres import pool
from payrail_test_support.agent_helpers import CATALOG, NAME_QUERIES, SEMANTIC_QUERY, as_match, expected_semantic_matches, import_catalog
from payrail_test_support.ports import unused_port


@pytest.fixture
def agent_env(cli_env, database_url, openai_fake, monkeypatch, tmp_path):
    """The process environment of an agent configured like cli_env, with the catalog imported."""
    import_catalog(database_url, openai_fake, tmp_path)
    for key in list(os.environ):
        if key.startswith(("PAYRAIL_", "OPENAI_")):
            monkeypatch.delenv(key)
    for key, value in cli_env.items():
        if key.startswith(("PAYRAIL_", "OPENAI_")):
            monkeypatch.setenv(key, value)
    return cli_env


@pytest.fixture
def registry(agent_env):
    with Registry() as registry:
        yield registry


def agent_backends(database_url: str) -> list[int]:
    """Backend pids of the API's pool connections to this database."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        rows = conn.execute(
            "select pid from pg_stat_activity where application_name = %s and datname = current_database()",
            (pool.APPLICATION_NAME,),
        ).fetchall()
    return sorted(pid for (pid,) in rows)


def test_name_path_returns_typed_matches_without_embedding(registry, openai_fake):
    requests_before = len(openai_fake.requests)

    answer = registry.search_provider_methods("Stripe")

    assert list(answer) == ["matches"]
    assert all(isinstance(match, Match) for match in answer["matches"])
    assert [(m.provider, m.method) for m in answer["matches"]] == [
        ("Stripe", "Create a PaymentIntent"),
        ("Stripe", "Create a refund"),
    ]
    first = answer["matches"][0]
    assert first.urls == ("https://api.stripe.com/v1/payment_intents",)
    assert first.docsUrl == "https://docs.stripe.com/api/payment_intents/create"
    assert first.guidance.startswith("Purpose: Charge a customer card")
    with pytest.raises(AttributeError):
        first.provider = "Other"  # frozen: an answer cannot be edited by accident
    assert len(openai_fake.requests) == requests_before, "the name path must not call the embedding service"


def test_semantic_path_embeds_the_query_once(registry, openai_fake):
    requests_before = len(openai_fake.requests)

    answer = registry.search_provider_methods(SEMANTIC_QUERY)

    assert [m.to_json() for m in answer["matches"]] == expected_semantic_matches(SEMANTIC_QUERY)
    assert "Amadeus" not in [m.provider for m in answer["matches"]]  # the closer draft stays invisible
    assert [r["input"] for r in openai_fake.requests[requests_before:]] == [[SEMANTIC_QUERY]]


def test_pool_is_reused_across_calls(registry, database_url):
    registry.search_provider_methods("Stripe")
    backends = agent_backends(database_url)

    for query in [*NAME_QUERIES, SEMANTIC_QUERY] * 3:
        registry.search_provider_methods(query)

    assert len(backends) == 1
    assert agent_backends(database_url) == backends, "every call must reuse the pooled connection"
    assert registry.pool.get_stats()["connections_num"] == 1


def test_module_level_call_uses_one_default_registry(agent_env, monkeypatch):
    monkeypatch.setattr(api, "_default_registry", None)
    try:
        answer = payrail_embedder.search_provider_methods(query="twilio / send an sms")
        assert [m.to_json() for m in answer["matches"]] == [as_match(r) for r in CATALOG if r["provider"] == "Twilio"]
        first_registry = api.default_registry()
        payrail_embedder.search_provider_methods(query=SEMANTIC_QUERY)
        assert api.default_registry() is first_registry
    finally:
        if api._default_registry is not None:
            api._default_registry.close()


def test_invalid_query(registry, openai_fake):
    requests_before = len(openai_fake.requests)
    for query in ["", "   \n\t", "x" * 2001, None, 42]:
        with pytest.raises(payrail_embedder.InvalidQuery) as raised:
            registry.search_provider_methods(query)
        assert raised.value.code == "invalid_query"
        assert raised.value.detail, query
    assert len(openai_fake.requests) == requests_before, "a bad query must not be embedded"
    # The limit is inclusive: 2,000 characters are a query.
    assert len(registry.search_provider_methods("hotel " * 333 + "ab")["matches"]) == 3


def test_embedding_failure_is_search_unavailable_and_names_still_work(registry, openai_fake):
    openai_fake.behaviour = "500"

    with pytest.raises(payrail_embedder.SearchUnavailable) as raised:
        registry.search_provider_methods(SEMANTIC_QUERY)
    assert raised.value.code == "search_unavailable"
    assert "500" in raised.value.detail

    assert len(registry.search_provider_methods("Stripe")["matches"]) == 2

    openai_fake.behaviour = "ok"
    assert len(registry.search_provider_methods(SEMANTIC_QUERY)["matches"]) == 3


def test_unreachable_database_is_search_unavailable():
    registry = Registry(f"postgresql://127.0.0.1:{unused_port()}/payrail", backend="openai", connect_timeout=1)
    for _ in range(2):  # a failed first call leaves nothing half-open behind
        with pytest.raises(payrail_embedder.SearchUnavailable) as raised:
            registry.search_provider_methods("Stripe")
        # The direct attempt's reason, not a pool that waited out its timeout.
        assert "cannot reach the database" in raised.value.detail
        assert "refused" in raised.value.detail.lower()
    registry.close()


def test_database_restart_is_survived(registry, database_url):
    """A backend killed under the pool (a failover, a restart) costs no failed search."""
    registry.search_provider_methods("Stripe")
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(
            "select pg_terminate_backend(pid) from pg_stat_activity where application_name = %s and datname = current_database()",
            (pool.APPLICATION_NAME,),
        )
    assert len(registry.search_provider_methods("Stripe")["matches"]) == 2
