"""The records list's bulk Enable / Disable: in chromium for what an operator does (tick rows, or
every match of a filter, asked first on a page of its own that does what it showed or nothing
while another writer changes the registry), over plain HTTP for what an outsider may send (no
token, another origin, ids that are no ids, ten thousand of them, SQL in the filter, a plan the
page never showed). Checked in the database."""

from __future__ import annotations

import re
from urllib.parse import urlencode

import psycopg
import pytest
from playwright.sync_api import expect

from payrail_embedder.registry import bulk
from payrail_test_support.backoffice import ACME, DRAFT, ENABLED, OTHER_OPERATOR, PASSWORD, WEATHER, HttpClient, http_sign_in, name, stored
from payrail_test_support.stored import insert_drafts

# Bulk actions doing what was confirmed is an attacked boundary (docs/security.md): on every server.
pytestmark = pytest.mark.every_server

WEATHER_KEY = (WEATHER["provider"], WEATHER["method"])
DRAFT_KEY = (DRAFT["provider"], DRAFT["method"])


def states(database_url: str) -> dict[str, tuple[bool, int]]:
    """(enabled, version) of CATALOG's records, by name."""
    return {name(r): (row["enabled"], row["version"]) for r in (ENABLED, DRAFT, WEATHER) if (row := stored(database_url, r["provider"], r["method"]))}


def test_two_ticked_records_are_disabled_then_enabled_again_each_a_new_version(page, database_url):
    page.get_by_role("checkbox", name=f"Select {name(ENABLED)}").check()
    page.get_by_role("checkbox", name=f"Select {name(WEATHER)}").check()
    page.get_by_role("button", name="Disable selected").click()
    expect(page.get_by_role("status")).to_have_text("Disabled 2 records.")
    assert states(database_url) == {name(ENABLED): (False, 2), name(DRAFT): (False, 1), name(WEATHER): (False, 2)}

    page.get_by_role("checkbox", name=f"Select {name(ENABLED)}").check()
    page.get_by_role("checkbox", name=f"Select {name(WEATHER)}").check()
    page.get_by_role("button", name="Enable selected").click()
    expect(page.get_by_role("status")).to_have_text("Enabled 2 records.")
    assert states(database_url) == {name(ENABLED): (True, 3), name(DRAFT): (False, 1), name(WEATHER): (True, 3)}
    # The history names the operator, as a single save does.
    page.get_by_role("link", name=name(ENABLED), exact=True).click()
    expect(page.get_by_text("ada_operator").first).to_be_visible()


def test_disable_all_matching_asks_first_naming_what_agents_lose_and_keeps_the_filter(page, database_url):
    page.get_by_label("Text").fill("acme")
    page.get_by_role("button", name="Filter").click()
    page.get_by_role("button", name="Disable all 2 matching").click()
    # A question, on a page of its own; nothing is changed yet.
    expect(page.get_by_role("heading", name="Disable 1 record?")).to_be_visible()
    expect(page.get_by_text("Agents will no longer find it")).to_be_visible()
    records = page.get_by_role("region", name="Records it disables")
    expect(records.get_by_role("link")).to_have_text([name(ENABLED)])
    assert states(database_url)[name(ENABLED)] == (True, 1)
    page.get_by_role("link", name="Cancel").click()
    expect(page.get_by_label("Text")).to_have_value("acme")
    assert states(database_url)[name(ENABLED)] == (True, 1)

    page.get_by_role("button", name="Disable all 2 matching").click()
    page.get_by_role("button", name="Disable 1 record").click()
    expect(page.get_by_role("status").first).to_have_text("Disabled 1 record; 1 was a draft already.")
    expect(page.get_by_label("Text")).to_have_value("acme")
    assert states(database_url) == {name(ENABLED): (False, 2), name(DRAFT): (False, 1), name(WEATHER): (True, 1)}


