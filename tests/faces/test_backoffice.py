"""The operators' loop in a real browser: Debian's chromium, driven by Playwright, against a real
`payrail-embedder backoffice` subprocess on the test database, signed in as a PostgreSQL role.

Elements are found by role and label, as a person finds them. What the page claims is checked
against the database: versions, vectors (the fake OpenAI server's embedding of the stored text),
history.
"""

from __future__ import annotations

import base64
import json
import re
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlencode

import pytest
from playwright.sync_api import expect

from payrail_embedder.embedders import record_text
from payrail_embedder.postgres.connection import connect
from payrail_embedder.registry.stored import counts
from payrail_test_support import REPO
from payrail_test_support.backoffice import (
    ACME,
    CATALOG,
    DRAFT,
    ENABLED,
    OPERATOR,
    WEATHER,
    HttpClient,
    csrf_token,
    history,
    http_sign_in,
    name,
    new_page,
    sign_in,
    start_backoffice,
    stored,
    take_screenshot,
)
from payrail_test_support.cli import run_cli, write_jsonl
from payrail_test_support.openai_fake import fake_embedding
from payrail_test_support.ports import serve_in_thread


def vector_of(row: dict) -> list[float]:
    return row["embedding"].to_numpy().tolist()


def embedding_of(provider: str, method: str, guidance: str) -> list[float]:
    return pytest.approx(fake_embedding(record_text(provider, method, guidance)).tolist(), abs=1e-6)


def open_record(page, record: dict) -> None:
    page.goto("/records")
    page.get_by_role("link", name=name(record), exact=True).click()
    expect(page.get_by_role("heading", level=1)).to_have_text(name(record))


def version_item(page, heading: str):
    """The history entry whose heading is heading (e.g. "Version 1")."""
    return page.get_by_role("listitem").filter(has=page.get_by_role("heading", name=heading, exact=True))


def test_a_word_fixed_in_an_enabled_record_is_embedded_first_and_the_record_stays_enabled(page, database_url, registry):
    before = stored(database_url, *ACME)
    open_record(page, ENABLED)
    guidance = page.get_by_label("Guidance")
    expect(guidance).to_have_value(ENABLED["guidance"])
    fixed = ENABLED["guidance"].replace("paid per call", "paid per request")
    guidance.fill(fixed)
    page.get_by_role("button", name="Save").click()

    expect(page.get_by_role("status")).to_have_text(f'Saved "{name(ENABLED)}" as version 2: enabled, its content was embedded before it was saved.')
    after = stored(database_url, *ACME)
    assert (after["guidance"], after["enabled"], after["current_vector"], after["version"]) == (fixed, True, True, before["version"] + 1)
    assert vector_of(after) == embedding_of(*ACME, fixed)

    # The history names the operator's role, on the page and in the database.
    [kept] = history(database_url, after["id"])
    assert (kept["guidance"], kept["changed_by"], kept["changed_by_session_user"], kept["version"]) == (ENABLED["guidance"], OPERATOR, OPERATOR, 1)
    current = version_item(page, "Version 2 (current)")
    expect(current).to_contain_text(f"by {OPERATOR}")
    expect(current.locator("del")).to_have_text("Notes: paid per call.")
    expect(current.locator("ins")).to_have_text("Notes: paid per request.")

    # Agents get the new text at once.
    result = run_cli(registry, "search", "--json", name(ENABLED))
    assert json.loads(result.stdout)["matches"][0]["guidance"] == fixed, result.stdout


def test_a_url_only_edit_keeps_the_vector_byte_for_byte_and_asks_for_no_embedding(page, database_url, openai_fake):
    before = stored(database_url, *ACME)
    requests = len(openai_fake.requests)
    open_record(page, ENABLED)
    page.get_by_label("URLs").fill("https://api.acme.example/v2/geocode\nhttps://eu.api.acme.example/v2/geocode")
    page.get_by_label("Docs URL").fill("https://docs.acme.example/v2/geocode")
    page.get_by_role("button", name="Save").click()

    expect(page.get_by_role("status")).to_contain_text("version 2: enabled, its vector was kept")
    after = stored(database_url, *ACME)
    assert after["urls"] == ["https://api.acme.example/v2/geocode", "https://eu.api.acme.example/v2/geocode"]
    assert after["docs_url"] == "https://docs.acme.example/v2/geocode"
    assert after["embedding"].to_numpy().tobytes() == before["embedding"].to_numpy().tobytes()
    assert len(openai_fake.requests) == requests


