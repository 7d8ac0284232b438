"""A history entry's Restore in the backoffice shows its effect and asks, as the record's Save does:
a confirmation page with what restoring changes (fields, golden queries' top threes, measured as
an edit's preview is) and the verdict beside its button; it restores only when confirmed, and
what it restores is what the page showed.

Browser tests (chromium, by role and label) show what an operator sees, on PostgreSQL 18 and 16;
plain HTTP requests attack the form (no token, another origin, a stale or forged confirmation, an
entry that does not exist, another record's entry). What the page claims is checked against eval
and the database.
"""

from __future__ import annotations

from html import unescape

import psycopg
import pytest
from playwright.sync_api import expect

from payrail_embedder.backoffice.views import restore_digest
from payrail_test_support.backoffice import ENABLED, OPERATOR, PASSWORD, WEATHER, confirmation, name, stored, take_screenshot
from payrail_test_support.cli import cli_import, cli_json, run_cli, write_jsonl
from payrail_test_support.golden_tops import eval_tops
from payrail_test_support.interfaces import BackofficeOperator
from test_backoffice_golden import MORE, WEATHER_QUERY, background_of, colour_of

# A poor second version of WEATHER: the weather query finds it worse.
POOR = {**WEATHER, "guidance": "Purpose: turn a street address into coordinates, and the weather there."}
WEATHER_KEY = (WEATHER["provider"], WEATHER["method"])


@pytest.fixture
def restorable(registry, tmp_path) -> dict:
    """The backoffice's catalog and test_backoffice_golden's MORE, a golden query that should find
    WEATHER, and WEATHER at version 3, as version 1 was; version 2 (POOR) in its history."""
    cli_import(registry, tmp_path / "more.jsonl", MORE)
    assert run_cli(registry, "golden", "add", WEATHER_QUERY, "--relevant", name(WEATHER)).returncode == 0
    for number, record in enumerate((POOR, WEATHER)):
        code, report, stderr = cli_json(registry, "import", "--json", write_jsonl(tmp_path / f"version-{number}.jsonl", [record]))
        assert (code, report["updated"]) == (0, 1), (report, stderr)
    return registry


def restore_page(page, database_url: str):
    """The record's page, then version 2's Restore: its confirmation page."""
    page.goto(f"/records/{stored(database_url, *WEATHER_KEY)['id']}")
    page.get_by_role("button", name="Restore version 2", exact=True).click()
    expect(page.get_by_role("heading", level=1)).to_have_text(f"Restore version 2 of {name(WEATHER)}?")


def test_restore_shows_its_effect_and_the_verdict_first_and_restores_what_it_showed_when_confirmed(page, restorable, database_url, tmp_path):
    before = eval_tops(database_url, restorable)
    restore_page(page, database_url)
    assert stored(database_url, *WEATHER_KEY)["version"] == 3, "the confirmation page restores nothing"
    warning = page.get_by_role("status").filter(has_text="Not restored yet")
    expect(warning).to_have_text(
        "Not restored yet: restoring version 2 changes the top three of 1 golden query (below). Restore to restore it as shown; Cancel leaves the record as it is."
    )
    # The fields it changes, as the history shows a version's changes.
    fields = page.get_by_role("region", name="What restoring changes")
    expect(fields).to_contain_text("Version 3 (current, enabled) becomes what version 2 held")
    expect(fields.locator("ins")).to_have_text([POOR["guidance"]])
    expect(fields.locator("del")).to_have_text(WEATHER["guidance"].split("\n"))
    # The golden queries' effect, and the verdict beside the button, read out with it, in red.
    effect = page.get_by_role("region", name="What saving changes")
    weather_query = effect.get_by_role("listitem").filter(has=page.get_by_role("heading", name=WEATHER_QUERY))
    expect(weather_query.get_by_text("Worse for what it should find")).to_be_visible()
    button = page.get_by_role("button", name="Restore version 2", exact=True)
    expect(button).to_have_accessible_description(
        "Restoring changes the top three of 1 golden query: 1 worse, 0 better, 0 the same for what it should find (What saving changes, below)."
    )
    verdict = page.get_by_text("Restoring changes the top three of")
    assert colour_of(verdict) == colour_of(page.get_by_text("Worse for what it should find").first)
    assert background_of(warning) == background_of(page.locator(".message.warning"))
    take_screenshot(page, tmp_path, "backoffice-restore.png", full_page=True)

    said = {
        query: [
            text.replace(" (this record)", "").replace(" should find", "") for text in item.get_by_role("list").last.get_by_role("listitem").all_inner_texts()
        ]
        for query, item in ((WEATHER_QUERY, weather_query),)
    }
    button.click()
    expect(page.get_by_role("status")).to_have_text(
        f'Restored version 2 into "{name(WEATHER)}" as version 4: enabled, its content was embedded before it was saved.'
    )
    row = stored(database_url, *WEATHER_KEY)
    assert (row["version"], row["guidance"], row["enabled"]) == (4, POOR["guidance"], True)
    after = eval_tops(database_url, restorable)
    assert after[WEATHER_QUERY] == said[WEATHER_QUERY] != before[WEATHER_QUERY]


def test_cancel_leaves_the_record_as_it_is(page, restorable, database_url):
    restore_page(page, database_url)
    page.get_by_role("link", name="Cancel").click()
    expect(page.get_by_role("heading", level=1)).to_have_text(name(WEATHER))
    row = stored(database_url, *WEATHER_KEY)
    assert (row["version"], row["guidance"]) == (3, WEATHER["guidance"])