def test_a_record_that_comes_to_match_before_the_answer_changes_nothing_and_the_page_asks_again(page, database_url):
    page.get_by_label("Text").fill("acme")
    page.get_by_role("button", name="Filter").click()
    page.get_by_role("button", name="Disable all 2 matching").click()
    expect(page.get_by_role("heading", name="Disable 1 record?")).to_be_visible()
    # Another writer, between the question and the answer: WEATHER's URLs come to hold "acme".
    with psycopg.connect(database_url, autocommit=True) as other:
        other.execute("update payrail.provider_methods set urls = '{https://acme.example/weather}' where provider = %s", (WEATHER["provider"],))
    page.get_by_role("button", name="Disable 1 record").click()
    expect(page.get_by_role("alert")).to_have_text(
        "Nothing was changed: the records changed since this page was shown (another writer's change). "
        "It would now disable 2 records, below: confirm again to do that."
    )
    expect(page.get_by_role("heading", name="Disable 2 records?")).to_be_visible()
    expect(page.get_by_role("region", name="Records it disables").get_by_role("link")).to_have_text([name(ENABLED), name(WEATHER)])
    assert states(database_url) == {name(ENABLED): (True, 1), name(DRAFT): (False, 1), name(WEATHER): (True, 2)}
    # One that stops matching (disabled meanwhile) refuses it the same way.
    with psycopg.connect(database_url, autocommit=True) as other:
        other.execute("update payrail.provider_methods set enabled = false where provider = %s", (WEATHER["provider"],))
    page.get_by_role("button", name="Disable 2 records").click()
    expect(page.get_by_role("heading", name="Disable 1 record?")).to_be_visible()
    assert states(database_url) == {name(ENABLED): (True, 1), name(DRAFT): (False, 1), name(WEATHER): (False, 3)}
    page.get_by_role("button", name="Disable 1 record").click()
    expect(page.get_by_role("status").first).to_have_text("Disabled 1 record; 2 were drafts already.")
    assert states(database_url)[name(ENABLED)] == (False, 2)


def test_drafts_without_an_embedding_are_refused_in_words_and_the_others_enabled(page, database_url):
    insert_drafts(database_url, 2)
    page.get_by_label("State").select_option("Draft")
    page.get_by_role("button", name="Filter").click()
    page.get_by_role("button", name="Enable all 1 matching").click()
    expect(page.get_by_text("Agents will find it as soon as it is enabled")).to_be_visible()
    page.get_by_role("button", name="Enable 1 record").click()
    expect(page.get_by_role("status").first).to_have_text("Enabled 1 record.")

    page.goto("/records")
    page.get_by_role("checkbox", name="Select Provider 0000 / Method 0000").check()
    page.get_by_role("checkbox", name="Select Provider 0001 / Method 0001").check()
    page.get_by_role("button", name="Enable selected").click()
    expect(page.get_by_role("alert")).to_have_text(
        "Enabled 0 records. Not enabled: 2 drafts have no embedding of their current content yet, so agents could not find them: "
        "run `payrail-embedder sync` first, then enable them again (or save each from its page, which embeds it)."
    )
    assert stored(database_url, "Provider 0000", "Method 0000")["enabled"] is False
    assert stored(database_url, *DRAFT_KEY)["enabled"] is True


# Over plain HTTP, on the shared backoffice: each refused request changes nothing.


# Stands for the plan the confirmation page of "disable every record matching acme" shows
# (shown_plan), so a refused post would have done something had it been let through.
PLAN = "as shown"


def shown_plan(client: HttpClient, session, query: dict) -> str:
    page = client.get("/records/bulk?" + urlencode(query), cookies=session.cookies).body
    return re.search(r'name="plan" value="([0-9a-f]{64})"', page)[1]


def bulk_form(session, action: str = "disable", **fields) -> dict:
    return {"csrf_token": session.token, "action": action, "scope": "selected", **fields}


def post(client: HttpClient, session, form: dict | list, headers: dict | None = None, path: str = "/records/bulk"):
    return client.request(
        "POST",
        path,
        body=_encoded(form),
        headers={"Origin": client.origin, "Content-Type": "application/x-www-form-urlencoded", **(headers or {})},
        cookies=session.cookies,
    )


def _encoded(form: dict | list) -> bytes:
    return urlencode(form, doseq=True).encode()


def ids(shared) -> list[str]:
    return [str(stored(shared.database_url, *key)["id"]) for key in (ACME, WEATHER_KEY)]


def unchanged(shared) -> bool:
    return states(shared.database_url) == {name(ENABLED): (True, 1), name(DRAFT): (False, 1), name(WEATHER): (True, 1)}


