"""What scripts and agents branch on at the command line's edges: --json always prints JSON with the
documented code and exit status, records are named one way everywhere, the query can come from
standard input, and the embedded default keeps standard error quiet. In process with click's
CliRunner, and real subprocesses where the process is the point: bytes on standard input, the
embedded default, the servers' signals, `python -m`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import warnings
from dataclasses import fields

import psycopg
import pytest
from click.testing import CliRunner

from payrail_embedder.base.errors import EXIT_STATUS
from payrail_embedder.cli.common import read_query
from payrail_embedder.settings import SETTINGS, Settings
from payrail_test_support import CLI, REPO
from payrail_test_support.cli import cli_import, run_cli, write_jsonl
from payrail_test_support.logs import embedded_start, events
from payrail_test_support.ports import unused_port

CATALOG = [
    {
        "provider": "Acme Maps",
        "method": "Geocode an address",
        "urls": [],
        "docsUrl": None,
        "guidance": "Purpose: turn an address into coordinates.",
        "enabled": True,
    },
    {
        "provider": "Acme Maps",
        "method": "Reverse geocode",
        "urls": [],
        "docsUrl": None,
        "guidance": "Purpose: turn coordinates into an address.",
        "enabled": False,
    },
]


@pytest.fixture
def registry(cli_env, tmp_path):
    cli_import(cli_env, tmp_path / "catalog.jsonl", CATALOG)
    return cli_env


def failure(result) -> dict:
    """The one JSON line a --json failure prints, checked against the documented exit status."""
    assert result.stdout.count("\n") == 1, (result.stdout, result.stderr)
    answer = json.loads(result.stdout)
    assert set(answer) == {"error", "detail"}, answer
    assert result.returncode == EXIT_STATUS[answer["error"]], (result.returncode, answer)
    return answer


@pytest.mark.parametrize(
    "args, code, detail",
    [
        (("search", "--json"), "invalid_query", "Missing argument 'QUERY'"),
        (("search", "--json", "   "), "invalid_query", "query is empty"),
        (("search", "--json", "x" * 2001), "invalid_query", "2001 characters long"),
        (("search", "--json", "--colour"), "invalid_query", "No such option"),
        (("history", "--json", "Nobody / Nothing"), "unknown_record", 'no provider method is named "Nobody / Nothing"'),
        (("history", "--json", "a", "b", "c"), "unknown_record", "name a record as PROVIDER METHOD"),
        (("preview", "--json", "geocode"), "invalid_input", "Missing option '--draft'"),
        (("preview", "--json", "geocode", "--draft", "Nobody / Nothing"), "unknown_record", "Nobody / Nothing"),
        (("preview", "--json", "", "--draft", "Acme Maps / Reverse geocode"), "invalid_query", "query is empty"),
        (("preview", "--json", "coordinates", "--draft", "Acme Maps / Reverse geocode"), "draft_not_embedded", "sync"),
        (("import", "--json", "/nonexistent/catalog.jsonl"), "invalid_input", "does not exist"),
        (("eval", "--json"), "invalid_input", "the registry has no golden queries to measure"),
        (("golden", "add", "--json", "find a hotel", "--relevant", "Nobody / Nothing"), "unknown_record", "Nobody / Nothing"),
        (("golden", "remove", "--json", "never added"), "invalid_input", 'there is no golden query "never added"'),
        (("golden", "import", "--json", "/nonexistent/golden.jsonl"), "invalid_input", "does not exist"),
        (("sync", "--json", "--batch-size", "0"), "invalid_input", "--batch-size"),
        (("model", "switch", "--json"), "invalid_input", "Missing argument 'NEW_MODEL'"),
    ],
)
def test_json_failures_are_json_with_their_documented_code_and_exit_status(registry, database_url, args, code, detail):
    if args[-1].endswith("Reverse geocode") and code == "draft_not_embedded":
        with psycopg.connect(database_url) as conn:  # a content edit clears the draft's vector
            conn.execute("update payrail.provider_methods set guidance = 'Purpose: edited.' where method = 'Reverse geocode'")
    answer = failure(run_cli(registry, *args))
    assert answer["error"] == code and detail in answer["detail"], answer


def test_without_an_api_key_embedding_commands_say_so_as_json(registry, tmp_path):
    env = {k: v for k, v in registry.items() if k != "OPENAI_API_KEY"}
    for args in (("sync", "--json"), ("model", "switch", "other-model", "--json")):
        answer = failure(run_cli(env, *args))
        assert answer["error"] == "misconfigured" and "OPENAI_API_KEY" in answer["detail"], answer
    # Search has one word for a failing embedder, whatever the cause: try again later.
    answer = failure(run_cli(env, "search", "--json", "something to embed"))
    assert answer["error"] == "search_unavailable", answer


def test_a_failure_without_json_is_one_line_on_standard_error(registry):
    result = run_cli(registry, "history", "Nobody", "Nothing")
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.startswith("Error: unknown_record: no provider method"), result.stderr


@pytest.mark.parametrize(
    "name",
    [("Acme Maps / Reverse geocode",), ("acme maps reverse geocode",), ("Acme Maps", "Reverse geocode"), (" ACME  maps ", "reverse GEOCODE")],
)
def test_a_record_is_named_the_same_way_on_every_command(registry, name):
    code_json = run_cli(registry, "history", "--json", *name)
    assert code_json.returncode == 0, code_json.stdout
    assert json.loads(code_json.stdout)["record"]["method"] == "Reverse geocode"
    if len(name) == 1:
        preview = run_cli(registry, "preview", "--json", "Reverse geocode", "--draft", name[0])
        assert json.loads(preview.stdout)["matches"][0]["method"] == "Reverse geocode", preview.stdout


def test_search_dash_reads_the_query_from_standard_input(registry):
    result = run_cli(registry, "search", "--json", "-", input="Acme Maps / Geocode an address\n")
    assert [m["method"] for m in json.loads(result.stdout)["matches"]] == ["Geocode an address"], result.stdout


def test_standard_input_is_read_with_no_click_function_deprecated_for_removal():
    """click 8.5 deprecated get_binary_stream (gone in click 9), which `search -` read its query with."""
    with CliRunner().isolation(input="café near me\n".encode()), warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        assert read_query("-") == "café near me"


def test_the_python_api_and_the_command_line_default_every_setting_alike():
    """Settings.from_env leaves a setting whose variable is unset (or empty) to the dataclass's
    default, which must then be the option's."""
    assert {setting.field: setting.default for setting in SETTINGS} == {field.name: getattr(Settings(), field.name) for field in fields(Settings)}
    assert Settings.from_env({"PAYRAIL_EMBEDDER": "", "PAYRAIL_EMBEDDING_RETRIES": "5"}) == Settings(embedding_retries=5)


