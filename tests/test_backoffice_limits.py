"""What an outsider, or one operator, can cost the backoffice and the database, attacked: the
sign-in throttle under many names, request and upload sizes, sessions per role and in all, how
long a session outlives its credential; and a database that restarts under an open form loses
nothing the operator typed.

Real `payrail-embedder backoffice` subprocesses on real PostgreSQL, plain HTTP for what a script
would send, chromium for what a person sees. The throttle's bound is attacked in process, with a
clock of the test's own: ten thousand names over HTTP would only measure PostgreSQL.
"""

from __future__ import annotations

import contextlib
import http.client
import re
import socket
import time
from html import unescape
from pathlib import Path

import psycopg
import pytest
from playwright.sync_api import expect
from psycopg import sql

from payrail_embedder.backoffice.sign_in import SignInThrottle
from payrail_embedder.postgres.local_server import use_hba_rules
from payrail_test_support.backoffice import (
    ACME,
    CATALOG,
    ENABLED,
    OPERATOR,
    OTHER_OPERATOR,
    PASSWORD,
    TEST_HBA,
    HttpClient,
    Reply,
    connections_of,
    cookie_value,
    create_roles,
    http_sign_in,
    new_page,
    post_sign_in,
    record_form,
    running_backoffice,
    sign_in,
    stored,
    take_screenshot,
)
from payrail_test_support.cli import cli_import
from payrail_test_support.environments import cli_environment
from payrail_test_support.servers import start_embedded
from payrail_test_support.waiting import wait_until

CREDENTIALS_REFUSED = "Not signed in: the username or password is wrong"


# The sign-in throttle, attacked.


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def fail(throttle: SignInThrottle, name: str) -> bool:
    """One failed sign-in for name, if the throttle lets it be tried."""
    if throttle.begin(name):
        return False
    throttle.end(name, failed=True)
    return True


class SmallTableThrottle(SignInThrottle):
    """The throttle with a table of 200 names: the bound is a parameter the code reads through
    self, and 3 x 10,000 failures (each copying the table to forget old names) took minutes."""

    MAX_NAMES = 200


def test_failing_under_ever_more_names_never_unlocks_a_locked_name_and_the_throttle_stays_bounded():
    clock = Clock()
    throttle = SmallTableThrottle(clock)
    victim = "ada_operator"
    for attempt in range(throttle.FREE_FAILURES + 9):
        clock.now += throttle.MAX_LOCK if attempt else 0  # the guesser waits out each lock
        assert fail(throttle, victim)
    assert throttle.begin(victim) == throttle.MAX_LOCK  # locked for the longest now

    # Three times as many names as it keeps, each failed at once.
    tried = sum(fail(throttle, f"flood-{n}") for n in range(3 * throttle.MAX_NAMES))
    assert throttle.tracked() == throttle.MAX_NAMES + 1
    # Past the table, fresh names share one entry, which locks as one name does.
    assert tried == throttle.MAX_NAMES - 1 + throttle.FREE_FAILURES
    assert throttle.begin("a fresh name") > 0
    clock.now += throttle.MAX_LOCK / 2
    assert throttle.begin(victim) == pytest.approx(throttle.MAX_LOCK / 2)

    # Time alone forgets: the lock, then the names.
    clock.now += throttle.FORGET_AFTER + 1
    assert throttle.begin(victim) == 0
    throttle.end(victim, failed=False)
    assert throttle.begin("a fresh name") == 0
    throttle.end("a fresh name", failed=False)
    assert throttle.tracked() == 0


def test_a_name_longer_than_postgresql_reads_is_refused_before_connecting(backoffice):
    """PostgreSQL cuts a name at 63 bytes: "ada_operator" + 60 more bytes would try ada's password
    under a name the throttle never saw."""
    client = HttpClient(backoffice.url)
    for role in [OPERATOR + "x" * 60, "é" * 32]:
        reply = post_sign_in(client, role, PASSWORD)
        assert reply.status == 403 and "has at most 63 bytes" in reply.body
        assert "payrail_session" not in reply.cookies()


# Request and upload sizes.


