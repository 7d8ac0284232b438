"""Advice on the editorial template in the backoffice: beside the Guidance field on a record's
page, counted on the Quality page with the list of the records that get each piece, and summed up
by an import (chromium, by role and label); plain HTTP requests attack the new page.

The catalog's records get the advice ADVICE says, by the rules docs/operators.md states; what the
pages count is checked against that table and against `payrail-embedder advise --json`.
"""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from payrail_test_support.backoffice import DRAFT, ENABLED, WEATHER, HttpClient, http_sign_in, name, stored, take_screenshot
from payrail_test_support.cli import cli_json, write_jsonl

# The backoffice's catalog (payrail_test_support.backoffice.CATALOG), by the rules: ENABLED fits
# the template; DRAFT has no Instructions line and no docs URL; WEATHER no Instructions line.
ADVICE = {name(ENABLED): [], name(DRAFT): ["no_instructions", "no_docs_url"], name(WEATHER): ["no_instructions"]}


def open_record(page, record: dict) -> None:
    page.goto("/records")
    page.get_by_role("link", name=name(record), exact=True).click()
    expect(page.get_by_role("heading", level=1)).to_have_text(name(record))


def test_the_record_page_says_the_advice_beside_the_guidance_and_saving_never_waits_for_it(page, registry, database_url, tmp_path):
    open_record(page, DRAFT)
    advice = page.get_by_role("region", name="Editorial template: 2 pieces of advice")
    expect(advice).to_contain_text("The guidance has no Instructions line")
    expect(advice).to_contain_text('What to do: Add a line "Instructions: ..."')
    expect(advice).to_contain_text("The record has no docs URL")
    expect(advice.get_by_role("listitem")).to_have_count(2)
    # For the docs: the Guidance field and its advice.
    top, bottom = page.get_by_text("Plain text: Purpose, Instructions, Notes.").bounding_box(), advice.bounding_box()
    clip = {"x": bottom["x"] - 8, "y": top["y"] - 30, "width": bottom["width"] + 16, "height": bottom["y"] + bottom["height"] - top["y"] + 38}
    take_screenshot(page, tmp_path, "backoffice-advice.png", clip=clip, full_page=True)

    # Advice never blocks: markup and no Purpose line are saved as typed, and then advised on.
    page.get_by_label("Guidance").fill("Returns **where** an address is.\nInstructions: GET /v1/reverse.")
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_role("status").filter(has_text="Saved")).to_be_visible()
    assert stored(database_url, DRAFT["provider"], DRAFT["method"])["guidance"] == "Returns **where** an address is.\nInstructions: GET /v1/reverse."
    advice = page.get_by_role("region", name="Editorial template: 4 pieces of advice")
    expect(advice).to_contain_text("The guidance has no Purpose line")
    expect(advice).to_contain_text("The guidance is written in Markdown or HTML: bold (**text**).")

    open_record(page, ENABLED)
    expect(page.get_by_role("region", name="Editorial template: fits it")).to_contain_text("Purpose, Instructions and Notes lines")


def test_the_quality_page_counts_each_piece_of_advice_and_lists_the_records_that_get_it(page, registry):
    page.get_by_role("link", name="Quality").click()
    section = page.get_by_role("region", name="Editorial template")
    expect(section.get_by_role("row")).to_have_count(7)  # loaded: the header and a row for each piece
    rows = {
        row.get_by_role("rowheader").inner_text(): [cell.inner_text() for cell in row.get_by_role("cell").all()[:2]]
        for row in section.get_by_role("row").all()[1:]
    }
    enabled = {name(ENABLED), name(WEATHER)}
    expected = {
        "No Instructions line": [str(sum("no_instructions" in codes for n, codes in ADVICE.items() if n in enabled)), "1"],
        "No docs URL": ["0", "1"],
        "No Purpose line": ["0", "0"],
    }
    assert {heading: rows[heading] for heading in expected} == expected, rows
    assert len(rows) == 6, rows
    # The counts are advise's.
    counts = {c["summary"]: [str(c["enabled"]), str(c["drafts"])] for c in cli_json(registry, "advise", "--json")[1]["counts"]}
    assert {heading[:1].lower() + heading[1:]: cells for heading, cells in rows.items()} == counts
    expect(section.get_by_role("link", name="No Purpose line")).to_have_count(0)  # no record to list

    section.get_by_role("link", name="No Instructions line").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Records with no Instructions line")
    listed = page.get_by_role("list", name="Records with no Instructions line")
    expect(listed.get_by_role("listitem")).to_have_count(2)
    expect(listed.get_by_role("listitem").filter(has=page.get_by_role("link", name=name(DRAFT)))).to_contain_text("draft")
    expect(page.get_by_role("navigation", name="Pages")).to_have_count(0)
    listed.get_by_role("link", name=name(WEATHER)).click()
    expect(page.get_by_role("heading", level=1)).to_have_text(name(WEATHER))


