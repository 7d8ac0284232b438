"""The embedded default behaves the same from every entry point (README, "The embedded default"):
each CLI command, the MCP server and the backoffice start it when they start, and say so on
standard error; a server stopped with `db stop` under a running MCP server stays stopped, and the
answer names the fix, `payrail-embedder db start`. Real subprocesses on a real embedded
PostgreSQL 18 in a data directory of the test's own.
"""

from __future__ import annotations

import json

import anyio
import pytest

from payrail_test_support.agent_helpers import CATALOG, as_match, mcp_client
from payrail_test_support.backoffice import start_backoffice
from payrail_test_support.cli import run_cli, run_cli_on_a_terminal, write_jsonl
from payrail_test_support.environments import cli_environment
from payrail_test_support.logs import embedded_start

pytestmark = pytest.mark.slow  # each test stops and starts the embedded server


@pytest.fixture(scope="module")
def embedded(tmp_path_factory):
    """The environment of the embedded default in a fresh data directory (no PAYRAIL_DATABASE_URL),
    with the schema applied and CATALOG imported through the fake OpenAI server; stopped at the end."""
    from payrail_test_support.openai_fake import FakeOpenAI

    root = tmp_path_factory.mktemp("embedded")
    fake = FakeOpenAI().start()
    env = cli_environment("unused", fake, root)
    del env["PAYRAIL_DATABASE_URL"]
    env["PAYRAIL_DATA_DIR"] = data_dir = str(root / "data")

    started = run_cli(env, "db", "start")
    assert started.returncode == 0, started.stderr
    # Off a terminal, saying that it starts the server is an event of the log (on a terminal, words).
    event = embedded_start(started.stderr)
    assert (event["data_dir"], event["created"], len(started.stderr.splitlines())) == (data_dir, "true", 1), started.stderr
    assert started.stdout.startswith(f"the embedded PostgreSQL 18 runs under {data_dir}: postgresql://"), started.stdout
    assert run_cli(env, "db", "apply").returncode == 0
    imported = run_cli(env, "import", write_jsonl(root / "catalog.jsonl", CATALOG))
    assert imported.returncode == 0, imported.stderr
    yield env
    run_cli(env, "db", "stop")
    fake.stop()


def stop(env: dict) -> None:
    result = run_cli(env, "db", "stop")
    assert result.returncode == 0 and result.stdout.startswith("stopped"), result.stdout + result.stderr


def test_a_command_starts_a_stopped_server_and_says_so(embedded):
    data_dir = embedded["PAYRAIL_DATA_DIR"]
    stop(embedded)
    status = run_cli(embedded, "db", "status")
    assert "not running" in status.stdout and "`payrail-embedder db start` starts it" in status.stdout, status.stdout

    result = run_cli(embedded, "search", "--json", "Stripe")
    assert result.returncode == 0, result.stderr
    event = embedded_start(result.stderr)
    assert (event["data_dir"], event["created"], len(result.stderr.splitlines())) == (data_dir, "false", 1), result.stderr
    assert json.loads(result.stdout) == {"matches": [as_match(r) for r in CATALOG[:2]]}
    # Running, a command says nothing about it.
    again = run_cli(embedded, "search", "--json", "Stripe")
    assert (again.returncode, again.stderr) == (0, "")

    # db start on a running server only says where it runs.
    start = run_cli(embedded, "db", "start")
    assert (start.returncode, start.stderr) == (0, ""), start.stderr

    # On a terminal, a person reads it in words (and no log line).
    stop(embedded)
    on_a_terminal = run_cli_on_a_terminal(embedded, "search", "--json", "Stripe")
    assert on_a_terminal.returncode == 0 and json.loads(on_a_terminal.stdout)["matches"], on_a_terminal
    assert on_a_terminal.stderr == f"starting the embedded PostgreSQL 18 under {data_dir} ...\n", on_a_terminal.stderr


def test_the_mcp_server_starts_it_and_once_it_is_stopped_names_db_start_until_it_runs_again(embedded, tmp_path):
    stop(embedded)
    with open(tmp_path / "mcp-stderr.log", "w+") as errlog:

        async def main():
            async with mcp_client(embedded, errlog) as client:
                first = await client.call_tool("search_provider_methods", {"query": "Stripe"})
                stop(embedded)
                stopped = await client.call_tool("search_provider_methods", {"query": "Stripe"})
                started = run_cli(embedded, "db", "start")
                assert started.returncode == 0, started.stderr
                again = await client.call_tool("search_provider_methods", {"query": "Stripe"})
                return first, stopped, again

        first, stopped, again = anyio.run(main)
        errlog.seek(0)
        assert embedded_start(errlog.read())["data_dir"] == embedded["PAYRAIL_DATA_DIR"]

    expected = {"matches": [as_match(r) for r in CATALOG[:2]]}
    assert first.structured_content == expected
    error = json.loads(stopped.content[0].text)
    assert stopped.is_error and error["error"] == "search_unavailable", error
    assert error["detail"] == (
        f"cannot reach the database: the embedded PostgreSQL 18 under {embedded['PAYRAIL_DATA_DIR']} is not running "
        "(stopped with `payrail-embedder db stop`?): start it with `payrail-embedder db start`"
    )
    assert again.structured_content == expected


def test_the_backoffice_starts_it_and_says_so(embedded, tmp_path):
    stop(embedded)
    backoffice = start_backoffice(embedded, tmp_path)
    try:
        assert embedded_start(backoffice.output)["data_dir"] == embedded["PAYRAIL_DATA_DIR"]
    finally:
        backoffice.stop()
    assert "\nembedded PostgreSQL 18: running" in run_cli(embedded, "db", "status").stdout


def test_db_start_refuses_a_configured_database_url(embedded):
    result = run_cli({**embedded, "PAYRAIL_DATABASE_URL": "postgresql://db.invalid/registry"}, "db", "start")
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.startswith("Error: invalid_input: PAYRAIL_DATABASE_URL (--database-url) is set"), result.stderr