def test_a_new_draft_is_saved_then_enabled(page, database_url):
    page.get_by_role("link", name="New record").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("New record")
    page.get_by_label("Provider").fill("Initech")
    page.get_by_label("Method").fill("Translate a document")
    page.get_by_label("URLs").fill("https://api.initech.example/v1/translate")
    page.get_by_label("Guidance").fill("Purpose: translate a document into another language.\nNotes: paid per page.")
    expect(page.get_by_label("Enabled")).not_to_be_checked()
    page.get_by_role("button", name="Save").click()

    expect(page.get_by_role("status")).to_have_text(
        'Saved "Initech / Translate a document" as version 1: a draft, its content was embedded before it was saved.'
    )
    draft = stored(database_url, "Initech", "Translate a document")
    assert (draft["enabled"], draft["current_vector"], draft["docs_url"]) == (False, True, None)

    page.get_by_label("Enabled").check()
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_role("status")).to_contain_text("as version 2: enabled, its vector was kept")
    enabled = stored(database_url, "Initech", "Translate a document")
    assert enabled["enabled"] and enabled["embedding"].to_numpy().tobytes() == draft["embedding"].to_numpy().tobytes()

    page.get_by_role("link", name="Records", exact=True).click()
    row = page.get_by_role("row").filter(has=page.get_by_role("link", name="Initech / Translate a document"))
    expect(row).to_contain_text("Enabled")


def test_enabling_a_draft_without_a_vector_embeds_it_first(page, database_url):
    with connect(database_url, autocommit=True) as conn:
        conn.execute("insert into payrail.provider_methods (provider, method, guidance) values ('Hooli', 'Compress a file', 'Purpose: shrink a file.')")
    page.goto("/records")
    expect(page.get_by_text("Drafts: 2, needing an embedding: 1.")).to_be_visible()
    page.get_by_label("State").select_option("draft needing an embedding")
    page.get_by_role("button", name="Filter").click()
    expect(page.get_by_role("row")).to_have_count(2)  # the header and the one draft
    page.get_by_role("link", name="Hooli / Compress a file").click()
    expect(page.get_by_text("Draft needing an embedding · version 1")).to_be_visible()

    page.get_by_label("Enabled").check()
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_role("status")).to_contain_text("as version 2: enabled, its content was embedded before it was saved")
    after = stored(database_url, "Hooli", "Compress a file")
    assert after["enabled"] and after["current_vector"]
    assert vector_of(after) == embedding_of("Hooli", "Compress a file", "Purpose: shrink a file.")


def test_the_list_counts_every_state_and_filters_by_text_and_state(page):
    expect(page.get_by_text("Records: 3. Enabled: 2. Drafts: 1, needing an embedding: 0.")).to_be_visible()
    for record in CATALOG:
        expect(page.get_by_role("link", name=name(record), exact=True)).to_be_visible()

    page.get_by_label("Text").fill("LATITUDE")  # in DRAFT's guidance only, matched ignoring case
    page.get_by_role("button", name="Filter").click()
    expect(page.get_by_text("1 of 3 records match.")).to_be_visible()
    expect(page.get_by_role("link", name=name(DRAFT))).to_be_visible()
    expect(page.get_by_role("link", name=name(ENABLED))).to_have_count(0)

    page.get_by_label("Text").fill("")
    page.get_by_label("State").select_option("enabled")
    page.get_by_role("button", name="Filter").click()
    expect(page.get_by_text("2 of 3 records match.")).to_be_visible()
    expect(page.get_by_role("link", name=name(WEATHER))).to_be_visible()
    expect(page.get_by_role("link", name=name(DRAFT))).to_have_count(0)


