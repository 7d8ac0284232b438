"""Golden queries in the backoffice: the Quality page, a record's golden queries (added, ranked,
removed), what an edit changes before it is saved (Preview changes, and a Save that shows it
first), and the delete page that names the golden queries that go with a record.

Browser tests (chromium, by role and label) show what an operator sees; plain HTTP requests attack
the new forms and pages (no token, another origin, an agent's login, hostile query text). What the
pages claim is checked against eval (`payrail-embedder eval --json`) and the database.
"""

from __future__ import annotations

import re
from html import unescape
from urllib.parse import quote

import psycopg
import pytest
from playwright.sync_api import expect

from payrail_test_support.backoffice import (
    ACME,
    AGENT,
    DRAFT,
    ENABLED,
    WEATHER,
    HttpClient,
    http_sign_in,
    name,
    post_sign_in,
    record_form,
    stored,
    take_screenshot,
)
from payrail_test_support.cli import cli_import, cli_json, run_cli
from payrail_test_support.golden_tops import eval_tops

ADDRESS = "turn a street address into coordinates"
WEATHER_QUERY = "current weather for a city"
REVERSE = "turn latitude and longitude into a postal address"
# More records, so the Quality page has records no golden query finds and records it confuses.
MORE = [
    {
        "provider": "Initech",
        "method": "Forecast",
        "urls": [],
        "docsUrl": None,
        "enabled": True,
        "guidance": "Purpose: weather forecast for a city, by the hour.",
    },
    {
        "provider": "Initech",
        "method": "Street address check",
        "urls": [],
        "docsUrl": None,
        "enabled": True,
        "guidance": "Purpose: check that a street address exists.",
    },
    {"provider": "Umbrella", "method": "Send an SMS", "urls": [], "docsUrl": None, "enabled": True, "guidance": "Purpose: send a text message."},
    {"provider": "Hooli", "method": "Translate", "urls": [], "docsUrl": None, "enabled": True, "guidance": "Purpose: translate between languages."},
    {"provider": "Vandelay", "method": "Import latex", "urls": [], "docsUrl": None, "enabled": True, "guidance": "Purpose: order latex goods."},
]
# Labelled with the forecast, it gets the current conditions above it: a pair the Quality page calls confused.
CONDITIONS = "current conditions in my city"
HOSTILE = '</a><script>alert("golden")</script><img src=x onerror=alert(1)> "quoted" & more'


def golden_count(database_url: str) -> int:
    with psycopg.connect(database_url) as conn:
        return conn.execute("select count(*) from payrail.golden_queries").fetchone()[0]


def record_id(database_url: str, record: dict) -> int:
    return stored(database_url, record["provider"], record["method"])["id"]


@pytest.fixture
def golden_registry(registry, tmp_path):
    """The backoffice's catalog and MORE, with three golden queries: one found, one found second
    to another record, one that names a draft (a miss)."""
    cli_import(registry, tmp_path / "more.jsonl", MORE)
    for query, relevant in ((ADDRESS, ENABLED), (WEATHER_QUERY, WEATHER), (REVERSE, DRAFT), (CONDITIONS, MORE[0])):
        assert run_cli(registry, "golden", "add", query, "--relevant", name(relevant)).returncode == 0
    return registry


def eval_report(env) -> dict:
    code, report, stderr = cli_json(env, "eval", "--json")
    assert code == 0, (report, stderr)
    return report


# --- attacks: plain HTTP ---------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/records/{id}/golden", "/records/{id}/golden/remove", "/records/{id}/preview", "/records/new/preview"])
@pytest.mark.parametrize("attack", ["no token", "another origin"])
def test_the_new_forms_refuse_a_post_without_the_token_or_from_another_origin(shared_backoffice, path, attack):
    client = shared_backoffice.client
    session = http_sign_in(client)
    record = stored(shared_backoffice.database_url, *ACME)
    form = record_form(ENABLED, record["version"], session.token, guidance="Purpose: changed by an attacker.")
    form |= {"query": "forged golden query", "also": ""}
    headers = {"Origin": client.origin}
    if attack == "no token":
        del form["csrf_token"]
    else:
        headers = {"Origin": "https://attacker.example"}
    reply = client.post(path.format(id=record["id"]), form, headers=headers, cookies=session.cookies)
    assert reply.status == 403 and "nothing was changed" in unescape(reply.body), reply.body
    assert golden_count(shared_backoffice.database_url) == 0
    assert stored(shared_backoffice.database_url, *ACME)["version"] == record["version"]


