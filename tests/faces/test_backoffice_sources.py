"""Sources in the backoffice: in chromium, an upload's Source names its records, the records list
filters by source and disables a whole catalog after asking, the record page and the Quality page
show where records came from, and a source of markup is shown as text everywhere; over plain
HTTP, what an outsider may put in the source filter (NUL, a pattern, SQL, ten thousand characters)
changes nothing and breaks nothing. Checked in the database."""

from __future__ import annotations

from html import unescape
from urllib.parse import urlencode

import psycopg
from playwright.sync_api import expect

from payrail_test_support.backoffice import ACME, ENABLED, WEATHER, HttpClient, http_sign_in, name, record_form
from payrail_test_support.cli import run_cli, write_jsonl

PARTNER = [
    {**WEATHER, "method": "Forecast", "guidance": "Purpose: a five day forecast for a city.", "enabled": True},
    {**WEATHER, "method": "Alerts", "guidance": "Purpose: storm alerts for a city.", "enabled": True},
]


def source_and_version(database_url: str) -> tuple[str, int]:
    with psycopg.connect(database_url) as conn:
        return conn.execute("select source, version from payrail.provider_methods where provider = %s and method = %s", ACME).fetchone()


def enabled_by_source(database_url: str) -> dict[str, set[str]]:
    """The enabled records' names, by source."""
    found: dict[str, set[str]] = {}
    with psycopg.connect(database_url) as conn:
        for source, provider, method in conn.execute("select source, provider, method from payrail.provider_methods where enabled"):
            found.setdefault(source, set()).add(f"{provider} / {method}")
    return found


def test_an_uploads_source_names_its_records_and_the_list_disables_that_catalog_after_asking(page, database_url, tmp_path):
    page.get_by_role("link", name="Import").click()
    page.get_by_label("Catalog file (JSON Lines)").set_input_files(write_jsonl(tmp_path / "upload.jsonl", PARTNER))
    page.get_by_label("Source").fill("partner feed")
    page.get_by_role("button", name="Import").click()
    expect(page.get_by_role("region", name="Import report").get_by_role("status")).to_have_text("2 created, 0 updated, 0 unchanged, 0 refused: saved")
    curated = {name(ENABLED), name(WEATHER)}
    assert enabled_by_source(database_url) == {"catalog.jsonl": curated, "partner feed": {f"{WEATHER['provider']} / {r['method']}" for r in PARTNER}}

    page.goto("/records")
    expect(page.get_by_label("Source").locator("option")).to_have_text(["Any source", "catalog.jsonl (3)", "partner feed (2)"])
    page.get_by_label("Source").select_option("partner feed")
    page.get_by_role("button", name="Filter").click()
    rows = page.get_by_role("table").get_by_role("row")
    expect(rows).to_have_count(3)  # the header and the two records, each with its source
    expect(rows.nth(1).get_by_role("cell").nth(3)).to_have_text("partner feed")
    page.get_by_role("button", name="Disable all 2 matching").click()
    expect(page.get_by_role("heading", name="Disable 2 records?")).to_be_visible()
    expect(page.get_by_text("Every record matching the source “partner feed”, on every page.")).to_be_visible()
    page.get_by_role("button", name="Disable 2 records").click()
    expect(page.get_by_role("status").first).to_have_text("Disabled 2 records.")
    expect(page.get_by_label("Source")).to_have_value("partner feed")
    assert enabled_by_source(database_url) == {"catalog.jsonl": curated}, "exactly that catalog, nothing else"

    # A record's page says where it came from, and its form keeps it.
    page.goto("/records")
    page.get_by_role("link", name=name(ENABLED), exact=True).click()
    expect(page.locator(".summary")).to_contain_text("from catalog.jsonl")
    expect(page.get_by_label("Source", exact=True)).to_have_value("catalog.jsonl")


MARKUP = '<img src=x onerror="window.pwned=1"><b>bold</b> & co'