def raw_post(client: HttpClient, path: str, body, content_type: str, cookies: dict | None = None) -> tuple[int, str]:
    """A POST whose body is bytes (with a Content-Length) or an iterable of chunks (chunked: no length said)."""
    conn = http.client.HTTPConnection(client.host, client.port, timeout=120)
    headers = {"Content-Type": content_type, "Origin": client.origin}
    if cookies:
        headers["Cookie"] = "; ".join(f"{k}={v}" for k, v in cookies.items())
    conn.request("POST", path, body=body, headers=headers, encode_chunked=not isinstance(body, bytes))
    response = conn.getresponse()
    status, text = response.status, response.read().decode("utf-8", errors="replace")
    conn.close()
    return status, text


def test_oversized_bodies_are_refused_with_the_limit_in_words_and_change_nothing(backoffice, database_url):
    client = HttpClient(backoffice.url)
    session = http_sign_in(client)
    row = stored(database_url, *ACME)
    # Sign-in: anyone may post it, so its limit is small; said before a byte is read, or while counting.
    big_name = "username=" + "x" * 100_000
    for body in (big_name.encode(), (chunk for chunk in [big_name.encode()[:50_000], big_name.encode()[50_000:]])):
        status, text = raw_post(client, "/sign-in", body, "application/x-www-form-urlencoded")
        assert status == 413 and "64 kB at most" in text, text
    # A record form: a guidance of 2 MB.
    form = record_form(ENABLED, row["version"], session.token, guidance="x" * 2_000_000)
    status, text = raw_post(
        client,
        f"/records/{row['id']}",
        "&".join(f"{k}={v}" for k, v in form.items()).encode(),
        "application/x-www-form-urlencoded",
        session.cookies,
    )
    assert status == 413 and "1 MB at most" in text and "Sign out" in text, text
    # An import upload sent in chunks, with no length said: counted as it arrives.
    boundary = "payrailboundary"
    head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="csrf_token"\r\n\r\n{session.token}\r\n'
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="big.jsonl"\r\n'
        "Content-Type: application/x-ndjson\r\n\r\n"
    ).encode()
    chunks = (head if n == 0 else b"x" * 1_000_000 for n in range(30))
    status, text = raw_post(client, "/import", chunks, f"multipart/form-data; boundary={boundary}", session.cookies)
    assert status == 413 and "16 MB at most" in text and "Nothing was saved" in text, text
    after = stored(database_url, *ACME)
    assert (after["version"], after["guidance"]) == (row["version"], row["guidance"])