def test_an_agent_login_cannot_sign_in_and_no_page_answers_without_a_session(shared_backoffice):
    client = shared_backoffice.client
    refused = post_sign_in(client, AGENT)
    assert refused.status == 403 and "payrail_operator" in unescape(refused.body), refused.body
    record = stored(shared_backoffice.database_url, *ACME)
    for path in ("/quality", f"/records/{record['id']}"):
        reply = client.get(path)
        assert (reply.status, reply.location) == (303, "/sign-in"), path
    forged = client.get("/quality", cookies={"payrail_session": "forged"})
    assert forged.status == 303 and forged.location.startswith("/sign-in")


@pytest.mark.parametrize(
    ("query", "problem"),
    [
        ("\u200b\u2060 \u3000", "query is empty"),
        ("x" * 2001, "query is 2001 characters long; the limit is 2,000"),
        ("a\x00b", "query contains a NUL character"),
    ],
    ids=["invisible only", "too long", "NUL"],
)
def test_try_a_query_refuses_what_can_never_be_a_query_in_both_answers(shared_backoffice, query, problem):
    """The record page's trial is a face of its own: it checks the query before asking search."""
    client = shared_backoffice.client
    session = http_sign_in(client)
    record = stored(shared_backoffice.database_url, *ACME)
    reply = client.get(f"/records/{record['id']}?query={quote(query)}", cookies=session.cookies)
    assert reply.status == 200, reply.body
    assert unescape(reply.body).count(f"invalid_query: {problem}") == 2, reply.body[reply.body.find("try-title") :]


def test_hostile_query_text_is_shown_as_text_on_every_page_that_shows_golden_queries(registry, backoffice, database_url):
    assert run_cli(registry, "golden", "add", HOSTILE, "--relevant", name(ENABLED)).returncode == 0
    client = HttpClient(backoffice.url)
    session = http_sign_in(client)
    acme = record_id(database_url, ENABLED)
    pages = [client.get(path, cookies=session.cookies) for path in ("/quality", f"/records/{acme}", f"/records/{acme}/delete")]
    for reply in pages:
        assert reply.status == 200, reply.body
        assert "<script>" not in reply.body and "<img" not in reply.body, reply.body
        assert "&lt;script&gt;alert(&#34;golden&#34;)&lt;/script&gt;" in reply.body
    # The link to try it carries it as a URL's query, encoded.
    assert "?query=%3C%2Fa%3E%3Cscript%3E" in pages[0].body


def test_a_refused_golden_query_is_said_in_words_with_the_typed_text_kept(golden_registry, backoffice, database_url):
    client = HttpClient(backoffice.url)
    session = http_sign_in(client)
    acme = record_id(database_url, ENABLED)
    cases = [
        ({"query": ADDRESS.upper(), "also": ""}, f'golden query "{ADDRESS}" exists already'),
        ({"query": "find a geocoder", "also": "Nobody / Nothing\r\n"}, "Nobody / Nothing"),
        ({"query": " \u200b ", "also": ""}, "query is empty"),
        ({"query": "geocode twice", "also": name(ENABLED)}, "twice"),
    ]
    for fields, problem in cases:
        reply = client.post(f"/records/{acme}/golden", {"csrf_token": session.token, **fields}, headers={"Origin": client.origin}, cookies=session.cookies)
        text = unescape(reply.body)
        assert reply.status == 422 and "Not added: " in text and problem in text, (fields, text)
        assert f'value="{fields["query"]}"' in text, "the typed query is kept"
    assert golden_count(database_url) == 4