def test_the_list_pages_through_many_records_keeping_the_filter_in_the_url(page, database_url):
    with connect(database_url) as conn:
        conn.cursor().executemany(
            "insert into payrail.provider_methods (provider, method, guidance) values (%s, %s, %s)",
            [(f"Mass {n:03d}", "Lookup", f"Purpose: {'bulk' if n % 2 else 'other'} record {n}.") for n in range(250)],
        )
    page.goto("/records")
    expect(page.get_by_text("Records: 253. Enabled: 2. Drafts: 251, needing an embedding: 250.")).to_be_visible()
    links = page.get_by_role("table").get_by_role("link")
    expect(links).to_have_count(100)
    expect(links.first).to_have_text(name(ENABLED))  # by provider and method, ignoring case
    expect(page.get_by_role("link", name="Previous page")).to_have_count(0)

    # Filtered: 125 of them, in two pages, the filter kept in every link.
    page.get_by_label("Text").fill("BULK")
    page.get_by_label("State").select_option("draft needing an embedding")
    page.get_by_role("button", name="Filter").click()
    expect(page.get_by_text("125 of 253 records match.")).to_be_visible()
    expect(links).to_have_count(100)
    expect(links.first).to_have_text("Mass 001 / Lookup")
    page.get_by_role("link", name="Next page").click()
    expect(page.get_by_text("125 of 253 records match.")).to_be_visible()
    expect(page.get_by_label("Text")).to_have_value("BULK")
    expect(page.get_by_label("State")).to_have_value("draft needing an embedding")
    expect(links).to_have_count(25)
    expect(links.first).to_have_text("Mass 201 / Lookup")
    expect(links.last).to_have_text("Mass 249 / Lookup")
    expect(page.get_by_role("link", name="Next page")).to_have_count(0)
    assert "q=BULK" in page.url and "state=draft+needing+an+embedding" in page.url and "after=" in page.url

    # A record saved meanwhile shifts nothing: a page starts before (or after) the row it was
    # linked from, so the 100 before Mass 201 are the same, and the new one is a page further.
    with connect(database_url) as conn:
        conn.execute("insert into payrail.provider_methods (provider, method, guidance) values ('Mass 000a', 'Lookup', 'Purpose: bulk.')")
    page.get_by_role("link", name="Previous page").click()
    expect(links).to_have_count(100)
    expect(links.first).to_have_text("Mass 001 / Lookup")
    expect(links.last).to_have_text("Mass 199 / Lookup")
    expect(page.get_by_text("126 of 254 records match.")).to_be_visible()
    page.get_by_role("link", name="Previous page").click()
    expect(links).to_have_text(["Mass 000a / Lookup"])
    expect(page.get_by_role("link", name="Previous page")).to_have_count(0)
    expect(page.get_by_role("link", name="Next page")).to_be_visible()


def cursor_of(value: str) -> str:
    return base64.urlsafe_b64encode(value.encode()).decode()


FORGED_CURSORS = [
    "",
    "!!!not base64",
    cursor_of("not json"),
    cursor_of('{"provider": "a"}'),
    cursor_of('["a", "b"]'),
    cursor_of('["a", "b", "1"]'),
    cursor_of('["a", "b", 1.5]'),
    cursor_of('["a", "b", true]'),
    cursor_of('["a\\u0000", "b", 1]'),
    cursor_of('["a\\ud800", "b", 1]'),
    cursor_of("[" * 5_000),  # nested past the JSON parser's depth, in a URL uvicorn accepts
    cursor_of("""["') or true; drop table payrail.provider_methods; --", "b", 1]"""),
    cursor_of('["z", "z", 99999999999999999999999]'),
]