def test_a_save_after_the_page_was_shown_restores_nothing_and_asks_again_with_what_restoring_does_now(page, restorable, database_url):
    restore_page(page, database_url)
    with psycopg.connect(database_url) as conn:  # another operator's save meanwhile
        conn.execute("update payrail.provider_methods set docs_url = 'https://docs.globex.example/v2' where method = %s", (WEATHER["method"],))
    page.get_by_role("button", name="Restore version 2", exact=True).click()
    expect(page.get_by_role("alert")).to_contain_text("Not restored: ")
    expect(page.get_by_role("alert")).to_contain_text("Nothing was changed. Below is what restoring version 2 does now: Restore to do that.")
    row = stored(database_url, *WEATHER_KEY)
    assert (row["version"], row["guidance"], row["docs_url"]) == (4, WEATHER["guidance"], "https://docs.globex.example/v2"), "nothing lost"
    # Asked again of the record as it is now: restoring also takes back the docs URL saved meanwhile.
    fields = page.get_by_role("region", name="What restoring changes")
    expect(fields).to_contain_text("Version 4 (current, enabled)")
    expect(fields.get_by_role("listitem").filter(has_text="Docs URL")).to_contain_text("https://docs.globex.example/v2")
    page.get_by_role("button", name="Restore version 2", exact=True).click()
    expect(page.get_by_role("status").filter(has_text="Restored version 2")).to_contain_text("as version 5")
    row = stored(database_url, *WEATHER_KEY)
    assert (row["version"], row["guidance"], row["docs_url"]) == (5, POOR["guidance"], WEATHER["docsUrl"])


# --- attacks: plain HTTP ---------------------------------------------------------------------------


def test_forged_stale_and_foreign_restore_posts_change_nothing(backoffice_for_attacks, database_url):
    operator, weather, acme, history_id = backoffice_for_attacks
    post = operator.client.post
    form = {"history_id": str(history_id), "version": "3"}
    digest = restore_digest(weather, history_id, 3)
    unchanged = (stored(database_url, *WEATHER_KEY), stored(database_url, ENABLED["provider"], ENABLED["method"]))

    def nothing_changed():
        assert (stored(database_url, *WEATHER_KEY), stored(database_url, ENABLED["provider"], ENABLED["method"])) == unchanged

    # Without the CSRF token, or from another site: refused before anything is read.
    for token, origin in ((None, operator.client.origin), (operator.session.token, "https://attacker.example")):
        fields = {**form, "previewed": digest} | ({"csrf_token": token} if token else {})
        reply = post(f"/records/{weather}/restore", fields, headers={"Origin": origin}, cookies=operator.session.cookies)
        assert reply.status == 403 and "nothing was changed" in unescape(reply.body), reply.body[:2000]
        nothing_changed()
    # A confirmation that is not the one shown (another version, a digest of something else): asked, not restored.
    for forged in ({**form, "previewed": "0" * 64}, {**form, "version": "2", "previewed": digest}):
        reply = operator._post(f"/records/{weather}/restore", forged)
        assert reply.status == 200 and "Not restored yet" in reply.body, (reply.status, reply.body[:2000])
        nothing_changed()
    # A stale confirmation (the record saved since the page was shown): nothing restored, asked again.
    shown = operator._post(f"/records/{weather}/restore", form)
    with psycopg.connect(database_url) as conn:
        conn.execute("update payrail.provider_methods set urls = '{https://api.globex.example/now}' where id = %s", (weather,))
    unchanged = (stored(database_url, *WEATHER_KEY), unchanged[1])
    stale = operator._post(f"/records/{weather}/restore", confirmation(shown.body))
    assert stale.status == 409 and "Nothing was changed." in unescape(stale.body), (stale.status, stale.body[:2000])
    nothing_changed()
    # An entry that does not exist, and another record's entry (with a confirmation that names it): no such entry of this record.
    for record_id, entry in ((weather, 999_999), (acme, history_id)):
        for fields in (
            {"history_id": str(entry), "version": "1"},
            {"history_id": str(entry), "version": "1", "previewed": restore_digest(record_id, entry, 1)},
        ):
            reply = operator._post(f"/records/{record_id}/restore", fields)
            assert reply.status == 303 and reply.location == f"/records/{record_id}", (reply.status, reply.body[:2000])
            page = operator.client.get(reply.location, cookies=operator.session.cookies).body
            assert f"Not restored: this record has no history entry {entry}." in unescape(page), page[:3000]
            nothing_changed()
    # Not a number: an incomplete form.
    reply = operator._post(f"/records/{weather}/restore", {"history_id": "1 or 1=1", "version": "3"})
    assert reply.status == 400 and "The form was incomplete" in reply.body
    nothing_changed()


@pytest.fixture
def backoffice_for_attacks(backoffice, restorable, database_url):
    """An operator signed in over plain HTTP; WEATHER's id, ENABLED's, and the history id of WEATHER's version 2."""
    operator = BackofficeOperator(backoffice.url, OPERATOR, PASSWORD)
    weather = stored(database_url, *WEATHER_KEY)["id"]
    acme = stored(database_url, ENABLED["provider"], ENABLED["method"])["id"]
    with psycopg.connect(database_url) as conn:
        (history_id,) = conn.execute("select id from payrail.provider_method_history where provider_method_id = %s and version = 2", (weather,)).fetchone()
    return operator, weather, acme, history_id