def test_the_advice_list_goes_a_page_at_a_time(page, registry, tmp_path):
    many = [{**WEATHER, "method": f"Station {n:03}", "enabled": False} for n in range(150)]
    assert cli_json(registry, "import", "--json", write_jsonl(tmp_path / "many.jsonl", many))[0] == 0
    page.goto("/advice/no_instructions")
    listed = page.get_by_role("list", name="Records with no Instructions line")
    expect(listed.get_by_role("listitem")).to_have_count(100)
    page.get_by_role("navigation", name="Pages").get_by_role("link", name="Next page").click()
    expect(listed.get_by_role("listitem")).to_have_count(152 - 100)
    expect(listed.get_by_role("listitem").last.get_by_role("link")).to_have_text(f"{WEATHER['provider']} / Station 149")
    expect(page.get_by_role("navigation", name="Pages").get_by_role("link", name="Next page")).to_have_count(0)
    page.get_by_role("link", name="Previous page").click()
    expect(listed.get_by_role("listitem").first.get_by_role("link")).to_have_text(name(DRAFT))


def test_an_import_sums_up_the_advice_on_the_records_it_saved(page, registry, tmp_path):
    new = [
        {**WEATHER, "method": "Forecast", "guidance": "Purpose: A five day forecast for a city.\nInstructions: GET /forecast.\nNotes: Free.", "docsUrl": None},
        {**WEATHER, "method": "Alerts", "guidance": "See [alerts](https://globex.example/alerts)."},
    ]
    page.get_by_role("link", name="Import").click()
    page.get_by_label("Catalog file (JSON Lines)").set_input_files(write_jsonl(tmp_path / "upload.jsonl", new))
    page.get_by_role("button", name="Import").click()
    report = page.get_by_role("region", name="Import report")
    expect(report.get_by_role("status")).to_have_text("2 created, 0 updated, 0 unchanged, 0 refused: saved")
    advice = report.get_by_role("list", name="Advice on the records it created or updated")
    expect(advice.get_by_role("listitem")).to_have_text(
        [
            "1 record has no Purpose line (no_purpose)",
            "1 record has no Instructions line (no_instructions)",
            "1 record has no Notes line (no_notes)",
            "1 record has guidance in Markdown or HTML (markup)",
            "1 record has no docs URL (no_docs_url)",
        ]
    )
    advice.get_by_role("link", name="1 record has guidance in Markdown or HTML (markup)").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Records with guidance in Markdown or HTML")
    expect(page.get_by_role("list", name="Records with guidance in Markdown or HTML").get_by_role("link")).to_have_text([f"{WEATHER['provider']} / Alerts"])


@pytest.mark.parametrize(
    "path, status",
    [
        ("/advice/nope", 404),
        ("/advice/%3Cscript%3Ealert(1)%3C%2Fscript%3E", 404),
        ("/advice/no_purpose'%20or%20'1'='1", 404),
        ("/advice/no_purpose?page=0", 400),
        ("/advice/no_purpose?page=-1", 400),
        ("/advice/no_purpose?page=abc", 400),
        ("/advice/no_purpose?page=99999999999999999999", 400),
        ("/advice/no_purpose?page=%D9%A3", 400),  # an Arabic-Indic three: a digit to Python, not to a URL
    ],
)
def test_the_advice_page_refuses_what_it_never_links_to(shared_backoffice, path, status):
    session = http_sign_in(shared_backoffice.client)
    reply = shared_backoffice.client.get(path, cookies=session.cookies)
    assert reply.status == status, reply.body
    assert "<script>" not in reply.body and "alert(1)" not in reply.body


def test_the_advice_page_is_for_signed_in_operators(shared_backoffice):
    reply = HttpClient(shared_backoffice.running.url).get("/advice/no_instructions")
    assert reply.status == 303 and reply.location.endswith("/sign-in"), (reply.status, reply.location)
    assert name(DRAFT) not in reply.body


def test_a_hostile_name_on_the_advice_pages_is_text(registry, backoffice, database_url, tmp_path):
    """Names an outsider's catalog chose, on the pages that list records by their advice: escaped, never markup."""
    hostile = {**WEATHER, "provider": '<script>alert("x")</script>', "method": "<img src=x onerror=alert(1)>", "guidance": "Returns it."}
    code, report, _ = cli_json(registry, "import", "--json", write_jsonl(tmp_path / "hostile.jsonl", [hostile]))
    assert code == 0, report
    client = HttpClient(backoffice.url)
    session = http_sign_in(client)
    record = stored(database_url, hostile["provider"], hostile["method"])
    for path in ("/advice/no_purpose", f"/records/{record['id']}", "/quality"):
        reply = client.get(path, cookies=session.cookies)
        assert reply.status == 200, (path, reply.body)
        assert "<script>alert" not in reply.body and "<img src=x" not in reply.body, path
    listed = client.get("/advice/no_purpose", cookies=session.cookies).body
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt; / &lt;img src=x onerror=alert(1)&gt;" in listed, listed