def test_a_page_link_that_the_backoffice_did_not_make_is_refused_and_changes_nothing(backoffice, database_url):
    session = http_sign_in(HttpClient(backoffice.url))
    for cursor in FORGED_CURSORS:
        for direction in ("after", "before"):
            reply = session.client.get(f"/records?{urlencode({direction: cursor})}", cookies=session.cookies)
            # Refused, or (a well-formed key) the records that sort after or before it: never a failure.
            assert reply.status in (200, 400), (cursor, reply.status)
            if reply.status == 400:
                assert "That page link is not one the backoffice made" in reply.body
    # The injection was data, and the table is whole.
    with connect(database_url) as conn:
        assert conn.execute("select count(*) from payrail.provider_methods").fetchone()[0] == len(CATALOG)


def test_pages_are_compressed_when_the_browser_asks(backoffice):
    session = http_sign_in(HttpClient(backoffice.url))
    compressed = session.client.get("/records", cookies=session.cookies, headers={"Accept-Encoding": "gzip"})
    plain = session.client.get("/records", cookies=session.cookies)
    assert compressed.header("content-encoding") == "gzip" and plain.header("content-encoding") is None
    assert int(compressed.header("content-length")) < len(plain.body.encode()) / 2


def test_bad_values_save_nothing_and_every_wrong_field_is_marked_at_once_in_words_with_the_text_kept(page, database_url, openai_fake, tmp_path):
    before = stored(database_url, *ACME)
    requests = len(openai_fake.requests)
    open_record(page, ENABLED)
    page.get_by_label("Provider").fill("")
    page.get_by_label("URLs").fill("http://api.acme.example/v1/geocode")
    page.get_by_label("Docs URL").fill("https://docs.acme.example@evil.example/geocode")
    edited_guidance = ENABLED["guidance"] + "\nA line the operator added."
    page.get_by_label("Guidance").fill(edited_guidance)
    page.get_by_role("button", name="Save").click()

    expect(page.get_by_role("alert")).to_have_text("Not saved. Fix the fields marked below: Provider, URLs, Docs URL.")
    take_screenshot(page, tmp_path, "backoffice-refused.png", full_page=True)
    # Each field's rules in words, from payrail.rules, as the field's own description, so a
    # screen reader reads them with the field; never PostgreSQL's constraint text.
    with connect(database_url) as conn:
        words = dict(conn.execute("select constraint_name, rule || '. ' || remedy from payrail.rules").fetchall())
        url_rule, url_remedy = conn.execute("select rule, remedy from payrail.rules where constraint_name = 'provider_methods_urls_https_check'").fetchone()
    marked = {
        "Provider": words["provider_methods_provider_check"],
        # The list's rule names the URL that breaks it.
        "URLs": f'{url_rule}; not so: "http://api.acme.example/v1/geocode". {url_remedy}',
        "Docs URL": words["provider_methods_docs_url_check"],
    }
    for label, text in marked.items():
        field = page.get_by_label(label, exact=True)
        expect(field).to_have_accessible_description(re.compile(re.escape(text[0].upper() + text[1:])))
        expect(field).to_have_attribute("aria-invalid", "true")
    expect(page.get_by_text("violates")).to_have_count(0)
    expect(page.get_by_label("URLs")).to_have_value("http://api.acme.example/v1/geocode")
    expect(page.get_by_label("Guidance")).to_have_value(edited_guidance)
    expect(page.get_by_label("Guidance")).not_to_have_attribute("aria-invalid", "true")
    expect(page.get_by_label("Method")).not_to_have_attribute("aria-invalid", "true")

    after = stored(database_url, *ACME)
    assert (after["version"], after["urls"], after["guidance"]) == (before["version"], before["urls"], before["guidance"])
    assert len(openai_fake.requests) == requests  # refused before anything was embedded

    # Fixed, the same form saves.
    page.get_by_label("Provider").fill(ENABLED["provider"])
    page.get_by_label("Docs URL").fill(ENABLED["docsUrl"])
    urls = page.get_by_label("URLs")
    urls.fill("https://api.acme.example/v1/geocode")
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_role("status")).to_contain_text("as version 2")
    assert stored(database_url, *ACME)["guidance"] == edited_guidance


