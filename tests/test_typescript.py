"""TypeScript clients, as agents written in it call the registry: the README's examples run as
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
from pathlib import Path

import pytest

from payrail_test_support import REPO
from payrail_test_support.agent_helpers import CATALOG, SEMANTIC_QUERY, as_match, expected_semantic_matches, import_catalog

CLIENTS = REPO / "tests" / "typescript"
README_BLOCKS = re.findall(r"```js\n(.+?)```", (REPO / "README.md").read_text().split("### From TypeScript", 1)[1].split("\n### ", 1)[0], re.S)


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


def readme_script(index: int) -> Path:
    """README block `index` as a module beside tests/typescript's node_modules, where imports resolve."""
    path = CLIENTS / f".readme-{index}.mjs"
    path.write_text(README_BLOCKS[index], encoding="utf-8")
    return path


def test_the_readme_has_the_two_typescript_examples():
    assert len(README_BLOCKS) == 2
    assert "const { matches } = await search_provider_methods({ query });" in README_BLOCKS[0]
    assert "pgvector.toSql(embedding)" in README_BLOCKS[1]


def test_the_readme_mcp_example_runs_as_written(node_env):
    script = readme_script(0)
    try:
        lines = node(node_env, script)
    finally:
        script.unlink()
    assert f'const query = "{SEMANTIC_QUERY}";' in README_BLOCKS[0]
    expected = [f"{m['provider']} / {m['method']}: {m['docsUrl']}" for m in expected_semantic_matches(SEMANTIC_QUERY)]
    assert lines == expected


def test_the_readme_node_postgres_example_runs_as_written(node_env):
    query = re.search(r'const query = "(.+?)";', README_BLOCKS[1]).group(1)
    script = readme_script(1)
    try:
        lines = node(node_env, script)
    finally:
        script.unlink()
    expected = [f"{m['provider']} / {m['method']}: {m['docsUrl']}" for m in expected_semantic_matches(query)]
    assert lines == expected


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
    script = CLIENTS / ".name-path.mjs"
    script.write_text(README_BLOCKS[0].replace(f'const query = "{SEMANTIC_QUERY}";', 'const query = "Stripe";'), encoding="utf-8")
    try:
        lines = node(env, script)
    finally:
        script.unlink()
    assert lines == [f"{m['provider']} / {m['method']}: {m['docsUrl']}" for m in map(as_match, CATALOG[:2])]