def test_a_query_that_is_not_utf8_is_invalid_query_from_stdin_and_from_argv(registry):
    from_stdin = subprocess.run([str(CLI), "search", "--json", "-"], env=registry, input=b"caf\xe9 near me", capture_output=True)
    answer = json.loads(from_stdin.stdout)
    assert (from_stdin.returncode, answer["error"]) == (2, "invalid_query") and "UTF-8" in answer["detail"], answer
    # Undecodable argv bytes reach Python as lone surrogates.
    from_argv = subprocess.run([os.fsencode(CLI), b"search", b"--json", b"caf\xe9 near me"], env=registry, capture_output=True)
    answer = json.loads(from_argv.stdout)
    assert (from_argv.returncode, answer["error"]) == (2, "invalid_query") and "not valid Unicode" in answer["detail"], answer
    assert b"Traceback" not in from_argv.stderr


def test_json_keys_are_camel_case_on_every_report(registry, database_url):
    with psycopg.connect(database_url) as conn:
        conn.execute("update payrail.provider_methods set guidance = guidance || ' Edited.' where not enabled")
    reports = [
        json.loads(run_cli(registry, *args).stdout)
        for args in (
            ("sync", "--dry-run", "--json"),
            ("sync", "--json"),
            ("model", "show", "--json"),
            ("history", "--json", "Acme Maps / Reverse geocode"),
            ("db", "status", "--json"),
            ("db", "roles", "--json"),
            ("golden", "add", "--json", "turn an address into coordinates", "--relevant", "Acme Maps / Geocode an address"),
            ("golden", "list", "--json"),
            ("golden", "remove", "--json", "turn an address into coordinates"),
        )
    ]

    def keys(value):
        if isinstance(value, dict):
            return set(value) | {k for v in value.values() for k in keys(v)}
        if isinstance(value, list):
            return {k for v in value for k in keys(v)}
        return set()

    snake = {key for report in reports for key in keys(report) if "_" in key}
    assert not snake, snake