def peak_memory_kb(pid: int) -> int:
    """The process's peak resident set size (VmHWM), in kB."""
    return int(re.search(r"^VmHWM:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text(), flags=re.M).group(1))


def test_a_100_mb_upload_is_refused_in_a_browser_in_bounded_memory_and_imports_nothing(page, backoffice, database_url, tmp_path):
    upload = tmp_path / "one-line.jsonl"
    with upload.open("wb") as file:  # one line of 100 MB: what the attacker sent
        file.write(b'{"provider": "Big", "method": "Line", "guidance": "')
        for _ in range(100):
            file.write(b"x" * 1_000_000)
        file.write(b'"}\n')
    page.get_by_role("link", name="Import").click()
    before = peak_memory_kb(backoffice.process.pid)
    page.get_by_label("Catalog file (JSON Lines)").set_input_files(upload)
    page.get_by_role("button", name="Import").click()
    alert = page.get_by_role("alert")
    expect(alert).to_contain_text("Not imported: the file is larger than the backoffice takes (16 MB at most", timeout=120_000)
    expect(alert).to_contain_text("Nothing was saved. Import a larger catalog with `payrail-embedder import FILE`.")
    expect(page.get_by_role("button", name="Sign out")).to_be_visible()
    take_screenshot(page, tmp_path, "import-too-large.png")
    growth_mb = (peak_memory_kb(backoffice.process.pid) - before) / 1000
    # 100 MB went through; what was kept of it at any moment is bounded well below the limit.
    assert growth_mb < 16, f"the backoffice's peak memory grew by {growth_mb:.0f} MB"
    assert stored(database_url, "Big", "Line") is None
    with psycopg.connect(database_url) as conn:
        assert conn.execute("select count(*) from payrail.provider_methods").fetchone()[0] == len(CATALOG)


def test_messages_a_client_never_reads_are_bounded(backoffice, database_url):
    client = HttpClient(backoffice.url)
    session = http_sign_in(client)
    row = stored(database_url, *ACME)
    for n in range(15):  # saves whose redirect is never followed: each leaves a message for the next page
        form = record_form(ENABLED, row["version"] + n, session.token, urls=[f"https://api.acme.example/v{n}"])
        assert client.post(f"/records/{row['id']}", form, headers={"Origin": client.origin}, cookies=session.cookies).status == 303
    shown = client.get("/records", cookies=session.cookies).body
    assert len(re.findall(r'class="message info" role="status"', shown)) == 10
    assert "as version 16" in shown


# Sessions: how many, and how long.


def test_sessions_are_capped_per_role_and_in_all_and_the_sign_in_page_says_so(browser, registry, database_url, tmp_path):
    with running_backoffice(registry, tmp_path, "--max-sessions", "3", "--max-sessions-per-role", "2") as running:
        client = HttpClient(running.url)
        # One operator signing in again and again, each time without a cookie, as a script would.
        replies = [post_sign_in(client, OPERATOR, PASSWORD) for _ in range(6)]
        assert [r.status for r in replies] == [303, 303, 503, 503, 503, 503]
        assert '"ada_operator" has 2 sessions open, the most one role may hold' in unescape(replies[2].body)
        assert connections_of(database_url, OPERATOR, settles_at=2) == 2
        # Signing in again in a browser that has a session replaces it, within the cap.
        earlier = cookie_value(replies[0].cookies()["payrail_session"])
        again = post_sign_in(client, OPERATOR, PASSWORD, {"payrail_session": earlier})
        assert again.status == 303, again.body
        assert connections_of(database_url, OPERATOR, settles_at=2) == 2

        assert post_sign_in(client, OTHER_OPERATOR, PASSWORD).status == 303
        page = new_page(browser, running)
        sign_in(page, OTHER_OPERATOR, PASSWORD)
        expect(page.get_by_role("alert")).to_contain_text("The backoffice holds as many sessions as it may (3)")
        take_screenshot(page, tmp_path, "sign-in-sessions-full.png")
        page.context.close()
        assert connections_of(database_url, OTHER_OPERATOR, settles_at=1) == 1
        # And the database still has connections for everyone else.
        with psycopg.connect(database_url) as conn:
            assert conn.execute("select 1").fetchone() == (1,)


def test_a_logins_own_connection_limit_refuses_one_more_sign_in_with_postgresqls_words(backoffice, database_url):
    """docs/operations.md: `alter role ada connection limit N` bounds one role whatever the backoffice does."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(sql.SQL("alter role {} connection limit 1").format(sql.Identifier(OPERATOR)))
    try:
        client = HttpClient(backoffice.url)
        first = http_sign_in(client)
        refused = post_sign_in(client, OPERATOR, PASSWORD)
        assert refused.status == 503 and 'too many connections for role "ada_operator"' in unescape(refused.body)
        assert client.get("/records", cookies=first.cookies).status == 200
    finally:
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute(sql.SQL("alter role {} connection limit -1").format(sql.Identifier(OPERATOR)))


@pytest.mark.parametrize("alteration", ["password 'a new passphrase'", "nologin"])
def test_a_changed_credential_ends_the_sessions_at_their_first_request_after_the_recheck_keeping_the_text(registry, database_url, tmp_path, alteration):
    with running_backoffice(registry, tmp_path, "--session-recheck", "1") as running:
        client = HttpClient(running.url)
        saving, browsing = http_sign_in(client), http_sign_in(client)
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute(sql.SQL("alter role {} " + alteration).format(sql.Identifier(OPERATOR)))
        time.sleep(1.5)  # past the recheck interval
        # A save: not saved, and the form comes back with the text typed and why.
        row = stored(database_url, *ACME)
        typed = "Purpose: typed before the credential changed."
        form = record_form(ENABLED, row["version"], saving.token, guidance=typed)
        reply = client.post(f"/records/{row['id']}", form, headers={"Origin": client.origin}, cookies=saving.cookies)
        assert reply.status == 401 and typed in reply.body, reply.body
        assert "your session has ended, because PostgreSQL no longer accepts the password" in reply.body
        assert stored(database_url, *ACME)["guidance"] == ENABLED["guidance"]
        # A page: the sign-in page, saying why.
        reply = client.get("/records", cookies=browsing.cookies)
        assert (reply.status, reply.location) == (303, "/sign-in?lost=1")
        assert "PostgreSQL no longer accepts the password it was opened with" in client.get(reply.location).body
        assert connections_of(database_url, OPERATOR, settles_at=0) == 0
        assert client.get("/records", cookies=saving.cookies).location == "/sign-in?ended=1"
        assert post_sign_in(client, OPERATOR, PASSWORD).status == 403


def test_a_session_ends_at_its_maximum_age_however_busy(registry, database_url, tmp_path):
    with running_backoffice(registry, tmp_path, "--session-max-age", "2") as running:
        client = HttpClient(running.url)
        session = http_sign_in(client)

        def refused() -> Reply | None:
            reply = client.get("/records", cookies=session.cookies)
            return reply if reply.status != 200 else None

        # A request every 0.2 s: never idle.
        assert wait_until(refused, "the session to end at its maximum age", timeout=30, interval=0.2).location == "/sign-in?ended=1"
        assert connections_of(database_url, OPERATOR, settles_at=0) == 0


def test_a_revoked_grant_or_a_dropped_role_takes_effect_on_the_next_request(registry, database_url, tmp_path):
    with running_backoffice(registry, tmp_path) as running:
        client = HttpClient(running.url)
        session = http_sign_in(client)
        row = stored(database_url, *ACME)
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute(sql.SQL("revoke payrail_operator from {}").format(sql.Identifier(OPERATOR)))
        form = record_form(ENABLED, row["version"], session.token, urls=["https://api.acme.example/revoked"])
        reply = client.post(f"/records/{row['id']}", form, headers={"Origin": client.origin}, cookies=session.cookies)
        assert reply.status != 303 and "permission denied" in reply.body, reply.body
        assert stored(database_url, *ACME)["urls"] == row["urls"]

        other = http_sign_in(client, OTHER_OPERATOR)
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute(sql.SQL("drop role {}").format(sql.Identifier(OTHER_OPERATOR)))
        form = record_form(ENABLED, row["version"], other.token, urls=["https://api.acme.example/dropped"])
        reply = client.post(f"/records/{row['id']}", form, headers={"Origin": client.origin}, cookies=other.cookies)
        assert reply.status != 303, reply.body
        assert stored(database_url, *ACME)["urls"] == row["urls"]


# What an operator typed survives the database: a terminated backend, a restart, an outage.


def test_a_form_saved_after_its_backend_was_terminated_goes_through(page, database_url):
    row = stored(database_url, *ACME)
    page.goto(f"/records/{row['id']}")
    typed = ENABLED["guidance"] + "\nTyped while the connection was cut."
    page.get_by_label("Guidance").fill(typed)
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("select pg_terminate_backend(pid) from pg_stat_activity where usename = %s", (OPERATOR,))
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_role("status")).to_contain_text("as version 2")
    assert stored(database_url, *ACME)["guidance"] == typed


@pytest.fixture(scope="module")
def own_server(tmp_path_factory):
    """An embedded PostgreSQL 18 of this module's own, to stop and start under a browser."""
    server = start_embedded(18, tmp_path_factory.mktemp("restarted"))
    try:
        server.prepare_template()  # db/ in a template, and the registry's roles
        create_roles(server.admin_url)
        use_hba_rules(server.admin_url, TEST_HBA)
        yield server
    finally:
        server.stop()


@pytest.fixture
def own_database(own_server):
    url = own_server.create_database()
    yield url
    own_server.drop_database(url)


def test_a_database_restart_or_outage_under_an_open_form_loses_nothing_typed(browser, own_server, own_database, openai_fake, tmp_path):
    database_url = own_database
    env = cli_environment(database_url, openai_fake, tmp_path)
    cli_import(env, tmp_path / "catalog.jsonl", CATALOG)
    with running_backoffice(env, tmp_path) as running:
        page = new_page(browser, running)
        sign_in(page)
        row = stored(database_url, *ACME)
        page.goto(f"/records/{row['id']}")
        guidance = page.get_by_label("Guidance")

        # Restarted between opening the form and saving it: the save goes through.
        guidance.fill(ENABLED["guidance"] + "\nTyped across a restart.")
        own_server._handle.stop()
        own_server._handle.start()
        page.get_by_role("button", name="Save").click()
        expect(page.get_by_role("status")).to_contain_text("as version 2")

        # Down when Save is pressed: the form comes back with the text and says why; then it saves.
        typed = ENABLED["guidance"] + "\nTyped during an outage."
        guidance.fill(typed)
        own_server._handle.stop()
        try:
            page.get_by_role("button", name="Save").click()
            expect(page.get_by_role("alert")).to_contain_text("Not saved. The database cannot be reached now (")
            expect(page.get_by_role("alert")).to_contain_text("Your text is below, unchanged: Save again once the database is back.")
            expect(guidance).to_have_value(typed)
            expect(page.get_by_text(f"Signed in as {OPERATOR}")).to_be_visible()
            take_screenshot(page, tmp_path, "save-database-down.png", full_page=True)
        finally:
            own_server._handle.start()
        page.get_by_role("button", name="Save").click()
        expect(page.get_by_role("status")).to_contain_text("as version 3")
        assert stored(database_url, *ACME)["guidance"] == typed
        page.context.close()


def test_slow_clients_past_the_servers_limit_make_room_and_only_requests_under_way_fill_it(backoffice):
    """Slow clients (a request line and never the rest) hold connections: past server.MAX_CONNECTIONS
    the one that waited longest gives its place to a new one, and an operator is answered. Only
    connections in a request (a sign-in whose body never ends) fill it: then a newcomer is
    answered 503, and once they go, the backoffice answers again."""
    from payrail_embedder.backoffice.server import MAX_CONNECTIONS

    client = HttpClient(backoffice.url)
    held = []
    try:
        for _ in range(MAX_CONNECTIONS + 20):
            sock = socket.create_connection((client.host, client.port))
            sock.sendall(b"GET /sign-in HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # and never the blank line
            held.append(sock)
        assert client.get("/sign-in").status == 200
        for sock in held:
            sock.close()
        head = (
            f"POST /sign-in HTTP/1.1\r\nHost: {client.host}:{client.port}\r\nContent-Type: application/x-www-form-urlencoded\r\n"
            f"Origin: {client.origin}\r\nContent-Length: 1000\r\n\r\nusername="  # and never the rest
        ).encode()
        held = []

        def hold_requests_and_knock() -> bytes | None:
            """Holds MAX_CONNECTIONS sign-ins under way (one the server closed, still waiting when a
            knock came, is opened again), then knocks with a newcomer."""
            held[:] = [sock for sock in held if not closed(sock)]
            while len(held) < MAX_CONNECTIONS:
                held.append(socket.create_connection((client.host, client.port)))
                held[-1].sendall(head)
            return newcomers_answer(client)

        busy = wait_until(hold_requests_and_knock, "503 once every connection is in a request", timeout=30, interval=0.2)
        assert busy.startswith(b"HTTP/1.1 503 Service Unavailable\r\n"), busy
        assert busy.endswith(b"\r\n\r\nThe backoffice is serving as many requests as it may (200); try again in a moment."), busy
    finally:
        for sock in held:
            sock.close()
    wait_until(lambda: client.get("/sign-in").status == 200, "200 once the slow clients went", timeout=30, interval=0.1)


def newcomers_answer(client: HttpClient) -> bytes | None:
    """What a new connection's GET /sign-in reads until the backoffice closes it, if it is the
    answer past the cap (None when it got through). That answer comes before the request is read,
    and the connection is closed with the request unread: the kernel resets it after the answer."""
    with socket.create_connection((client.host, client.port), timeout=10) as sock:
        sock.sendall(f"GET /sign-in HTTP/1.1\r\nHost: {client.host}:{client.port}\r\nConnection: close\r\n\r\n".encode())
        answer = b""
        with contextlib.suppress(ConnectionResetError):
            while chunk := sock.recv(65536):
                answer += chunk
    return answer if answer.startswith(b"HTTP/1.1 503") else None


def closed(sock: socket.socket) -> bool:
    """Whether the backoffice closed sock (which it never answers); closes it too."""
    sock.setblocking(False)
    try:
        gone = sock.recv(1) == b""
    except BlockingIOError:
        gone = False
    except ConnectionResetError:
        gone = True
    sock.setblocking(True)
    if gone:
        sock.close()
    return gone
