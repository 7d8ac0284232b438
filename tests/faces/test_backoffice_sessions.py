"""Sessions an operator manages: the Sessions page lists the signed-in role's sessions in every
browser, signs one out or every other one, and the per-role cap lets a new sign-in in by ending
the session idle longest (a browser closed without signing out), still refusing while every
session is in use. Attacked: another role's session, forms without the session's token or from
another site, and the User-Agent header the page shows.

Real `payrail-embedder backoffice` subprocesses on real PostgreSQL; chromium contexts are the
operator's browsers, plain HTTP sends what a hostile script would.
"""

from __future__ import annotations

import re
import time
from html import unescape

from playwright.sync_api import expect

from payrail_test_support.backoffice import (
    OPERATOR,
    OTHER_OPERATOR,
    HttpClient,
    HttpSession,
    connections_of,
    http_sign_in,
    new_page,
    post_sign_in,
    running_backoffice,
    sign_in,
    take_screenshot,
)

ENDED = re.compile(r"/sign-in\?ended=1$")
# Seconds of idleness after which a session gives way (the command's default is 120).
GIVE_WAY = 6


def signed_in_page(browser, running, user_agent: str):
    page = new_page(browser, running, user_agent=user_agent)
    sign_in(page)
    expect(page.get_by_role("heading", name="Records", exact=True)).to_be_visible()
    return page


def handles(client: HttpClient, session: HttpSession) -> list[str]:
    """What the Sessions page of session names its other sessions by."""
    return re.findall(r'name="session" value="([^"]+)"', client.get("/sessions", cookies=session.cookies).body)


def alive(client: HttpClient, session: HttpSession) -> bool:
    return client.get("/records", cookies=session.cookies).status == 200


def post_form(client: HttpClient, path: str, session: HttpSession, form: dict, origin: str | None = None):
    return client.post(path, form, headers={"Origin": origin or client.origin}, cookies=session.cookies)


