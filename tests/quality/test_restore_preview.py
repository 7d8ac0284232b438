"""`payrail-embedder restore` shows its effect and asks, as `edit` does: in real subprocesses, on a
terminal (a pseudo-terminal the test types into) and off one, on a real PostgreSQL (18 and 16).

The registry: a record whose first version was poor ("current weather" for a reverse geocoder)
and whose second is found by the golden queries that should find it. Restoring the first makes
them miss again: restore says so before it restores anything, and what it says is checked
against eval and the database.
"""

from __future__ import annotations

import json

import psycopg
import pytest

from payrail_test_support.cli import OnATerminal, cli_import, cli_json, run_cli_subprocess, write_jsonl
from payrail_test_support.golden_tops import eval_tops
from test_golden_effect_cli import CATALOG

pytestmark = pytest.mark.slow  # each test a registry edited twice, most on a pseudo-terminal

REVERSE = {**CATALOG[1], "enabled": True}
GOOD = REVERSE["guidance"]
POOR = "Purpose: current weather for a city, hour by hour."
# Golden queries that find the record's second version, and one about another record.
SHOULD_FIND = ["turn latitude and longitude into a postal address", "postal address of a latitude and longitude"]
GOLDEN = [(query, "Acme Maps / Reverse geocode") for query in SHOULD_FIND] + [("send a text message", "Globex / Send an SMS")]


@pytest.fixture
def restorable(cli_env, tmp_path, database_url) -> tuple[dict, int]:
    """The registry, and the history id of the record's poor first version."""
    cli_import(cli_env, tmp_path / "first.jsonl", [c for c in CATALOG if c["method"] != REVERSE["method"]] + [{**REVERSE, "guidance": POOR}])
    code, imported, stderr = cli_json(cli_env, "import", "--json", write_jsonl(tmp_path / "second.jsonl", [REVERSE]))
    assert (code, imported["updated"]) == (0, 1), (imported, stderr)
    for query, relevant in GOLDEN:
        assert run_cli_subprocess(cli_env, "golden", "add", query, "--relevant", relevant).returncode == 0
    code, found, stderr = cli_json(cli_env, "history", "Acme Maps / Reverse geocode", "--json")
    (first,) = found["history"]
    assert (code, first["version"], first["guidance"]) == (0, 1, POOR), stderr
    return cli_env, first["historyId"]


def record(database_url: str) -> tuple[int, int, str, bool, str | None]:
    """The record as stored: id, version, guidance, enabled, docs URL."""
    with psycopg.connect(database_url) as conn:
        return conn.execute("select id, version, guidance, enabled, docs_url from payrail.provider_methods where method = %s", (REVERSE["method"],)).fetchone()


def shown_preview(stdout: str, history_id: int, record_id: int) -> list[str]:
    """The lines restore printed before its question, checked: the field it changes, then each
    golden query it makes worse."""
    lines = stdout.splitlines()
    assert lines[:4] == [
        f'Restoring version 1 (history entry {history_id}) into "Acme Maps / Reverse geocode" (record {record_id}, version 2, enabled) changes:',
        "  Guidance:",
        f"    - {GOOD}",
        f"    + {POOR}",
    ], stdout
    assert " of 3 golden queries' top three would change: " in lines[4], stdout
    for query in SHOULD_FIND:
        assert any(line.startswith(f'worse for what it should find: "{query}"') for line in lines), (query, stdout)
    return lines


def test_without_a_terminal_it_shows_what_restoring_changes_and_restores_nothing(restorable, database_url):
    env, history_id = restorable
    before = record(database_url)
    refused = run_cli_subprocess(env, "restore", str(history_id), input="y\n")  # a pipe answers nothing
    assert refused.returncode == 2, (refused.stdout, refused.stderr)
    shown_preview(refused.stdout, history_id, before[0])
    assert refused.stderr.rstrip().endswith(
        "Error: invalid_input: not restored: restoring version 1 asks first, and standard input is not a terminal; add --yes to restore it without asking"
    ), refused.stderr
    code, failure, _ = cli_json(env, "restore", str(history_id), "--json")
    assert (code, failure["error"]) == (2, "invalid_input") and "add --yes" in failure["detail"], failure
    assert record(database_url) == before