@pytest.mark.parametrize(
    ("change", "status", "words"),
    [
        pytest.param({"csrf_token": None}, 403, "security token", id="no-token"),
        pytest.param({"csrf_token": "forged"}, 403, "security token", id="a-forged-token"),
        pytest.param({"headers": {"Origin": "https://evil.example"}}, 403, "Refused:", id="another-origin"),
        pytest.param({"record": ["1 or 1=1"]}, 400, "not a record id", id="sql-for-an-id"),
        pytest.param({"record": ["-1"]}, 400, "not a record id", id="a-negative-id"),
        pytest.param({"record": ["١"]}, 400, "not a record id", id="an-arabic-digit"),
        pytest.param({"record": ["9" * 19]}, 400, "not a record id", id="beyond-bigint"),
        pytest.param({"record": [str(n) for n in range(1, 502)]}, 400, "at most 500 records", id="five-hundred-and-one-ids"),
        pytest.param({"record": [str(n) for n in range(1, 10_001)]}, 400, "Too many fields", id="ten-thousand-ids"),
        pytest.param({"scope": "matching"}, 400, "under a filter only", id="all-matching-without-a-filter"),
        pytest.param({"scope": "matching", "q": "acme"}, 400, "incomplete", id="all-matching-without-the-plan-it-showed"),
        pytest.param({"scope": "matching", "q": "acme", "plan": "0" * 64}, 409, "Nothing was changed: the records changed since", id="a-plan-never-shown"),
        pytest.param({"scope": "matching", "q": "acme", "plan": PLAN, "csrf_token": None}, 403, "security token", id="all-matching-without-a-token"),
        pytest.param(
            {"scope": "matching", "q": "acme", "plan": PLAN, "headers": {"Origin": "https://evil.example"}},
            403,
            "Refused:",
            id="all-matching-from-another-origin",
        ),
        pytest.param({"action": "drop"}, 400, "incomplete", id="an-unknown-action"),
        pytest.param({"scope": "matching", "state": "enabled' or '1'='1"}, 400, "incomplete", id="an-unknown-state"),
    ],
)
def test_a_refused_bulk_request_changes_nothing(shared_backoffice, change, status, words):
    client = shared_backoffice.client
    session = http_sign_in(client)
    if change.get("plan") == PLAN:
        change = change | {"plan": shown_plan(client, session, {"action": "disable", "q": change["q"]})}
    reply = post_changed(client, session, bulk_form(session, record=ids(shared_backoffice)), change)
    assert (reply.status, words in reply.body) == (status, True), reply.body
    assert unchanged(shared_backoffice)


def post_changed(client: HttpClient, session, form: dict, change: dict, path: str = "/records/bulk"):
    """form with change's fields (None: left out) posted, with change's "headers" if it has them."""
    change = dict(change)
    headers = change.pop("headers", None)
    return post(client, session, {k: v for k, v in (form | change).items() if v is not None}, headers, path)


def test_ids_of_no_record_and_sql_in_the_filter_change_nothing_and_say_so(shared_backoffice):
    client = shared_backoffice.client
    session = http_sign_in(client)
    reply = post(client, session, bulk_form(session, record=["987654", "987655"]))
    assert reply.status == 303
    assert "Disabled 0 records. Not disabled: 2 records named no record" in client.get(reply.location, cookies=session.cookies).body
    injected = "acme'; update payrail.provider_methods set enabled = false; --"
    asked = client.get("/records/bulk?" + urlencode({"action": "disable", "q": injected}), cookies=session.cookies)
    assert asked.status == 200 and "No record matched: nothing would be disabled." in asked.body and 'name="plan"' not in asked.body
    reply = post(client, session, bulk_form(session, scope="matching", q=injected, plan=bulk.BulkResult(False, (), (), (), ()).digest()))
    assert reply.status == 303 and reply.location.startswith("/records?q=")
    assert "No record matched: nothing was disabled." in client.get(reply.location, cookies=session.cookies).body
    assert unchanged(shared_backoffice)


@pytest.mark.parametrize(
    ("query", "status", "words"),
    [
        ({"action": "disable"}, 400, "under a filter only"),
        ({"action": "drop", "q": "acme"}, 400, "incomplete"),
        ({"action": "disable", "state": "enabled' or '1'='1"}, 400, "incomplete"),
        ({"action": "disable", "q": "acme"}, 200, "Disable 1 record?"),
    ],
)
def test_the_question_page_changes_nothing_and_refuses_what_the_list_never_asks(shared_backoffice, query, status, words):
    client = shared_backoffice.client
    session = http_sign_in(client)
    asked = client.get("/records/bulk?" + urlencode(query), cookies=session.cookies)
    assert (asked.status, words in asked.body) == (status, True), asked.body
    assert unchanged(shared_backoffice)
    assert client.get("/records/bulk?" + urlencode(query)).status == 303  # without a session: to sign in


def test_without_a_session_a_bulk_request_is_sent_to_sign_in(shared_backoffice):
    client = shared_backoffice.client
    session = http_sign_in(client)
    reply = client.post("/records/bulk", bulk_form(session, record=ids(shared_backoffice)), headers={"Origin": client.origin})
    assert reply.status == 303 and reply.location.startswith("/sign-in")
    assert unchanged(shared_backoffice)


# The last bulk action is undone in one step, from the records list.