def test_without_their_vectors_and_the_embedding_service_the_quality_page_says_so_and_a_record_page_still_opens(
    golden_registry, backoffice, database_url, openai_fake
):
    with psycopg.connect(database_url) as conn:
        conn.execute("delete from payrail.golden_query_embeddings")
    openai_fake.behaviour = "500"
    client = HttpClient(backoffice.url)
    session = http_sign_in(client)
    quality = client.get("/quality", cookies=session.cookies)
    assert quality.status == 503 and "The golden queries cannot be ranked now: 4 golden queries have no vector" in unescape(quality.body)
    page = client.get(f"/records/{record_id(database_url, WEATHER)}", cookies=session.cookies)
    assert page.status == 200 and "The golden queries cannot be ranked now" in unescape(page.body)
    openai_fake.behaviour = "ok"
    assert "Misses: 1" in client.get("/quality", cookies=session.cookies).body


def test_a_save_that_changes_golden_queries_shows_them_first_and_saves_on_the_second_save(golden_registry, backoffice, database_url, openai_fake):
    client = HttpClient(backoffice.url)
    session = http_sign_in(client)
    weather = stored(database_url, *(WEATHER["provider"], WEATHER["method"]))
    form = record_form(WEATHER, weather["version"], session.token, guidance="Purpose: turn a street address into coordinates.")
    first = client.post(f"/records/{weather['id']}", form, headers={"Origin": client.origin}, cookies=session.cookies)
    text = unescape(first.body)
    assert first.status == 200 and "Not saved yet: this edit changes the top three of" in text, text
    assert stored(database_url, WEATHER["provider"], WEATHER["method"])["version"] == weather["version"]
    assert "gain this record" in text and ADDRESS in text
    # The form carries what was previewed: saving it now saves, with no second preview nor embedding.
    requests = len(openai_fake.requests)
    second = client.post(
        f"/records/{weather['id']}",
        form | {"previewed": field_value(first.body, "previewed")},
        headers={"Origin": client.origin},
        cookies=session.cookies,
    )
    assert second.status == 303, unescape(second.body)
    assert len(openai_fake.requests) == requests
    assert stored(database_url, WEATHER["provider"], WEATHER["method"])["version"] == weather["version"] + 1


def field_value(html: str, field: str) -> str:
    return re.search(rf'name="{field}" value="([^"]+)"', html).group(1)


# --- what an operator sees: chromium --------------------------------------------------------------


def test_the_quality_page_shows_evals_figures_the_misses_first_the_records_never_found_and_the_confused(page, golden_registry, database_url, tmp_path):
    report = eval_report(golden_registry)
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Quality").click()
    expect(page.get_by_role("heading", name="Quality", exact=True)).to_be_visible()
    figures = page.get_by_role("table")
    for metric, label in (("hit@3", "hit@3"), ("mrr@3", "MRR@3"), ("recall@3", "recall@3")):
        expect(figures.get_by_role("row", name=label, exact=False).first).to_contain_text(f"{report['metrics'][metric]:.3f}")
    expect(page.get_by_text("fake-embedding-1")).to_be_visible()
    # The miss: the query that names a draft, what it should find and what agents get instead, each a link.
    misses = page.get_by_role("region", name=f"Misses: {len(report['misses'])}")
    expect(misses.get_by_role("link", name=REVERSE)).to_be_visible()
    expect(misses.get_by_text("a draft: search never returns it")).to_be_visible()
    for returned in report["misses"][0]["returned"]:
        expect(misses.get_by_role("link", name=" / ".join(returned), exact=True)).to_be_visible()
    # Never found: the enabled records in no golden query's top three, as eval gets them.
    found = {record for top in eval_tops(database_url, golden_registry).values() for record in top}
    enabled = {name(r) for r in [ENABLED, WEATHER, *MORE]}
    never = page.get_by_role("region", name=f"Never found: {len(enabled - found)} enabled records")
    assert enabled - found, "a registry with records no golden query finds"
    for record in enabled - found:
        expect(never.get_by_role("link", name=record, exact=True)).to_be_visible()
    expect(never.get_by_role("link").filter(has_text=" / ")).to_have_count(len(enabled - found))
    # Confused: labelled with the forecast, the current conditions came above it.
    confused = page.get_by_role("region", name="Confused records: 1 pair")
    expect(
        confused.get_by_role("heading", name=f"{name(WEATHER)} and {name(MORE[0])}: 1 golden query").or_(
            confused.get_by_role("heading", name=f"{name(MORE[0])} and {name(WEATHER)}: 1 golden query")
        )
    ).to_be_visible()
    expect(confused.get_by_role("link", name=CONDITIONS)).to_be_visible()
    take_screenshot(page, tmp_path, "backoffice-quality.png", full_page=True)
    # A miss's query opens Try a query on the record it should find, with the query filled in.
    misses.get_by_role("link", name=REVERSE).click()
    expect(page.get_by_role("heading", name=name(DRAFT), exact=True)).to_be_visible()
    expect(page.get_by_role("textbox", name="Query")).to_have_value(REVERSE)