def test_a_name_taken_by_another_record_names_it_with_a_link_to_it(page, database_url):
    taken = stored(database_url, *ACME)
    page.get_by_role("link", name="New record").click()
    page.get_by_label("Provider").fill("  acme MAPS")
    page.get_by_label("Method").fill(ENABLED["method"])
    page.get_by_label("Guidance").fill("Purpose: a second geocoder under the same name.")
    page.get_by_role("button", name="Save").click()

    expect(page.get_by_role("alert")).to_contain_text("Not saved.")
    described = re.compile(re.escape("record already has this provider and method") + ".*" + re.escape(f': record {taken["id"]}, "{name(ENABLED)}"'))
    expect(page.get_by_label("Provider", exact=True)).to_have_accessible_description(described)
    link = page.locator("#provider-error").get_by_role("link", name=f"record {taken['id']}")
    link.click()
    expect(page.get_by_role("heading", level=1)).to_have_text(name(ENABLED))
    assert page.url.endswith(f"/records/{taken['id']}")


def test_two_browsers_editing_one_record_the_second_saves_nothing_and_sees_both_versions(browser, backoffice, page, database_url, tmp_path):
    other = new_page(browser, backoffice)
    sign_in(other)
    open_record(page, ENABLED)
    open_record(other, ENABLED)

    first = ENABLED["guidance"].replace("street address", "postal address")
    page.get_by_label("Guidance").fill(first)
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_role("status")).to_contain_text("as version 2")

    other.get_by_label("Docs URL").fill("https://docs.acme.example/geocode/v2")
    other.get_by_role("button", name="Save").click()
    expect(other.get_by_role("alert")).to_contain_text("changed since it was read: version 1 was read, version 2 is saved now")
    saved_now = other.get_by_role("region", name="Saved meanwhile: version 2")
    expect(saved_now).to_contain_text(first)
    expect(saved_now).to_contain_text(f"by {OPERATOR}")
    # Nothing the second operator typed is lost, and nothing of theirs was saved.
    expect(other.get_by_role("region", name="Your version (not saved)")).to_be_visible()
    expect(other.get_by_label("Docs URL")).to_have_value("https://docs.acme.example/geocode/v2")
    expect(other.get_by_label("Guidance")).to_have_value(ENABLED["guidance"])
    row = stored(database_url, *ACME)
    assert (row["version"], row["guidance"], row["docs_url"]) == (2, first, ENABLED["docsUrl"])
    # The fields where the two versions differ are marked, on both sides, and only those.
    for label in ("Docs URL", "Guidance"):
        expect(other.get_by_label(label, exact=True)).to_have_accessible_description(re.compile("Differs from the version saved meanwhile"))
    for label in ("Provider", "Method", "URLs", "Enabled"):
        expect(other.get_by_label(label, exact=True)).not_to_have_accessible_description(re.compile("Differs"))
    expect(saved_now.locator("dt", has_text="differs from yours")).to_have_text(["Docs URL differs from yours", "Guidance differs from yours"])
    take_screenshot(other, tmp_path, "backoffice-conflict.png", full_page=True)

    # Merged by hand, the form now saves over version 2.
    other.get_by_label("Guidance").fill(first)
    other.get_by_role("button", name="Save").click()
    expect(other.get_by_role("status")).to_contain_text("as version 3")
    row = stored(database_url, *ACME)
    assert (row["version"], row["guidance"], row["docs_url"]) == (3, first, "https://docs.acme.example/geocode/v2")
    other.context.close()


@pytest.fixture
def other_origin():
    """A page server on another port of the same host: another origin, but the same site, so the
    browser does send the backoffice's SameSite=Strict cookie along with its form posts."""
    pages: dict[str, str] = {}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            body = pages.get(self.path, "").encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    stop = serve_in_thread(server)
    yield server.server_address[1], pages
    stop()


