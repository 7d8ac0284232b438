"""One question, four front doors, one answer: the SQL function (as the agents' role), the Python
API, the CLI's --json and the MCP tool return the same matches, on the name path and the semantic
path alike.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

import anyio
import psycopg
import pytest
from pgvector import Vector
from pgvector.psycopg import register_vector

from payrail_embedder.faces.api import Registry
from payrail_test_support.agent_helpers import NAME_QUERIES, SEMANTIC_QUERIES, expected_semantic_matches, import_catalog, mcp_client
from payrail_test_support.cli import run_cli
from payrail_test_support.openai_fake import FAKE_MODEL, fake_embedding

QUERIES = NAME_QUERIES + SEMANTIC_QUERIES
AGENT_LOGIN = "payrail_test_agent"
AGENT_PASSWORD = "agent-test-password"  # trust auth ignores it; a Docker or external server needs one


def agent_url(database_url: str) -> str:
    """The same database, as a login role that holds payrail_agent and nothing else."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(
            f"""
            do $$ begin
              create role {AGENT_LOGIN} login password '{AGENT_PASSWORD}' in role payrail_agent;
            exception when duplicate_object then null;
            end $$
            """
        )
    parts = urlsplit(database_url)
    host = parts.netloc.rpartition("@")[2]
    return parts._replace(netloc=f"{AGENT_LOGIN}:{AGENT_PASSWORD}@{host}").geturl()


def sql_answers(database_url: str) -> dict[str, dict]:
    """What any PostgreSQL client does, connected as an agent: learn the model, try the name path,
    embed only when the query needs it.
    """
    answers = {}
    with psycopg.connect(database_url, autocommit=True) as conn:
        register_vector(conn)
        assert conn.info.user == AGENT_LOGIN
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("select from payrail.provider_methods")  # agents see the search, never the table
        model, dimensions = conn.execute("select name, dimensions from payrail.get_embedding_model()").fetchone()
        assert model == FAKE_MODEL
        for query in QUERIES:
            if conn.execute("select payrail.query_takes_name_path(%s)", (query,)).fetchone()[0]:
                assert query in NAME_QUERIES
                rows = conn.execute("select * from payrail.search_provider_methods(%s)", (query,)).fetchall()
            else:
                assert query in SEMANTIC_QUERIES
                embedding = Vector(fake_embedding(query, dimensions))
                rows = conn.execute("select * from payrail.search_provider_methods(%s, %s, %s)", (query, embedding, model)).fetchall()
            answers[query] = {"matches": [{"provider": p, "method": m, "urls": list(u), "docsUrl": d, "guidance": g} for p, m, u, d, g in rows]}
    return answers


def api_answers(env: dict[str, str]) -> dict[str, dict]:
    with Registry(
        env["PAYRAIL_DATABASE_URL"],
        backend="openai",
        model=env["PAYRAIL_EMBEDDING_MODEL"],
        openai_base_url=env["OPENAI_BASE_URL"],
    ) as registry:
        return {query: {"matches": [m.to_json() for m in registry.search_provider_methods(query)["matches"]]} for query in QUERIES}


def cli_answers(env: dict[str, str]) -> dict[str, dict]:
    def ask(query):
        result = run_cli(env, "search", "--json", query)
        assert result.returncode == 0, result.stdout + result.stderr
        return json.loads(result.stdout)

    with ThreadPoolExecutor(max_workers=3) as pool:
        return dict(zip(QUERIES, pool.map(ask, QUERIES), strict=True))


def mcp_answers(env: dict[str, str], errlog) -> dict[str, dict]:
    async def main():
        answers = {}
        async with mcp_client(env, errlog) as client:
            for query in QUERIES:
                result = await client.call_tool("search_provider_methods", {"query": query})
                assert not result.is_error, result
                answers[query] = result.structured_content
        return answers

    return anyio.run(main)


@pytest.mark.slow
def test_every_interface_gives_the_same_answer(cli_env, database_url, openai_fake, tmp_path, monkeypatch):
    import_catalog(database_url, openai_fake, tmp_path)
    monkeypatch.setenv("OPENAI_API_KEY", cli_env["OPENAI_API_KEY"])
    # Every front door connects as an agent would in production: payrail_agent only.
    cli_env = cli_env | {"PAYRAIL_DATABASE_URL": agent_url(database_url)}

    by_sql = sql_answers(cli_env["PAYRAIL_DATABASE_URL"])
    with open(tmp_path / "mcp-stderr.log", "w") as errlog:
        answers = {
            "python api": api_answers(cli_env),
            "cli --json": cli_answers(cli_env),
            "mcp tool": mcp_answers(cli_env, errlog),
        }

    for interface, answer in answers.items():
        assert answer == by_sql, interface
    # And the shared answer is the right one, not merely the same one.
    for query in SEMANTIC_QUERIES:
        assert by_sql[query]["matches"] == expected_semantic_matches(query), query
    assert [m["provider"] for m in by_sql["Stripe"]["matches"]] == ["Stripe", "Stripe"]
    assert [m["method"] for m in by_sql["  twilio /   SEND an sms "]["matches"]] == ["Send an SMS"]
    assert [m["method"] for m in by_sql["Create a refund"]["matches"]] == ["Create a refund"]
    assert all(m["provider"] != "Amadeus" for answer in by_sql.values() for m in answer["matches"])
