"""Every character some reader takes for a line break (str.splitlines' list: LF, CR, VT, FF,
U+001C..U+001E, U+0085, U+2028, U+2029) through every line-based way in and out of the registry:
import, export, `edit`, `history`, `search --json` and the backoffice.

Guidance may hold LF, U+2028 and U+2029, which come back exactly as written, everywhere; the others
are control characters the database refuses, by its named rule, and nothing changes. No reader
ever splits a record, and no break turns into another.
"""

from __future__ import annotations

import json

import pytest
from playwright.sync_api import expect

from payrail_embedder.postgres.connection import connect
from payrail_test_support.cli import cli_json, run_cli, write_jsonl
from payrail_test_support.cli import run_edit as edit

STORABLE = {"U+2028": "\u2028", "U+2029": "\u2029"}
REFUSED = {
    "CR": "\r",
    "VT": "\x0b",
    "FF": "\x0c",
    "U+001C": "\x1c",
    "U+001D": "\x1d",
    "U+001E": "\x1e",
    "U+0085": "\x85",
}
# Each break between two lines; the second begins with "#" and "{", as editor comments and JSON do.
GUIDANCE = "Purpose: split by {break} here.{break}# Not a comment.{break}{{not JSON}}\nNotes: the last line."


def record(label: str, guidance: str) -> dict:
    return {
        "provider": "Breaks",
        "method": f"Guidance with {label}",
        "urls": ["https://breaks.example/api"],
        "docsUrl": None,
        "guidance": guidance,
        "enabled": False,
    }


def guidance_with(character: str) -> str:
    return GUIDANCE.format(**{"break": character})


def stored_guidance(database_url: str, method: str) -> str | None:
    with connect(database_url) as conn:
        row = conn.execute("select guidance from payrail.provider_methods where method = %s", (method,)).fetchone()
    return row[0] if row else None


def test_import_export_and_import_again_keep_every_storable_break_and_every_reader_sees_one_line_per_record(cli_env, database_url, tmp_path):
    records = [record(label, guidance_with(character)) for label, character in STORABLE.items()]
    records.append(record("every one", "Purpose: all of them:" + "".join(STORABLE.values()) + "\nend."))
    code, report, _ = cli_json(cli_env, "import", "--json", write_jsonl(tmp_path / "in.jsonl", records))
    assert (code, report["created"], report["refused"]) == (0, len(records), []), report
    for item in records:
        assert stored_guidance(database_url, item["method"]) == item["guidance"]

    exported = tmp_path / "out.jsonl"
    assert run_cli(cli_env, "export", "-o", exported).returncode == 0
    text = exported.read_text(encoding="utf-8")
    # One record a line for every reader: "\n" alone, str.splitlines, and a text file's lines.
    assert len(text.split("\n")) - 1 == len(text.splitlines()) == len(exported.open(encoding="utf-8").readlines()) == len(records)
    by_method = sorted(({**item, "source": "in.jsonl"} for item in records), key=lambda item: item["method"])
    assert sorted((json.loads(line) for line in text.splitlines()), key=lambda item: item["method"]) == by_method
    code, again, _ = cli_json(cli_env, "import", "--json", exported)
    assert (code, again["unchanged"], again["created"], again["updated"]) == (0, len(records), 0, 0), again


@pytest.mark.parametrize("label", REFUSED)
def test_a_break_the_database_refuses_is_refused_by_its_rule_on_import_and_nothing_changes(cli_env, database_url, tmp_path, label):
    item = record(label, guidance_with(REFUSED[label]))
    code, report, _ = cli_json(cli_env, "import", "--json", write_jsonl(tmp_path / "in.jsonl", [item]))
    assert code == 2 and report["saved"] is False
    [refusal] = report["refused"]
    assert refusal["line"] == 1 and "provider_methods_guidance_characters_check" in refusal["reason"], refusal
    assert stored_guidance(database_url, item["method"]) is None