def test_a_source_of_markup_is_text_on_the_list_the_record_and_the_quality_page(page, registry, database_url):
    with psycopg.connect(database_url) as conn:
        conn.execute("update payrail.provider_methods set source = %s where provider = %s and method = %s", (MARKUP, ENABLED["provider"], ENABLED["method"]))
    assert run_cli(registry, "golden", "add", "turn a street address into coordinates", "--relevant", name(ENABLED)).returncode == 0

    page.goto("/quality")
    by_source = page.get_by_role("region", name="By source")
    expect(by_source.get_by_role("row").nth(0).get_by_role("columnheader")).to_have_text(
        ["Source", "Enabled records", "Places", "Wanted", "Unwanted", "Missed"]
    )
    link = by_source.get_by_role("link", name=MARKUP, exact=True)
    expect(link).to_be_visible()
    link.click()
    expect(page.get_by_label("Source")).to_have_value(MARKUP)
    expect(page.get_by_role("link", name=name(ENABLED), exact=True)).to_be_visible()
    expect(page.get_by_role("table").get_by_role("row")).to_have_count(2)
    page.get_by_role("link", name=name(ENABLED), exact=True).click()
    expect(page.locator(".summary")).to_contain_text(f"from {MARKUP}")
    for path in ("/quality", "/records"):
        page.goto(path)
        assert page.locator("img[src=x]").count() == 0 and page.locator("b", has_text="bold").count() == 0, path
    assert page.evaluate("window.pwned") is None


def test_what_an_outsider_puts_in_the_source_filter_matches_only_itself_and_changes_nothing(shared_backoffice):
    client = shared_backoffice.client
    session = http_sign_in(client)
    before = enabled_by_source(shared_backoffice.database_url)
    for hostile in ("\x00", "%", "catalog.jsonl' or '1'='1", "CATALOG.JSONL", "x" * 10_000, "catalog.jsonl\x00"):
        listed = client.get("/records?" + urlencode({"source": hostile}), cookies=session.cookies)
        assert listed.status == 200 and "0 of 3 records match." in listed.body, (hostile[:20], listed.body[:300])
        asked = client.get("/records/bulk?" + urlencode({"action": "disable", "source": hostile}), cookies=session.cookies)
        assert asked.status == 200 and "No record matched: nothing would be disabled." in asked.body, hostile[:20]
    matching = client.get("/records?" + urlencode({"source": "catalog.jsonl"}), cookies=session.cookies)
    assert matching.status == 200 and "3 of 3 records match." in matching.body
    assert enabled_by_source(shared_backoffice.database_url) == before


def test_a_save_keeps_the_source_unless_one_is_typed_and_a_source_the_rule_refuses_saves_nothing(backoffice, database_url):
    client = HttpClient(backoffice.url)
    session = http_sign_in(client)
    record_id = record_id_of(database_url)

    def save(version: int, **fields):
        form = record_form(ENABLED, version, session.token, urls=[f"https://api.acme.example/v{version + 1}/geocode"]) | fields
        return client.post(f"/records/{record_id}", form, headers={"Origin": client.origin}, cookies=session.cookies)

    # A form without the field (a page from before it) keeps the record's source.
    assert save(1).status == 303
    assert source_and_version(database_url) == ("catalog.jsonl", 2)
    refused = save(2, source="curated\u202e")
    text = unescape(refused.body)
    assert refused.status == 422 and "Not saved. Fix the field marked below: Source." in text, refused.status
    assert '<p class="field-error" id="source-error">Must be 1 to 255 characters, without control characters, invisible ones' in text
    assert source_and_version(database_url) == ("catalog.jsonl", 2)
    assert save(2, source="  curated ").status == 303
    assert source_and_version(database_url) == ("curated", 3), "typed spaces at either end are trimmed, as a name's are"


def record_id_of(database_url: str) -> int:
    with psycopg.connect(database_url) as conn:
        return conn.execute("select id from payrail.provider_methods where provider = %s and method = %s", ACME).fetchone()[0]