def test_at_thousands_of_records_the_never_found_list_stays_a_page_grouped_and_counted_by_provider(golden_registry, backoffice, database_url, tmp_path):
    # 150 providers of a bulk catalog, provider n with n % 7 + 1 methods: 599 records no golden query names.
    bulk = [
        {"provider": f"Bulk {n:03}", "method": f"Method {m}", "urls": [], "docsUrl": None, "enabled": True, "guidance": f"Purpose: bulk thing {n}.{m}."}
        for n in range(150)
        for m in range(n % 7 + 1)
    ]
    cli_import(golden_registry, tmp_path / "bulk.jsonl", bulk)
    client = HttpClient(backoffice.url)
    session = http_sign_in(client)

    reply = client.get("/quality", cookies=session.cookies)

    assert reply.status == 200, reply.body
    section = reply.body.split('id="never-unnamed-title"', 1)[1].split("</section>", 1)[0]
    groups = re.findall(r"<li><a href=\"/records\?q=([^&\"]+)&amp;state=enabled\">([^<]+)</a>: (\d+) records?", section)
    # Each provider's records that eval's top threes never hold, the providers with most first.
    found = {record for top in eval_tops(database_url, golden_registry).values() for record in top}
    named = {name(record) for record in (ENABLED, WEATHER, DRAFT, MORE[0])}  # golden_registry's golden queries name these
    counts: dict[str, int] = {}
    for record in [ENABLED, WEATHER, *MORE, *bulk]:
        if name(record) not in found | named:
            counts[record["provider"]] = counts.get(record["provider"], 0) + 1
    expected = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    assert [(provider, int(count)) for _, provider, count in groups] == expected[:100]
    assert f"And {len(expected) - 100} more providers." in section
    # Three of a provider's records named, the rest counted.
    top, top_count = expected[0]
    assert f"{top} / Method 2</a>, and {top_count - 3} more)" in section


