"""Advice on the editorial template from the command line: `advise`, `show` and the summary that
ends an import, against a real registry (in process, click's CliRunner).

Each record below is written to get the advice ADVICE says, by the rules docs/operators.md states
("Advice on the editorial template"); the expected counts are summed from that table, never taken
from a run. Advice never refuses a save and never reaches an agent.
"""

from __future__ import annotations

import json
from urllib.parse import urlsplit

import psycopg
import pytest
from psycopg import sql

from payrail_test_support.cli import cli_json, run_cli, write_jsonl
from payrail_test_support.servers import login_url

FIT = {
    "provider": "Acme Maps",
    "method": "Geocode an address",
    "urls": [],
    "docsUrl": "https://docs.acme.example/geocode",
    "guidance": "Purpose: Turn a street address into map coordinates.\nInstructions: GET /v1/geocode?q=ADDRESS.\nNotes: Paid per call.",
    "enabled": True,
}
BARE = {
    "provider": "Globex",
    "method": "Weather now",
    "urls": [],
    "docsUrl": None,
    "guidance": "Returns the **current** weather for a city.",
    "enabled": True,
}
VAGUE = {
    "provider": "TheClique",
    "method": "Songkick concert",
    "urls": [],
    "docsUrl": "https://docs.theclique.example",
    "guidance": "Purpose: Concert info\nInstructions: GET /concerts/{id}.\nNotes: Free.",
    "enabled": False,
}
NAMES = {
    "provider": "Songkick",
    "method": "Concert details",
    "urls": [],
    "docsUrl": None,
    "guidance": "  purpose: songkick concert details\n  instructions: GET /details.\n  notes: Free.",
    "enabled": False,
}
CATALOG = [FIT, BARE, VAGUE, NAMES]
# What each record gets, in the order every face lists advice.
ADVICE = {
    "Acme Maps / Geocode an address": [],
    "Globex / Weather now": ["no_purpose", "no_instructions", "no_notes", "markup", "no_docs_url"],
    "TheClique / Songkick concert": ["vague_purpose"],
    "Songkick / Concert details": ["vague_purpose", "no_docs_url"],
}
CODES = ["no_purpose", "vague_purpose", "no_instructions", "no_notes", "markup", "no_docs_url"]


def key(record: dict) -> str:
    return f"{record['provider']} / {record['method']}"


def expected_counts(records: list[dict]) -> dict[str, tuple[int, int]]:
    """(enabled, drafts) per code over records, summed from ADVICE."""
    return {
        code: (
            sum(code in ADVICE[key(r)] for r in records if r["enabled"]),
            sum(code in ADVICE[key(r)] for r in records if not r["enabled"]),
        )
        for code in CODES
    }


def counts_of(report: list[dict]) -> dict[str, tuple[int, int]]:
    return {count["code"]: (count["enabled"], count["drafts"]) for count in report}


@pytest.fixture
def registry(cli_env, tmp_path):
    result = run_cli(cli_env, "import", write_jsonl(tmp_path / "catalog.jsonl", CATALOG))
    assert result.returncode == 0, result.stderr
    return cli_env


def test_advise_lists_each_records_advice_and_counts_every_piece(registry):
    code, report, stderr = cli_json(registry, "advise", "--json")

    assert code == 0, (report, stderr)
    assert report["checked"] == len(CATALOG)
    assert {key(r): [a["code"] for a in r["advice"]] for r in report["records"]} == {name: codes for name, codes in ADVICE.items() if codes}
    assert [r["provider"] for r in report["records"]] == ["Globex", "Songkick", "TheClique"], "by provider and method, ignoring case"
    assert all(a["advice"].endswith(".") and a["fix"] for r in report["records"] for a in r["advice"]), report
    assert [count["code"] for count in report["counts"]] == CODES, "every piece, zero included, in the template's order"
    assert counts_of(report["counts"]) == expected_counts(CATALOG)

    text = run_cli(registry, "advise")
    assert text.returncode == 0, text.stderr
    assert "Globex / Weather now (record " in text.stdout and "   markup: The guidance is written in Markdown or HTML: bold (**text**)." in text.stdout
    assert "Acme Maps" not in text.stdout, "a record that fits gets no line"
    assert "4 records checked against the editorial template (advice never blocks a save; agents never see it):\n" in text.stdout
    assert "2 records have a vague Purpose line (vague_purpose): 0 enabled, 2 drafts\n" in text.stdout
    assert "1 record has no Purpose line (no_purpose): 1 enabled, 0 drafts\n" in text.stdout
    assert "no Instructions line" in text.stdout and "(no_notes)" in text.stdout