def test_a_short_sync_off_a_terminal_prints_no_progress(registry, database_url):
    with psycopg.connect(database_url) as conn:
        conn.execute("update payrail.provider_methods set guidance = guidance || ' Edited.' where not enabled")
    result = run_cli(registry, "sync")
    # Standard error holds the run's one summary line for the operators' logs, no progress bar.
    (summary,) = events(result.stderr)
    assert result.returncode == 0 and (summary["event"], summary["embedded"], summary["pending"]) == ("sync", "1", "0"), result.stderr
    assert result.stdout.startswith("1 embedded, 0 changed meanwhile, 0 pending\n")


def test_long_work_off_a_terminal_logs_progress_events(registry, database_url, tmp_path):
    """One line per interval (PAYRAIL_PROGRESS_INTERVAL, 10 s by default; 0 here: every batch)."""
    with psycopg.connect(database_url) as conn:
        conn.execute("update payrail.provider_methods set guidance = guidance || ' Edited.', enabled = false")
        records = conn.execute("select count(*) from payrail.provider_methods").fetchone()[0]
    env = {**registry, "PAYRAIL_PROGRESS_INTERVAL": "0"}
    result = run_cli(env, "sync", "--batch-size", "1")
    assert result.returncode == 0, result.stderr
    # Progress events, then the run's summary in the operators' log.
    *progress_lines, summary = events(result.stderr)
    assert [line["done"] for line in progress_lines] == [str(n) for n in range(1, records + 1)], result.stderr
    assert all(line["event"] == "progress" and line["task"] == "sync" and line["total"] == str(records) for line in progress_lines)
    assert all(line["elapsed_s"].isdigit() for line in progress_lines) and summary["event"] == "sync"

    lines_file = write_jsonl(tmp_path / "more.jsonl", [{**CATALOG[0], "method": f"Extra {n}"} for n in range(3)])
    imported = run_cli(env, "import", lines_file)
    assert imported.returncode == 0, imported.stderr
    assert {(e["task"], e["done"], e["total"]) for e in events(imported.stderr, "progress")} >= {("import", "3", "3")}, imported.stderr