def test_the_last_bulk_action_is_undone_in_one_step_and_the_history_shows_both_as_actions(page, database_url):
    page.get_by_label("Text").fill("acme")
    page.get_by_role("button", name="Filter").click()
    page.get_by_role("button", name="Disable all 2 matching").click()
    page.get_by_role("button", name="Disable 1 record").click()
    last = page.get_by_role("region", name="Your last bulk action")
    expect(last).to_contain_text('you disabled 1 record (text "acme")')
    expect(last.get_by_role("button", name="Undo")).to_have_accessible_description(
        "Enable this record again, each with a new version in its history; nothing is changed if any of them changed since."
    )
    last.get_by_role("button", name="Undo").click()
    expect(page.get_by_role("status").first).to_contain_text("Enabled 1 record again: bulk action ")
    expect(page.get_by_label("Text")).to_have_value("acme")
    expect(page.get_by_role("region", name="Your last bulk action")).to_have_count(0)  # an undo is not undone
    assert states(database_url)[name(ENABLED)] == (True, 3)
    page.get_by_role("link", name=name(ENABLED), exact=True).click()
    versions = page.get_by_role("region", name="History").get_by_role("listitem")
    expect(versions.filter(has=page.get_by_role("heading", name="Version 3 (current)"))).to_contain_text("in bulk action 2 (undid bulk action 1 (1 record))")
    expect(versions.filter(has=page.get_by_role("heading", name="Version 2"))).to_contain_text('in bulk action 1 (disabled 1 record (text "acme"))')


def test_an_undo_after_another_writers_change_changes_nothing_and_says_which(page, database_url):
    page.get_by_role("checkbox", name=f"Select {name(ENABLED)}").check()
    page.get_by_role("checkbox", name=f"Select {name(WEATHER)}").check()
    page.get_by_role("button", name="Disable selected").click()
    with psycopg.connect(database_url, autocommit=True) as other:
        other.execute("update payrail.provider_methods set urls = '{https://globex.example/v2}' where provider = %s", (WEATHER["provider"],))
    page.get_by_role("region", name="Your last bulk action").get_by_role("button", name="Undo").click()
    expect(page.get_by_role("alert")).to_have_text(
        f"Not undone: {name(WEATHER)} was saved since (version 3 now; the action left version 2). Nothing was changed."
    )
    assert states(database_url) == {name(ENABLED): (False, 2), name(DRAFT): (False, 1), name(WEATHER): (False, 3)}


def undo_form(session, bulk_action: str) -> dict:
    return {"csrf_token": session.token, "bulk_action": bulk_action}


UNDO = "/records/bulk/undo"


def others_bulk_action(shared) -> str:
    """A bulk action of another operator's (it changed nothing), committed."""
    with psycopg.connect(shared.database_url, user=OTHER_OPERATOR, password=PASSWORD, autocommit=True) as other:
        return str(other.execute("select payrail.begin_bulk_action('disable', 'text \"acme\"')").fetchone()[0])


@pytest.mark.parametrize(
    ("change", "status", "words"),
    [
        pytest.param({"csrf_token": None}, 403, "security token", id="no-token"),
        pytest.param({"headers": {"Origin": "https://evil.example"}}, 403, "Refused:", id="another-origin"),
        pytest.param({"bulk_action": "1 or 1=1"}, 400, "incomplete", id="sql-for-an-id"),
        pytest.param({"bulk_action": "9" * 19}, 400, "incomplete", id="beyond-bigint"),
        pytest.param({"bulk_action": None}, 400, "incomplete", id="no-id"),
    ],
)
def test_a_refused_undo_request_changes_nothing(shared_backoffice, change, status, words):
    client = shared_backoffice.client
    session = http_sign_in(client)
    reply = post_changed(client, session, undo_form(session, others_bulk_action(shared_backoffice)), change, UNDO)
    assert (reply.status, words in reply.body) == (status, True), reply.body
    assert unchanged(shared_backoffice)


def test_an_undo_of_another_operators_action_or_of_none_changes_nothing_and_says_why(shared_backoffice):
    client = shared_backoffice.client
    session = http_sign_in(client)
    others = others_bulk_action(shared_backoffice)
    for bulk_action, words in (
        (others, f"Not undone: bulk action {others} is not your last bulk action"),
        ("987654", "Not undone: there is no bulk action 987654."),
    ):
        reply = post(client, session, undo_form(session, bulk_action), path=UNDO)
        assert reply.status == 303, reply.body
        assert words in client.get(reply.location, cookies=session.cookies).body
    assert unchanged(shared_backoffice)
    reply = client.post(UNDO, undo_form(session, others), headers={"Origin": client.origin})  # no session cookie
    assert reply.status == 303 and reply.location.startswith("/sign-in")