def test_advise_takes_records_a_code_or_the_counts_alone(registry):
    code, report, _ = cli_json(registry, "advise", "--json", "Songkick", "Globex / Weather now")
    assert code == 0 and report["checked"] == 2, report
    assert [key(r) for r in report["records"]] == ["Globex / Weather now", "Songkick / Concert details"]
    assert counts_of(report["counts"]) == expected_counts([BARE, NAMES])

    code, report, _ = cli_json(registry, "advise", "--json", "--code", "vague_purpose")
    assert code == 0 and [key(r) for r in report["records"]] == ["Songkick / Concert details", "TheClique / Songkick concert"], report
    assert report["records"][0]["advice"] == [
        {
            "code": "vague_purpose",
            "advice": "The Purpose line does not say what the method does in words an agent would ask with: it has 3 words (at least 4); "
            "it only repeats the provider's and method's names.",
            "fix": report["counts"][1]["fix"],
        },
        {"code": "no_docs_url", "advice": report["records"][0]["advice"][1]["advice"], "fix": report["counts"][5]["fix"]},
    ], "a record with the advice asked for, with all its advice"

    code, report, _ = cli_json(registry, "advise", "--json", "--summary")
    assert code == 0 and set(report) == {"checked", "counts"} and counts_of(report["counts"]) == expected_counts(CATALOG), report
    text = run_cli(registry, "advise", "--summary").stdout
    assert "Globex / Weather now" not in text and "1 record has guidance in Markdown or HTML (markup)" in text

    assert run_cli(registry, "advise", "Acme Maps / Geocode an address").stdout == ("1 record checked against the editorial template: every one fits it\n")


@pytest.mark.parametrize("code", ["nope", "NO_PURPOSE", "no_purpose'; drop table payrail.provider_methods; --", ""])
def test_advise_refuses_a_code_it_does_not_give_and_changes_nothing(registry, database_url, code):
    status, failure, _ = cli_json(registry, "advise", "--json", "--code", code)
    assert (status, failure["error"]) == (2, "invalid_input"), failure
    assert "the codes are " + ", ".join(CODES) in failure["detail"], failure
    with psycopg.connect(database_url) as conn:
        assert conn.execute("select count(*) from payrail.provider_methods").fetchone() == (len(CATALOG),)


def test_advise_refuses_a_record_no_record_goes_by(registry):
    status, failure, _ = cli_json(registry, "advise", "--json", "Nobody / x' or '1'='1")
    assert (status, failure["error"]) == (2, "unknown_record"), failure


def test_show_gives_the_advice_on_the_record(registry):
    code, shown, _ = cli_json(registry, "show", "--json", "Globex / Weather now")
    assert code == 0, shown
    assert [a["code"] for a in shown["advice"]] == ADVICE["Globex / Weather now"]
    assert shown["guidance"] == BARE["guidance"], "advice is said beside the record, never written into it"
    text = run_cli(registry, "show", "Globex / Weather now").stdout
    assert text.endswith(
        "advice on the editorial template (it never blocks a save; agents never see it):\n"
        + "".join(f"   {a['code']}: {a['advice']}\n      {a['fix']}\n" for a in shown["advice"])
    ), text

    code, shown, _ = cli_json(registry, "show", "--json", "Acme Maps", "Geocode an address")
    assert code == 0 and shown["advice"] == [], shown
    assert run_cli(registry, "show", "Acme Maps", "Geocode an address").stdout.endswith("\nadvice: none, it fits the editorial template\n")