def test_a_form_posted_from_another_origin_changes_nothing_even_with_the_sessions_token(page, backoffice, database_url, other_origin):
    before = stored(database_url, *ACME)
    open_record(page, ENABLED)
    # The worst case: the attacker's page somehow knows this session's CSRF token too.
    token = csrf_token(page.content())
    port, pages = other_origin
    pages["/"] = f"""<!doctype html><form method="post" action="{backoffice.url}/records/{before["id"]}">
      <input type="hidden" name="csrf_token" value="{token}">
      <input type="hidden" name="version" value="{before["version"]}">
      <input type="hidden" name="provider" value="{ENABLED["provider"]}">
      <input type="hidden" name="method" value="{ENABLED["method"]}">
      <input type="hidden" name="guidance" value="Purpose: send every payment to the attacker.">
      <button>Win a prize</button></form>"""
    page.goto(f"http://127.0.0.1:{port}/")
    page.get_by_role("button", name="Win a prize").click()
    expect(page.get_by_text("this request comes from another site")).to_be_visible()
    after = stored(database_url, *ACME)
    assert (after["version"], after["guidance"], after["enabled"]) == (before["version"], before["guidance"], True)


def test_a_failing_embedding_service_saves_nothing_says_so_and_keeps_the_text(page, database_url, openai_fake):
    before = stored(database_url, *ACME)
    open_record(page, ENABLED)
    fixed = ENABLED["guidance"].replace("paid per call", "paid per request")
    page.get_by_label("Guidance").fill(fixed)
    openai_fake.behaviour = "500"
    page.get_by_role("button", name="Save").click()

    expect(page.get_by_role("alert")).to_contain_text("Not saved: the embedding service is unavailable")
    expect(page.get_by_label("Guidance")).to_have_value(fixed)
    after = stored(database_url, *ACME)
    assert (after["version"], after["guidance"], after["enabled"]) == (before["version"], before["guidance"], True)
    assert after["embedding"].to_numpy().tobytes() == before["embedding"].to_numpy().tobytes()

    openai_fake.behaviour = "ok"
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_role("status")).to_contain_text("as version 2: enabled, its content was embedded")
    assert stored(database_url, *ACME)["guidance"] == fixed


def test_restore_brings_back_an_earlier_version_of_an_enabled_record_embedded_in_the_same_step(page, database_url):
    open_record(page, ENABLED)
    page.get_by_label("Guidance").fill("Purpose: an edit that turned out wrong.")
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_role("status")).to_contain_text("as version 2")

    first = version_item(page, "Version 1")
    expect(first).to_contain_text("when it was created")
    # Each version's button has a name of its own: a screen reader (or a script) can tell them apart.
    expect(page.get_by_role("button", name="Restore version 1", exact=True)).to_have_count(1)
    expect(page.get_by_role("button", name="Restore", exact=True)).to_have_count(0)
    page.get_by_role("button", name="Restore version 1", exact=True).click()
    # Asked first (tests/faces/test_backoffice_restore.py shows what the page says): nothing restored yet.
    expect(page.get_by_role("heading", name=f"Restore version 1 of {name(ENABLED)}?")).to_be_visible()
    assert stored(database_url, *ACME)["version"] == 2
    page.get_by_role("button", name="Restore version 1", exact=True).click()
    expect(page.get_by_role("status")).to_have_text(
        f'Restored version 1 into "{name(ENABLED)}" as version 3: enabled, its content was embedded before it was saved.'
    )
    expect(page.get_by_label("Guidance")).to_have_value(ENABLED["guidance"])
    row = stored(database_url, *ACME)
    assert (row["version"], row["guidance"], row["enabled"], row["current_vector"]) == (3, ENABLED["guidance"], True, True)
    assert vector_of(row) == embedding_of(*ACME, ENABLED["guidance"])
    assert [h["version"] for h in history(database_url, row["id"])] == [1, 2]
    expect(version_item(page, "Version 3 (current)")).to_contain_text(f"by {OPERATOR}")


