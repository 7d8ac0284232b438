"""`payrail-embedder mcp` in a real subprocess, driven by the MCP SDK's own client over stdio (and
once over streamable HTTP), against a real PostgreSQL and the fake OpenAI server.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess

import anyio
import pytest

from payrail_embedder.postgres.connection import connect
from payrail_test_support import CLI, REPO
from payrail_test_support.agent_helpers import CATALOG, SEMANTIC_QUERY, as_match, expected_semantic_matches, import_catalog, mcp_client
from payrail_test_support.ports import unused_port
from payrail_test_support.waiting import wait_until

TOOL = "search_provider_methods"
MATCH_KEYS = ["provider", "method", "urls", "docsUrl", "guidance"]


@pytest.fixture
def mcp_env(cli_env, database_url, openai_fake, tmp_path):
    import_catalog(database_url, openai_fake, tmp_path)
    return cli_env


@pytest.fixture
def errlog(tmp_path):
    """The server's stderr; shown when a test fails."""
    with open(tmp_path / "mcp-stderr.log", "w+") as log:
        yield log
        log.seek(0)
        print(log.read())


def error_of(result) -> dict:
    assert result.is_error, result
    return json.loads(result.content[0].text)


def test_lists_one_tool_with_its_schemas(mcp_env, errlog):
    async def main():
        async with mcp_client(mcp_env, errlog) as client:
            return client.instructions, (await client.list_tools()).tools

    instructions, tools = anyio.run(main)

    assert [tool.name for tool in tools] == [TOOL]
    tool = tools[0]
    description = tool.description.lower()
    for phrase in ("advisory", "not approvals or callable capabilities", "official docs", "payrail agent"):
        assert phrase in description, phrase
    assert "invalid_query" in description and "search_unavailable" in description
    assert tool.input_schema["required"] == ["query"]
    assert tool.input_schema["properties"]["query"]["type"] == "string"
    output = tool.output_schema
    assert output["required"] == ["matches"]
    assert output["properties"]["matches"]["type"] == "array"
    match_schema = output["$defs"]["Match"]
    assert match_schema["required"] == MATCH_KEYS
    assert match_schema["properties"]["urls"] == {"items": {"type": "string"}, "title": "Urls", "type": "array"}
    assert {"type": "null"} in match_schema["properties"]["docsUrl"]["anyOf"]
    assert tool.annotations.read_only_hint is True
    assert "payrail agent" in instructions.lower()


def test_name_and_semantic_paths(mcp_env, openai_fake, errlog):
    async def main():
        async with mcp_client(mcp_env, errlog) as client:
            before = len(openai_fake.requests)
            by_name = await client.call_tool(TOOL, {"query": "Stripe"})
            name_requests = len(openai_fake.requests) - before
            semantic = await client.call_tool(TOOL, {"query": SEMANTIC_QUERY})
            return by_name, name_requests, semantic, openai_fake.requests[before:]

    by_name, name_requests, semantic, requests = anyio.run(main)

    assert not by_name.is_error, by_name
    assert by_name.structured_content == {"matches": [as_match(r) for r in CATALOG[:2]]}
    assert name_requests == 0, "the name path must not call the embedding service"
    # The text block carries the same answer, for hosts that ignore structured content.
    assert json.loads(by_name.content[0].text) == by_name.structured_content

    assert not semantic.is_error, semantic
    assert semantic.structured_content == {"matches": expected_semantic_matches(SEMANTIC_QUERY)}
    assert [r["input"] for r in requests] == [[SEMANTIC_QUERY]]


def test_failures_are_tool_errors_that_name_them(mcp_env, openai_fake, errlog):
    async def main():
        async with mcp_client(mcp_env, errlog) as client:
            openai_fake.behaviour = "500"
            outage = await client.call_tool(TOOL, {"query": SEMANTIC_QUERY})
            name_during_outage = await client.call_tool(TOOL, {"query": "Stripe"})
            openai_fake.behaviour = "ok"
            empty = await client.call_tool(TOOL, {"query": ""})
            too_long = await client.call_tool(TOOL, {"query": "x" * 2001})
            recovered = await client.call_tool(TOOL, {"query": SEMANTIC_QUERY})
            return outage, name_during_outage, empty, too_long, recovered

    outage, name_during_outage, empty, too_long, recovered = anyio.run(main)

    assert error_of(outage)["error"] == "search_unavailable"
    assert "500" in error_of(outage)["detail"]
    assert outage.structured_content is None
    assert len(name_during_outage.structured_content["matches"]) == 2  # exact names need no embedding
    assert error_of(empty) == {"error": "invalid_query", "detail": "query is empty"}
    assert error_of(too_long)["error"] == "invalid_query"
    assert "2,000" in error_of(too_long)["detail"]
    assert recovered.structured_content == {"matches": expected_semantic_matches(SEMANTIC_QUERY)}


def test_a_call_without_a_query_says_the_query_is_missing(mcp_env, errlog):
    async def main():
        async with mcp_client(mcp_env, errlog) as client:
            return await client.call_tool(TOOL, {}), await client.call_tool(TOOL, {"question": "hotels"})

    for result in anyio.run(main):
        assert error_of(result) == {
            "error": "invalid_query",
            "detail": 'the query is missing: call search_provider_methods with {"query": "what you need, in plain words"}',
        }


def test_the_pool_is_open_before_the_server_answers_the_handshake(mcp_env, database_url, errlog):
    """The first question is as fast as the next: the server opens its pool (and loads a local
    model) before it answers `initialize`, not meanwhile (benchmarks/agent_latency.py times it)."""

    async def main():
        async with mcp_client(mcp_env, errlog):
            with connect(database_url, autocommit=True) as conn:
                return conn.execute(
                    "select count(*) from pg_stat_activity where application_name = 'payrail-agent-search' and datname = current_database()"
                ).fetchone()[0]

    assert anyio.run(main) >= 1


def test_unreachable_database_is_a_tool_error(errlog, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PAYRAIL_", "OPENAI_"))} | {
        "PAYRAIL_DATABASE_URL": f"postgresql://127.0.0.1:{unused_port()}/payrail",
        "PAYRAIL_DATA_DIR": str(tmp_path / "unused"),
        "PAYRAIL_EMBEDDER": "openai",
        "OPENAI_API_KEY": "test-key",
    }

    async def main():
        async with mcp_client(env, errlog) as client:
            return await client.call_tool(TOOL, {"query": "Stripe"})

    assert error_of(anyio.run(main))["error"] == "search_unavailable"


def test_streamable_http_on_localhost(mcp_env, tmp_path):
    from mcp.client import Client

    port = unused_port()
    with open(tmp_path / "http.log", "w") as log:
        server = subprocess.Popen([str(CLI), "mcp", "--http", str(port)], env=mcp_env, cwd=REPO, stdout=log, stderr=log)
        try:

            def listening() -> bool:
                assert server.poll() is None, (tmp_path / "http.log").read_text()
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                except OSError:
                    return False
                return True

            # Its start is imports and the pool's first connection: seconds alone, over 30 s with four
            # workers on two cores; the wait is for liveness, not a measure of speed (benchmarks time it).
            wait_until(listening, lambda: f"the MCP server to listen on {port}: {(tmp_path / 'http.log').read_text()}", timeout=90)

            async def main():
                async with Client(f"http://127.0.0.1:{port}/mcp") as client:
                    return await client.call_tool(TOOL, {"query": "stripe"})

            result = anyio.run(main)
            assert result.structured_content == {"matches": [as_match(r) for r in CATALOG[:2]]}
        finally:
            server.terminate()
            server.wait(timeout=10)
