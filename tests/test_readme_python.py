"""Every Python block of the README and of docs/agents.md runs as written, offline, against a
registry of the shipped sample catalog embedded with the local model (what a new user has after
the first command)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from payrail_test_support import REPO
from payrail_test_support.cli import run_cli
from payrail_test_support.docs import DOCS, README, code_blocks, read

# The remote agent's block needs a server with tokens: tests/test_docs_shell.py runs it against one.
PYTHON_BLOCKS = [block for block in code_blocks(read(README), "python") + code_blocks(read(DOCS / "agents.md"), "python") if "PAYRAIL_AGENT_TOKEN" not in block]


@pytest.fixture
def sample_registry(database_url, tmp_path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PAYRAIL_", "OPENAI_"))}
    env.update(PAYRAIL_DATABASE_URL=database_url, PAYRAIL_DATA_DIR=str(tmp_path / "unused"), HF_HUB_OFFLINE="1")
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"  # payrail-embedder, as after activation
    result = run_cli(env, "import", str(REPO / "catalog" / "sample.jsonl"), timeout=600)
    assert result.returncode == 0, result.stderr
    return env


@pytest.mark.local_model
def test_every_python_block_of_the_docs_runs_as_written_offline(sample_registry):
    assert len(PYTHON_BLOCKS) == 4
    outputs = []
    for block in PYTHON_BLOCKS:
        result = subprocess.run([sys.executable, "-c", block], env=sample_registry, capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, f"{block}\n{result.stderr}"
        outputs.append(result.stdout.splitlines())

    # The front page's block prints what search answers for its query, as the psycopg block does.
    sms = json.loads(run_cli(sample_registry, "search", "--json", "send an SMS to a customer").stdout)["matches"]
    assert outputs[0] == outputs[3] == [f"{m['provider']} {m['method']} {m['docsUrl']}" for m in sms]
    # The API block prints three matches, then the answer as JSON: the CLI's --json, byte for byte.
    api = outputs[1]
    cli = run_cli(sample_registry, "search", "--json", "find live hotel availability through a paid API")
    assert api[-1] == cli.stdout.strip()
    assert api[:-1] == [f"{m['provider']} {m['method']} {m['docsUrl']}" for m in json.loads(cli.stdout)["matches"]]
    # The MCP SDK block asks the MCP server the same question, and gets the same answer.
    assert outputs[2] == api[:-1]