def test_try_a_query_shows_what_agents_get_beside_the_answer_with_the_draft_counted(page):
    open_record(page, DRAFT)
    page.get_by_role("textbox", name="Query").fill("turn latitude and longitude into a postal address")
    page.get_by_role("button", name="Try").click()

    agents = page.get_by_role("region", name="What agents get now")
    counted = page.get_by_role("region", name="With this draft counted")
    expect(agents.get_by_role("listitem")).to_have_count(2)  # the two enabled records
    expect(agents).not_to_contain_text(name(DRAFT))
    expect(counted.get_by_role("listitem").first).to_contain_text(f"{name(DRAFT)} (this record)")
    expect(counted.get_by_role("listitem")).to_have_count(3)
    expect(page.get_by_role("textbox", name="Query")).to_have_value("turn latitude and longitude into a postal address")


def test_import_reports_every_refused_line_and_export_downloads_what_the_cli_exports(page, registry, database_url, tmp_path):
    new = {**WEATHER, "method": "Forecast", "guidance": "Purpose: a five day forecast."}
    bad = {**WEATHER, "method": "Alerts", "urls": ["http://alerts.globex.example"]}
    upload = write_jsonl(tmp_path / "upload.jsonl", [new, bad])
    with (tmp_path / "upload.jsonl").open("a") as file:
        file.write("{not json\n")

    page.get_by_role("link", name="Import").click()
    page.get_by_label("Catalog file (JSON Lines)").set_input_files(upload)
    page.get_by_role("button", name="Import").click()
    report = page.get_by_role("region", name="Import report")
    expect(report.get_by_role("status")).to_have_text("0 created, 0 updated, 0 unchanged, 2 refused: nothing saved: 1 valid line was not imported either")
    expect(report).to_contain_text("Fix the refused lines and import again, or tick")
    expect(report.get_by_role("listitem").nth(0)).to_contain_text("refused upload.jsonl:2: ")
    expect(report.get_by_role("listitem").nth(0)).to_contain_text("provider_methods_urls_https_check")
    expect(report.get_by_role("listitem").nth(1)).to_contain_text("refused upload.jsonl:3: malformed JSON")
    assert stored(database_url, WEATHER["provider"], "Forecast") is None

    page.get_by_label("Catalog file (JSON Lines)").set_input_files(upload)
    page.get_by_label("Save the valid lines even when some are refused").check()
    page.get_by_role("button", name="Import").click()
    expect(report.get_by_role("status")).to_have_text("1 created, 0 updated, 0 unchanged, 2 refused: saved")
    assert stored(database_url, WEATHER["provider"], "Forecast")["current_vector"]
    # As the command line does, it says what agents can find and why the drafts are drafts, with a link to them.
    with connect(database_url) as conn:
        held = counts(conn)
    assert held["drafts"] and not held["draftsNeedingEmbedding"], held
    expect(report).to_contain_text(f"Agents can find {held['enabled']} of {held['records']} records; {held['drafts']} ")
    report.get_by_role("link", name=f"{held['drafts']} not enabled").click()
    expect(page.get_by_role("status")).to_contain_text(f"{held['drafts']} of {held['records']} records match")
    expect(page.get_by_role("link", name=name(DRAFT))).to_be_visible()

    with page.expect_download() as download:
        page.get_by_role("link", name="Export").click()
    assert download.value.suggested_filename == "payrail-catalog.jsonl"
    exported = run_cli(registry, "export")
    assert open(download.value.path(), encoding="utf-8").read() == exported.stdout
    assert len(exported.stdout.splitlines()) == len(CATALOG) + 1