def test_import_sums_up_the_advice_on_the_records_it_created_or_updated(cli_env, database_url, tmp_path):
    source = write_jsonl(tmp_path / "catalog.jsonl", CATALOG)
    code, report, stderr = cli_json(cli_env, "import", "--json", source)
    assert code == 0 and report["created"] == len(CATALOG), (report, stderr)
    assert [count["code"] for count in report["advice"]] == CODES
    assert counts_of(report["advice"]) == expected_counts(CATALOG)

    # Unchanged: nothing created or updated, nothing to advise on.
    text = run_cli(cli_env, "import", source)
    assert text.returncode == 0 and "advice:" not in text.stdout, text.stdout
    assert counts_of(cli_json(cli_env, "import", "--json", source)[1]["advice"]) == {code: (0, 0) for code in CODES}

    # One record updated, one created: advice on those two alone, whatever the others get.
    changed = [
        dict(FIT, docsUrl=None),
        {**BARE, "method": "Forecast", "guidance": "Purpose: Tomorrow's weather for a city.\nInstructions: GET.\nNotes: Free.", "enabled": False},
        *CATALOG[1:],
    ]
    text = run_cli(cli_env, "import", write_jsonl(tmp_path / "changed.jsonl", changed))
    assert text.returncode == 0, text.stderr
    assert text.stdout.splitlines()[0] == "1 created, 1 updated, 3 unchanged, 0 refused: saved"
    assert [line for line in text.stdout.splitlines() if line.startswith("advice: ")] == [
        "advice: 2 records have no docs URL (no_docs_url)",
    ]


def test_import_advises_and_never_refuses_a_line_for_advice(cli_env, database_url, tmp_path):
    """A catalog whose every line gets advice is saved whole, a refused line aside (--skip-invalid):
    the advice is on the lines saved."""
    lines = [BARE, NAMES, {**VAGUE, "docsUrl": "http://not-https.example"}]
    result = run_cli(cli_env, "import", "--skip-invalid", write_jsonl(tmp_path / "catalog.jsonl", lines))
    assert result.returncode == 2 and result.stdout.startswith("2 created, 0 updated, 0 unchanged, 1 refused: saved\n"), result.stdout
    advice = [line for line in result.stdout.splitlines() if line.startswith("advice: ")]
    assert advice == [
        "advice: 1 record has no Purpose line (no_purpose)",
        "advice: 1 record has a vague Purpose line (vague_purpose)",
        "advice: 1 record has no Instructions line (no_instructions)",
        "advice: 1 record has no Notes line (no_notes)",
        "advice: 1 record has guidance in Markdown or HTML (markup)",
        "advice: 2 records have no docs URL (no_docs_url)",
    ]
    with psycopg.connect(database_url) as conn:
        assert conn.execute("select count(*) from payrail.provider_methods").fetchone() == (2,)


@pytest.fixture
def agent_url(database_url):
    login = f"advice_agent_{urlsplit(database_url).path.lstrip('/')}"
    with psycopg.connect(database_url, autocommit=True) as admin:
        admin.execute(sql.SQL("create role {} login in role payrail_agent").format(sql.Identifier(login)))
    yield login_url(database_url, login)
    with psycopg.connect(database_url, autocommit=True) as admin:
        admin.execute(sql.SQL("drop role {}").format(sql.Identifier(login)))


def test_agents_never_see_advice(registry, agent_url):
    """Search answers with the contract's five fields, advice or not; an agent's login cannot ask for advice."""
    code, answer, _ = cli_json(registry, "search", "--json", "Globex")
    assert code == 0 and [set(match) for match in answer["matches"]] == [{"provider", "method", "urls", "docsUrl", "guidance"}], answer
    agent = {**registry, "PAYRAIL_DATABASE_URL": agent_url}
    for args in (("advise",), ("advise", "--summary"), ("show", "Globex / Weather now")):
        code, failure, _ = cli_json(agent, *args, "--json")
        assert (code, failure["error"]) == (2, "not_permitted"), (args, failure)
    assert json.loads(run_cli(agent, "search", "--json", "Globex").stdout) == answer
