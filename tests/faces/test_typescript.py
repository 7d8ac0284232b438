"""TypeScript clients, as agents written in it call the registry: docs/agents.md's examples run as
written with Node.js (the official MCP TypeScript SDK, node-postgres with pgvector), and the MCP
server answers the mistakes a TypeScript agent can make with the documented JSON text.

scripts/test installs tests/typescript's packages (`npm ci`) before the suite runs.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg
import pytest

from payrail_test_support import REPO
from payrail_test_support.agent_helpers import CATALOG, SEMANTIC_QUERY, as_match, expected_semantic_matches, import_catalog
from payrail_test_support.docs import DOCS, code_blocks, read, section
from payrail_test_support.openai_fake import FAKE_DIMENSIONS
from payrail_test_support.ports import unused_port

pytestmark = pytest.mark.slow  # Node and the npm clients

CLIENTS = REPO / "tests" / "typescript"
DOC_BLOCKS = code_blocks(section(read(DOCS / "agents.md"), "## From TypeScript"), "js")


@pytest.fixture
def node_env(cli_env, database_url, openai_fake, tmp_path) -> dict[str, str]:
    """A registry holding CATALOG, and the environment a TypeScript agent would run in (the CLI on PATH)."""
    assert (CLIENTS / "node_modules").is_dir(), "run `npm ci --prefix tests/typescript` (scripts/test does)"
    import_catalog(database_url, openai_fake, tmp_path)
    return {**cli_env, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}


def node(env: dict[str, str], script: Path) -> list[str]:
    result = subprocess.run(["node", str(script)], env=env, cwd=CLIENTS, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout.splitlines()


STDIO, HTTP, NODE_POSTGRES = range(3)


def test_the_docs_have_the_three_typescript_examples():
    assert len(DOC_BLOCKS) == 3
    assert "const { matches } = await search_provider_methods({ query });" in DOC_BLOCKS[STDIO]
    assert "new StreamableHTTPClientTransport(url)" in DOC_BLOCKS[HTTP]
    assert "pgvector.toSql(embedding)" in DOC_BLOCKS[NODE_POSTGRES]


def run_block(env: dict[str, str], index: int, query: str | None = None) -> subprocess.CompletedProcess:
    """The docs' block `index` run with node beside tests/typescript's node_modules (where its imports
    resolve), its query (`const query = "..."` or `query: "..."`) replaced by `query` if given."""
    block = DOC_BLOCKS[index]
    if query is not None:
        block = re.sub(r'(const query = |query: )".*?"', lambda m: m.group(1) + json.dumps(query), block)
    # In CLIENTS, where node finds the packages it imports; a name of its own, as the same block
    # may run on another server in another test worker at the same time.
    with tempfile.NamedTemporaryFile("w", encoding="utf-8", dir=CLIENTS, prefix=f".docs-{index}-", suffix=".mjs", delete=False) as file:
        file.write(block)
    script = Path(file.name)
    try:
        return subprocess.run(["node", str(script)], env=env, cwd=CLIENTS, capture_output=True, text=True, timeout=120)
    finally:
        script.unlink()


def test_the_mcp_example_runs_as_written(node_env):
    result = run_block(node_env, STDIO)
    assert result.returncode == 0, result.stderr
    assert f'const query = "{SEMANTIC_QUERY}";' in DOC_BLOCKS[STDIO]
    expected = [f"{m['provider']} / {m['method']}: {m['docsUrl']}" for m in expected_semantic_matches(SEMANTIC_QUERY)]
    assert result.stdout.splitlines() == expected


def test_the_mcp_over_http_example_runs_as_written(node_env, tmp_path):
    port = unused_port()
    log = tmp_path / "mcp-http.log"
    with log.open("w") as output:
        server = subprocess.Popen(["payrail-embedder", "mcp", "--http", str(port)], env=node_env, stdout=output, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}/mcp"
        deadline = time.monotonic() + 60
        while url not in log.read_text():  # printed once the server is ready
            assert server.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        result = run_block({**node_env, "PAYRAIL_MCP_URL": url}, HTTP)
        # A tool error (here an empty query) throws with the documented JSON, and node exits non-zero.
        failed = run_block({**node_env, "PAYRAIL_MCP_URL": url}, HTTP, query="")
    finally:
        server.terminate()
        server.wait(timeout=20)
    assert result.returncode == 0, result.stderr
    query = re.search(r'query: "(.+?)"', DOC_BLOCKS[HTTP]).group(1)
    assert result.stdout.splitlines() == [f"{m['provider']} / {m['method']}: {m['docsUrl']}" for m in expected_semantic_matches(query)]
    assert failed.returncode != 0 and failed.stdout == "", failed.stdout
    assert "invalid_query" in failed.stderr and "query is empty" in failed.stderr, failed.stderr

    # Nothing listening: the connect throws, and node exits non-zero.
    refused = run_block({**node_env, "PAYRAIL_MCP_URL": url}, HTTP)
    assert refused.returncode != 0 and "fetch failed" in refused.stderr, refused.stderr


def test_the_node_postgres_example_runs_as_written(node_env):
    result = run_block(node_env, NODE_POSTGRES)
    assert result.returncode == 0, result.stderr
    query = re.search(r'const query = "(.+?)";', DOC_BLOCKS[NODE_POSTGRES]).group(1)
    assert result.stdout.splitlines() == [f"{m['provider']} / {m['method']}: {m['docsUrl']}" for m in expected_semantic_matches(query)]


def test_the_node_postgres_example_checks_the_embedding_services_http_status(node_env, openai_fake):
    openai_fake.behaviour = "500"
    result = run_block(node_env, NODE_POSTGRES)
    assert result.returncode != 0 and "embedding service: HTTP 500" in result.stderr, result.stderr


def test_on_a_local_model_registry_node_postgres_answers_names_and_sends_other_queries_to_mcp(node_env, database_url):
    with psycopg.connect(database_url) as conn:
        # The registry switched to the local default's model (its vectors kept: only the name path is asked).
        conn.execute(
            """insert into payrail.embedding_staging (provider_method_id, model, content_hash, embedding)
               select id, 'all-MiniLM-L6-v2', content_hash, embedding from payrail.provider_methods"""
        )
        conn.execute("select payrail.switch_embedding_model('all-MiniLM-L6-v2', %s)", (FAKE_DIMENSIONS,))
    by_name = run_block(node_env, NODE_POSTGRES, query="Stripe")
    assert by_name.returncode == 0, by_name.stderr
    assert by_name.stdout.splitlines() == [f"{r['provider']} / {r['method']}: {r['docsUrl']}" for r in CATALOG[:2]]
    semantic = run_block(node_env, NODE_POSTGRES, query=SEMANTIC_QUERY)
    assert semantic.returncode != 0
    assert "this registry embeds with the local model, which no OpenAI endpoint serves: ask it over MCP" in semantic.stderr


def test_a_plain_js_array_is_refused_as_a_vector(node_env):
    (line,) = node(node_env, CLIENTS / "pg_plain_array.mjs")
    refusal = json.loads(line)
    assert refusal["refused"] is True and refusal["code"] == "22P02", refusal


def test_every_mcp_tool_failure_is_the_documented_json(node_env):
    results = {r["case"]: r for r in map(json.loads, node(node_env, CLIENTS / "mcp_failures.mjs"))}
    assert set(results) == {"a number", "null", "missing", "empty", "white space", "too long", "an unknown tool"}
    for case, result in results.items():
        assert result["isError"] is True, result
        error = json.loads(result["text"])
        assert set(error) == {"error", "detail"} and error["error"] == "invalid_query", (case, error)
    assert "not int" in json.loads(results["a number"]["text"])["detail"]
    assert json.loads(results["missing"]["text"])["detail"].startswith("the query is missing: call search_provider_methods with")
    assert "not null" in json.loads(results["null"]["text"])["detail"]
    assert "2001 characters" in json.loads(results["too long"]["text"])["detail"]
    assert "search_everything" in json.loads(results["an unknown tool"]["text"])["detail"]


def test_the_name_path_answers_typescript_without_an_embedding_service(node_env):
    env = {**node_env, "OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}  # nothing listens there
    result = run_block(env, STDIO, query="Stripe")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [f"{m['provider']} / {m['method']}: {m['docsUrl']}" for m in map(as_match, CATALOG[:2])]