@pytest.mark.slow
def test_the_embedded_default_keeps_standard_error_quiet_and_db_status_tells_where_it_runs(tmp_path):
    """No PAYRAIL_DATABASE_URL and no XDG_RUNTIME_DIR: what an MCP host starts. Nothing on stderr
    but the one event that says the server is being started (no warnings)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PAYRAIL_", "XDG_RUNTIME_DIR"))}
    env["PAYRAIL_DATA_DIR"] = str(tmp_path / "data")
    before = json.loads(run_cli(env, "db", "status", "--json").stdout)
    assert before["embedded"]["running"] is False and before["registry"] is None, before
    try:
        started = run_cli(env, "db", "url")
        assert started.returncode == 0 and len(started.stderr.splitlines()) == 1, started.stderr
        assert (embedded_start(started.stderr)["data_dir"], embedded_start(started.stderr)["level"]) == (str(tmp_path / "data"), "info")
        for args in (("db", "apply"), ("search", "--json", "Nothing here")):
            result = run_cli(env, *args)
            assert result.returncode == 0 and result.stderr == "", (args, result.stderr)
        status = run_cli(env, "db", "status", "--json")
        report = json.loads(status.stdout)
        assert (status.returncode, report["embedded"]["running"], report["registry"]["records"]) == (0, True, 0), report
        assert report["embedded"]["dataDirectory"].startswith(str(tmp_path)) and report["embedded"]["pid"] > 0
        text = run_cli(env, "db", "status").stdout
        assert "embedded PostgreSQL 18: running" in text and "0 records" in text, text
    finally:
        run_cli(env, "db", "stop")


def test_db_status_of_an_unreachable_database_exits_1_and_says_why(tmp_path):
    env = {**os.environ, "PAYRAIL_DATABASE_URL": f"postgresql://nobody@/registry?host={tmp_path}&port=1"}
    result = run_cli(env, "db", "status", "--json")
    report = json.loads(result.stdout)
    assert (result.returncode, report["database"], report["registry"]) == (1, "configured", None), report
    assert "No such file or directory" in report["error"] or "connection" in report["error"], report


def test_eval_warns_about_labels_the_registry_cannot_return(registry, tmp_path):
    labelled = tmp_path / "labelled.jsonl"
    labelled.write_text(
        json.dumps({"query": "Acme Maps / Geocode an address", "relevant": [["Acme Maps", "Geocode an address"], ["Nobody", "Nothing"]]})
        + "\n"
        + json.dumps({"query": "Geocode an address", "relevant": [["acme  maps", "REVERSE geocode"]]})
        + "\n",
        encoding="utf-8",
    )
    report = json.loads(run_cli(registry, "eval", "--json", str(labelled)).stdout)
    assert report["labelWarnings"] == [
        {"line": 1, "provider": "Nobody", "method": "Nothing", "problem": "not in the registry"},
        {"line": 2, "provider": "acme  maps", "method": "REVERSE geocode", "problem": "a draft: search never returns it"},
    ], report
    text = run_cli(registry, "eval", str(labelled))
    assert "warning: line 1: Nobody / Nothing is not in the registry" in text.stderr, text.stderr


def test_mcp_over_http_prints_its_url_refuses_a_busy_port_and_exits_0_on_sigterm(registry):
    port = unused_port()
    server = subprocess.Popen([str(CLI), "mcp", "--http", str(port)], env=registry, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert (
            server.stdout.readline()
            == f"serving MCP over streamable HTTP at http://127.0.0.1:{port}/mcp and GET /search (OpenAPI: /openapi.json), loopback only\n"
        )
        busy = run_cli(registry, "mcp", "--http", str(port))
        assert busy.returncode == 2 and busy.stderr.count("\n") == 1, busy.stderr
        assert busy.stderr.startswith(f"Error: invalid_input: cannot listen on 127.0.0.1:{port}: Address already in use")
    finally:
        server.send_signal(signal.SIGTERM)
        _, stderr = server.communicate(timeout=60)
    assert server.returncode == 0, stderr
    assert "Traceback" not in stderr


def test_mcp_over_stdio_exits_0_on_sigterm(registry):
    server = subprocess.Popen([str(CLI), "mcp"], env=registry, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    # The server answers an initialize request once it listens; then SIGTERM.
    request = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "0"}},
    }
    server.stdin.write(json.dumps(request).encode() + b"\n")
    server.stdin.flush()
    assert json.loads(server.stdout.readline())["id"] == 1
    server.send_signal(signal.SIGTERM)
    _, stderr = server.communicate(timeout=60)
    assert server.returncode == 0 and b"Traceback" not in stderr, stderr


def test_the_cli_module_runs_as_python_dash_m_too(registry):
    result = subprocess.run([sys.executable, "-m", "payrail_embedder", "search", "--json", "Acme Maps"], env=registry, capture_output=True, text=True)
    assert [m["method"] for m in json.loads(result.stdout)["matches"]] == ["Geocode an address"], result.stderr