def test_a_records_golden_queries_are_ranked_added_and_removed_on_its_page(page, golden_registry, database_url):
    page.goto(f"/records/{record_id(database_url, WEATHER)}")
    golden = page.get_by_role("region", name="Golden queries")
    expect(golden.get_by_role("link", name=WEATHER_QUERY)).to_be_visible()
    expect(golden.get_by_text("Found: rank 1.")).to_be_visible()
    # Added here: this record first, another by name.
    golden.get_by_label("Question").fill("forecast for my city")
    golden.get_by_label("Also relevant").fill("Initech / Forecast")
    golden.get_by_role("button", name="Add golden query").click()
    expect(page.get_by_role("status").filter(has_text='Added the golden query "forecast for my city"')).to_be_visible()
    added = page.get_by_role("listitem").filter(has=page.get_by_role("heading", name="forecast for my city"))
    expect(added).to_contain_text(re.compile(r"Found: rank \d|Not in the top three"))
    expect(added.get_by_role("link", name="Initech / Forecast")).to_be_visible()
    golden_list = cli_json(golden_registry, "golden", "list", "--json")[1]["goldenQueries"]
    assert [(r["provider"], r["method"]) for r in golden_list[-1]["relevant"]] == [(WEATHER["provider"], WEATHER["method"]), ("Initech", "Forecast")]
    # A refusal keeps the text typed and says why.
    golden.get_by_label("Question").fill(WEATHER_QUERY.upper())
    golden.get_by_role("button", name="Add golden query").click()
    expect(page.get_by_role("alert")).to_contain_text(f'Not added: golden query "{WEATHER_QUERY}" exists already')
    expect(page.get_by_label("Question")).to_have_value(WEATHER_QUERY.upper())
    # Removed.
    page.get_by_role("button", name="Remove golden query forecast for my city").click()
    expect(page.get_by_role("status").filter(has_text='Removed the golden query "forecast for my city"')).to_be_visible()
    assert golden_count(database_url) == 4


def test_a_golden_query_added_on_a_records_page_keeps_its_language(page, golden_registry, database_url):
    page.goto(f"/records/{record_id(database_url, WEATHER)}")
    golden = page.get_by_role("region", name="Golden queries")
    golden.get_by_label("Question").fill("Wetter in meiner Stadt")
    golden.get_by_label("Language").fill("english-uk")
    golden.get_by_role("button", name="Add golden query").click()
    expect(page.get_by_role("alert")).to_contain_text("Not added: language must be a language tag of 2 to 8 letters, digits and hyphens")
    expect(page.get_by_label("Question")).to_have_value("Wetter in meiner Stadt")
    expect(page.get_by_label("Language")).to_have_value("english-uk")
    assert golden_count(database_url) == 4

    page.get_by_label("Language").fill("DE")
    page.get_by_role("button", name="Add golden query").click()
    expect(page.get_by_role("status").filter(has_text='Added the golden query "Wetter in meiner Stadt"')).to_be_visible()
    added = page.get_by_role("region", name="Golden queries").get_by_role("listitem").filter(has=page.get_by_role("heading", name="Wetter in meiner Stadt"))
    expect(added).to_contain_text("Language: de")
    listed = cli_json(golden_registry, "golden", "list", "--json")[1]["goldenQueries"]
    assert [q["language"] for q in listed] == [None, None, None, None, "de"]


def test_preview_changes_shows_what_an_edit_gains_and_loses_and_saving_it_gives_what_eval_then_finds(page, golden_registry, database_url, tmp_path):
    weather = record_id(database_url, WEATHER)
    page.goto(f"/records/{weather}")
    page.get_by_label("Guidance").fill("Purpose: turn a street address into coordinates, and the weather there.")
    page.get_by_role("button", name="Preview changes").click()
    effect = page.get_by_role("region", name="What saving changes")
    expect(effect.get_by_role("status")).to_contain_text("1 gain this record, 0 lose it, 1 lose another record to it")
    # The address query gains this record and loses a record to it; the weather query finds it lower.
    address = effect.get_by_role("listitem").filter(has=page.get_by_role("heading", name=ADDRESS))
    expect(address.get_by_text("gains this record at rank 3; loses")).to_be_visible()
    expect(address.get_by_role("list").last.get_by_text(f"{name(WEATHER)} (this record)")).to_be_visible()
    weather_query = effect.get_by_role("listitem").filter(has=page.get_by_role("heading", name=WEATHER_QUERY))
    expect(weather_query.get_by_text("Worse for what it should find")).to_be_visible()
    assert stored(database_url, WEATHER["provider"], WEATHER["method"])["version"] == 1, "a preview saves nothing"
    take_screenshot(page, tmp_path, "backoffice-preview.png", full_page=True)
    # Saved as previewed: what eval finds now is what the preview said.
    said = {
        query: [
            text.replace(" (this record)", "").replace(" should find", "") for text in item.get_by_role("list").last.get_by_role("listitem").all_inner_texts()
        ]
        for query, item in ((ADDRESS, address), (WEATHER_QUERY, weather_query))
    }
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_role("status").filter(has_text="Saved")).to_be_visible()
    tops = eval_tops(database_url, golden_registry)
    assert {query: tops[query] for query in said} == said