@pytest.mark.parametrize("answer", ["n", "y"])
def test_on_a_terminal_it_asks_and_does_what_it_is_told(restorable, database_url, openai_fake, answer):
    env, history_id = restorable
    before = record(database_url)
    requests = len(openai_fake.requests)
    terminal = OnATerminal(env, "restore", str(history_id), answering=True)
    terminal.wait_for("Restore version 1? [y/N]")
    terminal.type(f"{answer}\n")
    done = terminal.finish()
    assert done.returncode == 0, (done.stdout, done.stderr)
    lines = shown_preview(done.stdout, history_id, before[0])
    if answer == "n":
        assert lines[-1] == "nothing restored" and record(database_url) == before
        return
    assert lines[-1] == f'updated "Acme Maps / Reverse geocode": record {before[0]}, version 3, enabled, embedded now', done.stdout
    assert record(database_url) == (before[0], 3, POOR, True, None)
    assert len(openai_fake.requests) == requests + 1, "the version's text is embedded once, for the preview and the restore"
    worse = eval_tops(database_url, env)
    assert all(worse[query][0] != "Acme Maps / Reverse geocode" for query in SHOULD_FIND), worse


def test_a_save_after_the_question_was_asked_makes_the_answer_a_conflict_and_nothing_is_lost(restorable, database_url):
    env, history_id = restorable
    terminal = OnATerminal(env, "restore", str(history_id), answering=True)
    terminal.wait_for("Restore version 1? [y/N]")
    with psycopg.connect(database_url) as conn:  # another operator's save meanwhile
        conn.execute("update payrail.provider_methods set docs_url = 'https://docs.acme.example/reverse' where method = %s", (REVERSE["method"],))
    terminal.type("y\n")
    done = terminal.finish()
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "Error: unavailable: not restored: " in done.stderr and "nothing was changed, run it again to see what it changes now" in done.stderr, done.stderr
    record_id, version, guidance, enabled, docs_url = record(database_url)
    assert (version, guidance, enabled, docs_url) == (3, GOOD, True, "https://docs.acme.example/reverse")


def test_yes_restores_without_asking_and_json_carries_the_preview_that_eval_then_bears_out(restorable, database_url):
    env, history_id = restorable
    before_tops = eval_tops(database_url, env)
    record_id = record(database_url)[0]
    code, report, stderr = cli_json(env, "restore", str(history_id), "--yes", "--json")
    assert code == 0 and report["restored"] is True, (report, stderr)
    preview = report["preview"]
    assert {key: preview[key] for key in ("historyId", "recordId", "version", "currentVersion", "deletedSince", "fields")} == {
        "historyId": history_id,
        "recordId": record_id,
        "version": 1,
        "currentVersion": 2,
        "deletedSince": False,
        "fields": [{"field": "guidance", "before": GOOD, "after": POOR}],
    }
    changes = preview["effect"]["changes"]
    assert sorted(c["query"] for c in changes if c["verdict"] == "worse") == sorted(SHOULD_FIND), changes
    assert (report["outcome"], report["version"], report["guidance"], report["embeddedNow"]) == ("updated", 3, POOR, True)
    # What the preview said the golden queries get after it is what eval gets: nothing else moved.
    after_tops = eval_tops(database_url, env)
    said = {c["query"]: [f"{r['provider']} / {r['method']}" for r in c["after"]] for c in changes}
    assert {query: top for query, top in after_tops.items() if top != before_tops[query]} == said

    # Restored already: nothing to restore, so nothing to ask, even off a terminal.
    again = run_cli_subprocess(env, "restore", str(history_id), input="")
    assert again.returncode == 0 and again.stdout == f'unchanged "Acme Maps / Reverse geocode": record {record_id}, version 3, enabled, vector kept\n', (
        again.stdout,
        again.stderr,
    )
    # --json on a terminal: the question and what it changes go to the terminal, the JSON to standard output.
    code, found, _ = cli_json(env, "history", "Acme Maps / Reverse geocode", "--json")
    second = next(v["historyId"] for v in found["history"] if v["version"] == 2)
    terminal = OnATerminal(env, "restore", str(second), "--json", answering=True)
    terminal.wait_for("Restore version 2? [y/N]")
    terminal.type("n\n")
    done = terminal.finish()
    assert done.returncode == 0 and "Restoring version 2 (history entry" in done.stderr, (done.stdout, done.stderr)
    declined = json.loads(done.stdout)
    assert declined["restored"] is False and declined["preview"]["fields"] == [{"field": "guidance", "before": POOR, "after": GOOD}], declined
    assert record(database_url)[1:3] == (3, POOR)