def test_edit_takes_its_own_file_back_and_keeps_the_breaks_then_history_shows_them_unchanged(cli_env, database_url, tmp_path):
    guidance = guidance_with("\u2028") + "\u2029Last paragraph."
    item = record("an edit", guidance)
    cli_json(cli_env, "import", "--json", write_jsonl(tmp_path / "in.jsonl", [item]))
    name = f"{item['provider']} / {item['method']}"

    # Saved as shown but for its URL: once, no refusal, the guidance exactly as it was.
    result, shown = edit(cli_env, tmp_path, [{"replace": ["breaks.example/api", "breaks.example/v2"]}], name)
    assert result.returncode == 0 and len(shown) == 1, (result.stderr, shown)
    assert "updated" in result.stdout, result.stdout
    assert stored_guidance(database_url, item["method"]) == guidance
    # Typed into the editor as they are: U+2028 is kept; VT, a control character, is refused by the
    # guidance rule, in words, and the editor opens again with the operator's text; closing it changes nothing.
    typed = guidance + "\u2028Typed in the editor."
    steps = [{"replace": ["Last paragraph.", "Last paragraph.\u2028Typed in the editor."]}]
    result, shown = edit(cli_env, tmp_path, steps, name)
    assert result.returncode == 0 and len(shown) == 1, (result.stderr, shown)
    assert stored_guidance(database_url, item["method"]) == typed
    result, shown = edit(cli_env, tmp_path, [{"replace": ["Typed in the editor.", "Typed\x0bin the editor."]}], name)
    assert len(shown) == 2 and shown[1].startswith("# NOT SAVED: a rule refused it:\n#   Guidance: must be plain text"), shown
    assert "Typed\x0bin the editor." in shown[1]  # the operator's text, kept
    assert stored_guidance(database_url, item["method"]) == typed

    code, found, _ = cli_json(cli_env, "history", "--json", name)
    assert code == 0
    assert [version["guidance"] for version in found["history"]] == [guidance, guidance]
    assert found["record"] is not None
    # For people, each guidance line on its own, broken at newlines only.
    printed = run_cli(cli_env, "history", name).stdout
    assert f"  {guidance.split(chr(10))[0]}\n" in printed
    code, answer, _ = cli_json(cli_env, "search", "--json", item["provider"])
    assert code == 0 and answer["matches"] == []  # a draft; enabled, search --json is one line too


def test_search_json_is_one_line_and_keeps_the_breaks(cli_env, database_url, tmp_path):
    item = record("search", guidance_with("\u2028")) | {"enabled": True}
    cli_json(cli_env, "import", "--json", write_jsonl(tmp_path / "in.jsonl", [item]))
    result = run_cli(cli_env, "search", "--json", item["method"])
    assert len(result.stdout.splitlines()) == 1, result.stdout
    assert json.loads(result.stdout)["matches"][0]["guidance"] == item["guidance"]


def test_the_backoffice_shows_and_saves_the_breaks_unchanged_and_refuses_a_control_break(page, registry, database_url, tmp_path):
    guidance = guidance_with("\u2028") + "\u2029Last paragraph."
    item = record("the backoffice", guidance)
    cli_json(registry, "import", "--json", write_jsonl(tmp_path / "in.jsonl", [item]))
    page.goto("/records")
    page.get_by_role("link", name=f"{item['provider']} / {item['method']}").click()
    expect(page.get_by_label("Guidance")).to_have_value(guidance)
    page.get_by_label("URLs").fill("https://breaks.example/v2")
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_role("status")).to_contain_text("as version 2")
    assert stored_guidance(database_url, item["method"]) == guidance
    expect(page.get_by_label("Guidance")).to_have_value(guidance)

    typed = guidance + "\x0cA form feed."
    page.get_by_label("Guidance").fill(typed)
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_role("alert")).to_contain_text("Not saved")
    expect(page.get_by_label("Guidance")).to_have_value(typed)
    assert stored_guidance(database_url, item["method"]) == guidance
    # A URL with a line separator is refused, never cut at it.
    page.get_by_label("Guidance").fill(guidance)
    page.get_by_label("URLs").fill("https://breaks.example/v3\u2028")
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_role("alert")).to_contain_text("Not saved")
    with connect(database_url) as conn:
        urls = conn.execute("select urls from payrail.provider_methods where method = %s", (item["method"],)).fetchone()[0]
    assert urls == ["https://breaks.example/v2"]