def test_deleting_asks_for_confirmation_and_the_history_keeps_the_record(page, database_url):
    row = stored(database_url, DRAFT["provider"], DRAFT["method"])
    open_record(page, DRAFT)
    page.get_by_role("link", name="Delete this record").click()
    expect(page.get_by_role("heading", level=1)).to_have_text(f"Delete {name(DRAFT)}?")
    assert stored(database_url, DRAFT["provider"], DRAFT["method"]) is not None  # asking deletes nothing

    page.get_by_role("button", name="Delete").click()
    expect(page.get_by_role("status")).to_have_text(f'Deleted "{name(DRAFT)}". The history keeps its last version.')
    expect(page.get_by_role("link", name=name(DRAFT))).to_have_count(0)
    assert stored(database_url, DRAFT["provider"], DRAFT["method"]) is None
    [kept] = history(database_url, row["id"])
    assert (kept["operation"], kept["guidance"], kept["changed_by"]) == ("delete", DRAFT["guidance"], OPERATOR)


def test_a_stale_delete_deletes_nothing(browser, backoffice, page, database_url):
    open_record(page, DRAFT)
    page.get_by_role("link", name="Delete this record").click()
    other = new_page(browser, backoffice)
    sign_in(other)
    open_record(other, DRAFT)
    other.get_by_label("Guidance").fill("Purpose: still needed, says a colleague.")
    other.get_by_role("button", name="Save").click()
    expect(other.get_by_role("status")).to_contain_text("as version 2")

    page.get_by_role("button", name="Delete").click()
    expect(page.get_by_role("alert")).to_contain_text("Not deleted: provider method")
    expect(page.get_by_role("alert")).to_contain_text("version 1 was read, version 2 is saved now")
    assert stored(database_url, DRAFT["provider"], DRAFT["method"])["guidance"] == "Purpose: still needed, says a colleague."
    other.context.close()


def test_deleting_a_record_golden_queries_name_is_refused_naming_them(page, registry, database_url):
    added = run_cli(registry, "golden", "add", "turn coordinates into an address", "--relevant", name(DRAFT))
    assert added.returncode == 0, added.stderr
    open_record(page, DRAFT)
    page.get_by_role("link", name="Delete this record").click()
    page.get_by_role("button", name="Delete").click()

    expect(page.get_by_role("alert")).to_contain_text(
        f'Not deleted: provider method "{name(DRAFT)}" is not deleted: 1 golden query names it: "turn coordinates into an address"'
    )
    assert stored(database_url, DRAFT["provider"], DRAFT["method"]) is not None
    assert run_cli(registry, "golden", "list").stdout.endswith("1 golden query\n")


def test_a_new_operator_fixes_a_word_and_agents_answers_change(browser, cli_env, operator_logins, tmp_path):
    """The issue's proof, on the sample catalog; also takes the screenshots of docs/operators.md and the README."""
    result = run_cli(cli_env, "import", str(REPO / "catalog" / "sample.jsonl"))
    assert result.returncode == 0, result.stderr
    query = "find live hotel availability through a paid API"
    before = json.loads(run_cli(cli_env, "search", "--json", query).stdout)["matches"]
    running = start_backoffice(cli_env, tmp_path)
    try:
        page = new_page(browser, running)
        sign_in(page)
        take_screenshot(page, tmp_path, "backoffice-records.png")

        page.get_by_role("link", name=name(before[0]), exact=True).click()
        guidance = page.get_by_label("Guidance")
        fixed = guidance.input_value().replace("Purpose: Live hotel availability", "Purpose: Live hotel room availability", 1)
        assert fixed != guidance.input_value()
        guidance.fill(fixed)
        page.get_by_role("button", name="Save").click()
        expect(page.get_by_role("status")).to_contain_text("enabled, its content was embedded before it was saved")
        page.get_by_role("textbox", name="Query").fill(query)
        page.get_by_role("button", name="Try").click()
        expect(page.get_by_role("region", name="What agents get now")).to_contain_text("Purpose: Live hotel room availability")
        take_screenshot(page, tmp_path, "backoffice-record.png", full_page=True)
        page.context.close()
    finally:
        running.stop()
    after = json.loads(run_cli(cli_env, "search", "--json", query).stdout)["matches"]
    assert "Purpose: Live hotel room availability" in " ".join(m["guidance"] for m in after)
    assert "Purpose: Live hotel room availability" not in " ".join(m["guidance"] for m in before)
