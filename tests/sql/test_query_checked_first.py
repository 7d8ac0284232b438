"""A query that can never be valid (empty, white space or invisible characters only, over 2,000
characters) is invalid_query (exit 2) before any connection is made: on the CLI, the Python API
and MCP alike, while the database is down.

"Down" is a port that counts the connections made to it and closes each at once, so the tests
see that a bad query never even tried, and that a good one did (and was search_unavailable).
"""

from __future__ import annotations

import json
import os
import socket
import threading

import anyio
import pytest

from payrail_embedder import InvalidQuery, Registry, SearchUnavailable
from payrail_test_support.agent_helpers import mcp_client
from payrail_test_support.cli import cli_json

NEVER_VALID = ["", "   \t\n", "\u200b\u2060\ufeff", "\u2028\u3000", "x" * 2001]


class CountingPort:
    """A TCP port where a database would listen: it counts connections and closes each at once."""

    def __init__(self) -> None:
        self.connections = 0
        self._socket = socket.create_server(("127.0.0.1", 0))
        self.url = f"postgresql://payrail@127.0.0.1:{self._socket.getsockname()[1]}/payrail"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                client, _ = self._socket.accept()
            except OSError:
                return
            self.connections += 1
            client.close()

    def close(self) -> None:
        self._socket.close()


@pytest.fixture
def down():
    port = CountingPort()
    yield port
    port.close()


@pytest.fixture
def env(down, tmp_path) -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("PAYRAIL_", "OPENAI_"))} | {
        "PAYRAIL_DATABASE_URL": down.url,
        "PAYRAIL_DATA_DIR": str(tmp_path / "unused-embedded-data"),
        "PAYRAIL_EMBEDDER": "openai",
        "OPENAI_API_KEY": "test-key",
        "OPENAI_BASE_URL": "http://127.0.0.1:9/v1",
    }


def test_the_cli_refuses_a_never_valid_query_before_connecting(env, down, tmp_path):
    queries = tmp_path / "queries.jsonl"
    for query in NEVER_VALID:
        for args in (["search", "--json", query], ["preview", "--json", query, "--draft", "Acme / Geocode"]):
            code, answer, _ = cli_json(env, *args)
            assert (code, answer["error"]) == (2, "invalid_query"), (args, answer)
        queries.write_text(json.dumps({"query": "Stripe", "relevant": [["a", "b"]]}) + "\n" + json.dumps({"query": query, "relevant": [["a", "b"]]}) + "\n")
        code, answer, _ = cli_json(env, "eval", "--json", queries)
        assert (code, answer["error"]) == (2, "invalid_query") and ":2: " in answer["detail"], answer
    assert down.connections == 0
    # The control: a query that could be valid does try, and the database is down.
    code, answer, _ = cli_json(env, "search", "--json", "Stripe")
    assert (code, answer["error"]) == (1, "search_unavailable"), answer
    assert down.connections >= 1


def test_on_the_embedded_default_a_never_valid_query_starts_no_server(env, tmp_path):
    del env["PAYRAIL_DATABASE_URL"]
    code, answer, _ = cli_json(env, "search", "--json", "\u200b")
    assert (code, answer) == (2, {"error": "invalid_query", "detail": "query is empty"})
    assert not (tmp_path / "unused-embedded-data").exists()


def test_the_python_api_refuses_a_never_valid_query_before_connecting(down):
    registry = Registry(down.url, backend="openai", connect_timeout=1)
    for query in NEVER_VALID:
        with pytest.raises(InvalidQuery):
            registry.search_provider_methods(query)
    assert down.connections == 0 and registry.pool is None
    with pytest.raises(SearchUnavailable):
        registry.search_provider_methods("Stripe")
    assert down.connections >= 1
    registry.close()


def test_mcp_refuses_a_never_valid_query_while_the_database_is_down(env, tmp_path):
    async def main():
        with open(tmp_path / "mcp-stderr.log", "w") as errlog:
            async with mcp_client(env, errlog) as client:
                return [await client.call_tool("search_provider_methods", {"query": query}) for query in [*NEVER_VALID, "Stripe"]]

    *refused, control = anyio.run(main)
    for query, result in zip(NEVER_VALID, refused, strict=True):
        assert result.is_error, query
        assert json.loads(result.content[0].text)["error"] == "invalid_query", (query, result.content[0].text)
    assert json.loads(control.content[0].text)["error"] == "search_unavailable"