def test_not_saved_yet_and_a_worse_verdict_look_like_warnings_and_the_verdict_describes_the_save_button(page, golden_registry, database_url):
    weather = record_id(database_url, WEATHER)
    page.goto(f"/records/{weather}")
    page.get_by_label("Guidance").fill("Purpose: turn a street address into coordinates, and the weather there.")
    page.get_by_role("button", name="Save").click()
    warning = page.get_by_role("status").filter(has_text="Not saved yet")
    expect(warning).to_be_visible()
    # Beside the Save button, and read out with it: the verdict of saving.
    save = page.get_by_role("button", name="Save", exact=True)
    expect(save).to_have_accessible_description(re.compile(r"^Saving changes the top three of \d+ golden queries: 1 worse, "))
    verdict = page.locator("form.record").get_by_text("Saving changes the top three of")
    expect(verdict).to_be_visible()
    # Worse is said in the colour the effect's own "Worse" verdicts have.
    assert colour_of(verdict) == colour_of(page.get_by_text("Worse for what it should find").first)
    warning_background = background_of(warning)

    save.click()
    saved = page.get_by_role("status").filter(has_text="Saved")
    expect(saved).to_be_visible()
    # The success banner's colour is a success's alone.
    assert background_of(saved) != warning_background


def background_of(locator) -> str:
    return locator.evaluate("element => getComputedStyle(element).backgroundColor")


def colour_of(locator) -> str:
    return locator.evaluate("element => getComputedStyle(element).color")


def test_a_save_that_changes_nothing_for_the_golden_queries_saves_at_once(page, golden_registry, database_url):
    page.goto(f"/records/{record_id(database_url, WEATHER)}")
    page.get_by_label("URLs").fill("https://api.globex.example/weather")
    page.get_by_role("button", name="Preview changes").click()
    expect(page.get_by_role("region", name="What saving changes").get_by_role("status")).to_contain_text(
        "No golden query's top three changes: the 4 golden queries answer as before."
    )
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_role("status").filter(has_text="Saved")).to_be_visible()


def test_the_delete_page_names_the_golden_queries_that_go_with_the_record(page, golden_registry, database_url):
    acme = record_id(database_url, ENABLED)
    assert run_cli(golden_registry, "golden", "add", "geocode or weather", "--relevant", name(ENABLED), "--relevant", name(WEATHER)).returncode == 0
    page.goto(f"/records/{acme}/delete")
    golden = page.get_by_role("group", name="2 golden queries name this record")
    expect(golden.get_by_role("listitem").filter(has_text=ADDRESS)).to_contain_text("deleted with it")
    expect(golden.get_by_role("listitem").filter(has_text="geocode or weather")).to_contain_text(f"keeps {name(WEATHER)}")
    page.get_by_role("button", name="Delete").click()
    expect(page.get_by_role("alert")).to_contain_text("is not deleted: 2 golden queries name it")
    page.get_by_label("Delete it from its golden queries too").check()
    page.get_by_role("button", name="Delete").click()
    expect(page.get_by_role("status").filter(has_text=f'Deleted "{name(ENABLED)}" and its golden queries')).to_be_visible()
    listed = cli_json(golden_registry, "golden", "list", "--json")[1]["goldenQueries"]
    assert {q["query"]: [r["method"] for r in q["relevant"]] for q in listed} == {
        WEATHER_QUERY: [WEATHER["method"]],
        REVERSE: [DRAFT["method"]],
        CONDITIONS: [MORE[0]["method"]],
        "geocode or weather": [WEATHER["method"]],
    }