def test_an_operator_lists_the_roles_sessions_signs_one_out_then_every_other(browser, registry, database_url, tmp_path):
    with running_backoffice(registry, tmp_path) as running:
        pages = {where: signed_in_page(browser, running, f"Payrail test browser on the {where}") for where in ("laptop", "desk", "phone")}
        laptop = pages["laptop"]
        laptop.get_by_role("link", name="Sessions").click()
        expect(laptop.get_by_role("heading", name="Sessions", exact=True)).to_be_visible()
        rows = laptop.get_by_role("row").filter(has_text="Payrail test browser")
        expect(rows).to_have_count(3)
        current = rows.filter(has_text="on the laptop")
        expect(current).to_contain_text("This session")
        expect(current).to_contain_text("just now")
        expect(current).to_have_attribute("aria-current", "true")
        expect(current.get_by_role("button")).to_have_count(0)  # the header's Sign out is this one's
        expect(rows.filter(has_text="on the desk")).to_contain_text(re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC"))
        take_screenshot(laptop, tmp_path, "backoffice-sessions.png")
        assert connections_of(database_url, OPERATOR, settles_at=3) == 3

        # Each row's button says whose session it signs out.
        for where in ("desk", "phone"):
            expect(laptop.get_by_role("button", name=re.compile(rf"^Sign out the session started .* in Payrail test browser on the {where}$"))).to_have_count(1)
        rows.filter(has_text="on the desk").get_by_role("button", name="Sign out").click()
        expect(laptop.get_by_role("status")).to_contain_text("Signed out that session")
        expect(rows).to_have_count(2)
        expect(rows.filter(has_text="on the desk")).to_have_count(0)
        assert connections_of(database_url, OPERATOR, settles_at=2) == 2
        desk = pages["desk"]
        desk.goto("/records")
        expect(desk).to_have_url(ENDED)
        expect(desk.get_by_role("status")).to_contain_text("Your session has ended")

        laptop.get_by_role("button", name="Sign out everywhere else").click()
        expect(laptop.get_by_role("status")).to_contain_text("Signed out 1 other session: this one stays.")
        expect(rows).to_have_count(1)
        expect(laptop.get_by_text("No other session is open.")).to_be_visible()
        phone = pages["phone"]
        phone.goto("/quality")
        expect(phone).to_have_url(ENDED)
        laptop.get_by_role("link", name="Records").click()
        expect(laptop.get_by_role("heading", name="Records", exact=True)).to_be_visible()
        assert connections_of(database_url, OPERATOR, settles_at=1) == 1
        assert running.output.count("reason=signed_out_elsewhere") == 2
        for page in pages.values():
            page.context.close()


def test_the_cap_lets_a_new_sign_in_in_by_ending_the_session_idle_longest_and_refuses_while_all_are_in_use(browser, registry, database_url, tmp_path):
    with running_backoffice(registry, tmp_path, "--max-sessions-per-role", "2", "--session-give-way-after", str(GIVE_WAY)) as running:
        client = HttpClient(running.url)
        abandoned = http_sign_in(client, headers={"User-Agent": "a browser closed without signing out"})
        kept = http_sign_in(client, headers={"User-Agent": "a browser still in use"})
        # Both used just now: refused as before, saying what frees one.
        refused = post_sign_in(client)
        assert refused.status == 503, refused.body
        assert (
            f'"{OPERATOR}" has 2 sessions open, the most one role may hold, each used in the last {GIVE_WAY} seconds: sign out of one '
            f"in another browser (its Sessions page lists them), or try again once one has been idle for {GIVE_WAY} seconds."
        ) in unescape(refused.body)
        assert "payrail_session" not in refused.cookies()

        time.sleep(GIVE_WAY + 0.5)
        assert alive(client, kept)  # used again: only the abandoned one has been idle that long
        page = signed_in_page(browser, running, "the new browser")
        assert client.get("/records", cookies=abandoned.cookies).location == "/sign-in?ended=1"
        assert alive(client, kept)
        assert connections_of(database_url, OPERATOR, settles_at=2) == 2
        assert "reason=gave_way" in running.output
        page.get_by_role("link", name="Sessions").click()
        rows = page.get_by_role("row")
        expect(rows.filter(has_text="the new browser")).to_contain_text("This session")
        expect(rows.filter(has_text="a browser still in use")).to_have_count(1)
        expect(rows.filter(has_text="closed without signing out")).to_have_count(0)

        # Both in use just now: one more browser is refused, and the cap still holds.
        other = new_page(browser, running)
        assert alive(client, kept)
        page.reload()
        sign_in(other)
        expect(other.get_by_role("alert")).to_contain_text(f'"{OPERATOR}" has 2 sessions open, the most one role may hold, each used in the last')
        assert alive(client, kept)
        page.reload()
        expect(page.get_by_role("heading", name="Sessions", exact=True)).to_be_visible()
        assert connections_of(database_url, OPERATOR, settles_at=2) == 2
        for opened in (page, other):
            opened.context.close()


def test_another_roles_sessions_are_neither_listed_nor_ended_and_forms_without_the_token_end_nothing(backoffice, database_url):
    client = HttpClient(backoffice.url)
    ada = http_sign_in(client, headers={"User-Agent": "browser of ada"})
    ada_elsewhere = http_sign_in(client, headers={"User-Agent": "other browser of ada"})
    eve = http_sign_in(client, OTHER_OPERATOR, headers={"User-Agent": "browser of eve"})
    eve_elsewhere = http_sign_in(client, OTHER_OPERATOR, headers={"User-Agent": "other browser of eve"})
    listed = client.get("/sessions", cookies=ada.cookies).body
    assert "other browser of ada" in listed and "of eve" not in listed and OTHER_OPERATOR not in listed
    [ada_other_handle] = handles(client, ada)
    [eve_other_handle] = handles(client, eve)

    # Without the session's token, with another session's, or from another site: nothing ends.
    for path, form in (("/sessions/end", {"session": ada_other_handle}), ("/sessions/end-others", {})):
        for token in (None, "", "forged", eve.token, ada_elsewhere.token):
            sent = form if token is None else {**form, "csrf_token": token}
            reply = post_form(client, path, ada, sent)
            assert reply.status == 403 and "did not carry this session&#39;s security token" in reply.body, (path, token, reply.body)
        reply = post_form(client, path, ada, {**form, "csrf_token": ada.token}, origin="https://attacker.example")
        assert reply.status == 403 and "comes from another site" in reply.body
    assert alive(client, ada_elsewhere)

    # Another role's session, named by its own handle: refused in words, and it lives on; so do
    # handles that name nothing.
    for handle in (eve_other_handle, "", "x" * 10_000, "' or 1=1 --", "\u2028<b>"):
        reply = post_form(client, "/sessions/end", ada, {"csrf_token": ada.token, "session": handle})
        assert (reply.status, reply.location) == (303, "/sessions")
        shown = client.get("/sessions", cookies=ada.cookies).body
        assert "Nothing was signed out: that session has ended already, or it is not another session of yours." in unescape(shown)
    assert alive(client, eve_elsewhere) and alive(client, eve) and alive(client, ada_elsewhere)

    # Everywhere else is the role's own sessions only.
    reply = post_form(client, "/sessions/end-others", ada, {"csrf_token": ada.token})
    assert (reply.status, reply.location) == (303, "/sessions")
    assert "Signed out 1 other session: this one stays." in client.get("/sessions", cookies=ada.cookies).body
    assert not alive(client, ada_elsewhere)
    assert alive(client, ada) and alive(client, eve) and alive(client, eve_elsewhere)
    assert handles(client, eve) == [eve_other_handle]
    assert connections_of(database_url, OPERATOR, settles_at=1) == 1
    assert connections_of(database_url, OTHER_OPERATOR, settles_at=2) == 2


# The browser's name is the outsider's header: HTML, control characters (C0, DEL, and C1 bytes,
# which the server reads as Latin-1: U+009B is CSI to many terminals) and a huge value.
HOSTILE_USER_AGENT = "<script>alert(1)</script><img src=x onerror=alert(2)>\x1b[31mred\x7f\x9bcsi" + "A" * 12_000


def test_a_hostile_user_agent_is_shown_as_bounded_text_with_its_controls_escaped(page, backoffice):
    client = HttpClient(backoffice.url)
    hostile = http_sign_in(client, headers={"User-Agent": HOSTILE_USER_AGENT})
    body = client.get("/sessions", cookies=hostile.cookies).body
    cell = re.search(r'<td class="browser">(.*?)</td>', body, flags=re.S).group(1)
    assert "<" not in cell and "\x1b" not in cell and "\x7f" not in cell and "\x9b" not in cell, cell
    shown = unescape(cell)
    assert shown.startswith("<script>alert(1)</script><img src=x onerror=alert(2)>\\x1b[31mred\\x7f\\x9bcsiAAA"), shown
    assert shown.endswith("A…") and len(shown) < 200, len(shown)

    dialogs = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    page.get_by_role("link", name="Sessions").click()
    row = page.get_by_role("row").filter(has_text="<script>alert(1)</script>")
    expect(row).to_contain_text("\\x1b[31mred\\x7f\\x9bcsi")
    expect(row.get_by_role("button", name="Sign out")).to_be_visible()
    expect(page.locator("main script, main img")).to_have_count(0)
    assert dialogs == []
    row.get_by_role("button", name="Sign out").click()
    expect(page.get_by_role("status")).to_contain_text("Signed out that session")
    assert not alive(client, hostile)
