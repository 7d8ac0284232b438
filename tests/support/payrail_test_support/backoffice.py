"""The backoffice under test: a real `payrail-embedder backoffice` subprocess, Debian's chromium
driven by Playwright, operators' PostgreSQL roles, a small catalog, and a plain HTTP client for
the requests a browser would never send (forged cookies, other origins, missing tokens).

Test modules import the fixtures they use from here; the browser, one per module, is conftest's.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlencode, urlsplit

import psycopg
import pytest
from psycopg import sql
from psycopg.rows import dict_row

from payrail_embedder.postgres.connection import connect
from payrail_embedder.postgres.local_server import use_hba_rules
from payrail_test_support import CLI, REPO
from payrail_test_support.cli import cli_import
from payrail_test_support.environments import cli_environment
from payrail_test_support.openai_fake import FakeOpenAI
from payrail_test_support.servers import TestServer, server_names
from payrail_test_support.waiting import wait_until

# Login roles, created once per server (roles belong to the cluster), each with PASSWORD, which
# the server checks: the backoffice signs in no role whose password PostgreSQL did not check.
OPERATOR = "ada_operator"  # payrail_operator and payrail_embedder: what the backoffice needs
OTHER_OPERATOR = "eve_operator"  # the same grants
OPERATOR_ONLY = "cleo_operator_only"  # payrail_operator only
AGENT = "bob_agent"  # payrail_agent only
PASSWORD = "correct horse battery staple"
ROLES = {
    OPERATOR: ("payrail_operator", "payrail_embedder"),
    OTHER_OPERATOR: ("payrail_operator", "payrail_embedder"),
    OPERATOR_ONLY: ("payrail_operator",),
    AGENT: ("payrail_agent",),
}
# The embedded test servers' pg_hba.conf: ROLES give their passwords, as every login but postgres
# does on the embedded default (local_server.EMBEDDED_HBA); the other tests' logins stay trusted.
TEST_HBA = f"""\
local all {",".join(ROLES)} scram-sha-256
local all all trust
local replication all trust
"""

ENABLED = {
    "provider": "Acme Maps",
    "method": "Geocode an address",
    "urls": ["https://api.acme.example/v1/geocode"],
    "docsUrl": "https://docs.acme.example/geocode",
    "guidance": "Purpose: turn a street address into coordinates.\nInstructions: GET /v1/geocode?q=ADDRESS.\nNotes: paid per call.",
    "enabled": True,
}
# ENABLED's key, as stored() takes it.
ACME = (ENABLED["provider"], ENABLED["method"])
DRAFT = {
    "provider": "Acme Maps",
    "method": "Reverse geocode",
    "urls": ["https://api.acme.example/v1/reverse"],
    "docsUrl": None,
    "guidance": "Purpose: turn latitude and longitude into a postal address.\nNotes: paid per call.",
    "enabled": False,
}
WEATHER = {
    "provider": "Globex Weather",
    "method": "Current conditions",
    "urls": [],
    "docsUrl": "https://docs.globex.example/weather",
    "guidance": "Purpose: current weather for a city.\nNotes: free tier.",
    "enabled": True,
}
CATALOG = [ENABLED, DRAFT, WEATHER]


def name(record: dict) -> str:
    return f"{record['provider']} / {record['method']}"


def create_roles(admin_url: str) -> None:
    """The login roles of ROLES with PASSWORD and their grants, made once per server and put back
    for every test (a test may change a password, take a grant or drop a role)."""
    with psycopg.connect(admin_url, autocommit=True) as conn:
        for role, groups in ROLES.items():
            exists = conn.execute("select from pg_roles where rolname = %s", (role,)).fetchone() is not None
            verb = "alter" if exists else "create"
            conn.execute(sql.SQL(verb + " role {} login password {}").format(sql.Identifier(role), sql.Literal(PASSWORD)))
            conn.execute(sql.SQL("grant {} to {}").format(sql.SQL(", ").join(map(sql.Identifier, groups)), sql.Identifier(role)))


def stored(database_url: str, provider: str, method: str) -> dict | None:
    """A record as the database holds it, with its vector and whether the vector is of its content."""
    with connect(database_url) as conn:
        conn.row_factory = dict_row
        return conn.execute(
            """
            select id, version, provider, method, urls, docs_url, guidance, enabled, embedding, embedding_model,
                   embedding_content_hash = content_hash as current_vector, updated_at
            from payrail.provider_methods where provider = %s and method = %s
            """,
            (provider, method),
        ).fetchone()


def history(database_url: str, record_id: int) -> list[dict]:
    with connect(database_url) as conn:
        conn.row_factory = dict_row
        return conn.execute("select * from payrail.provider_method_history where provider_method_id = %s order by id", (record_id,)).fetchall()


@dataclass
class Backoffice:
    process: subprocess.Popen
    url: str  # http://127.0.0.1:PORT (no trailing slash)
    log: Path

    @property
    def output(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_backoffice(env: dict, tmp_path: Path, *args: str) -> Backoffice:
    """`payrail-embedder backoffice --port 0 ARGS` in a subprocess; returns once it answers."""
    log = tmp_path / f"backoffice-{len(list(tmp_path.glob('backoffice-*.log')))}.log"
    with log.open("w") as output:
        process = subprocess.Popen([str(CLI), "backoffice", "--port", "0", *args], env=env, stdout=output, stderr=subprocess.STDOUT, cwd=REPO)
    url = _wait(process, log, "start", lambda: (found := URL_LINE.search(log.read_text())) and found.group(1))
    # The socket is bound before uvicorn listens on it.
    _wait(process, log, "answer", lambda: _answers(url))
    return Backoffice(process, url, log)


@contextlib.contextmanager
def running_backoffice(env: dict, tmp_path: Path, *args: str) -> Iterator[Backoffice]:
    """start_backoffice(env, tmp_path, *args), stopped at the end of the block."""
    running = start_backoffice(env, tmp_path, *args)
    try:
        yield running
    finally:
        running.stop()


URL_LINE = re.compile(r"^Payrail backoffice: (http://\S+?)/?$", flags=re.M)


def _answers(url: str) -> bool:
    try:
        return HttpClient(url).get("/sign-in").status == 200
    except ConnectionRefusedError:
        return False


def _wait(process: subprocess.Popen, log: Path, what: str, ready):
    """ready()'s first true value, checked until the process ends or a minute has passed."""

    def ready_while_running():
        assert process.poll() is None, f"the backoffice exited before it would {what}:\n{log.read_text()}"
        return ready()

    try:
        return wait_until(ready_while_running, lambda: f"the backoffice to {what}:\n{log.read_text()}")
    except AssertionError:
        process.kill()
        process.wait()
        raise


@dataclass
class Reply:
    status: int
    headers: list[tuple[str, str]]
    body: str

    def header(self, name: str) -> str | None:
        return next((value for key, value in self.headers if key.lower() == name.lower()), None)

    def cookies(self) -> dict[str, str]:
        """Set-Cookie values by cookie name (the whole header, attributes included)."""
        return {v.split("=", 1)[0]: v for k, v in self.headers if k.lower() == "set-cookie"}

    @property
    def location(self) -> str | None:
        return self.header("location")


class HttpClient:
    """Plain HTTP requests with exactly the headers given: what an attacker's script or page may send."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        parts = urlsplit(base_url)
        self.host, self.port = parts.hostname, parts.port

    def request(
        self, method: str, path: str, *, form: dict | None = None, body: bytes | None = None, headers: dict | None = None, cookies: dict | None = None
    ) -> Reply:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=60)
        all_headers = dict(headers or {})
        if cookies:
            all_headers["Cookie"] = "; ".join(f"{k}={v}" for k, v in cookies.items())
        if form is not None:
            body = urlencode(form)
            all_headers["Content-Type"] = "application/x-www-form-urlencoded"
        conn.request(method, path, body=body, headers=all_headers)
        response = conn.getresponse()
        reply = Reply(response.status, response.getheaders(), response.read().decode("utf-8", errors="replace"))
        conn.close()
        return reply

    def post_file(self, path: str, fields: dict, file_field: str, filename: str, data: bytes, **kwargs) -> Reply:
        """A multipart/form-data POST of fields and one file, as a browser's file upload sends it."""
        boundary = "payrail-test-boundary-7d3c"
        parts = [f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode() for k, v in fields.items()]
        parts.append(
            f'--{boundary}\r\nContent-Disposition: form-data; name="{file_field}"; filename="{filename}"\r\nContent-Type: application/x-ndjson\r\n\r\n'.encode()
            + data
            + b"\r\n"
        )
        body = b"".join(parts) + f"--{boundary}--\r\n".encode()
        headers = {**kwargs.pop("headers", {}), "Content-Type": f"multipart/form-data; boundary={boundary}"}
        return self.request("POST", path, body=body, headers=headers, **kwargs)

    def get(self, path: str, **kwargs) -> Reply:
        return self.request("GET", path, **kwargs)

    def post(self, path: str, form: dict, **kwargs) -> Reply:
        return self.request("POST", path, form=form, **kwargs)

    @property
    def origin(self) -> str:
        return f"http://{self.host}:{self.port}"


def cookie_value(set_cookie: str) -> str:
    return set_cookie.split(";", 1)[0].split("=", 1)[1]


def csrf_token(html: str) -> str:
    return re.search(r'name="csrf_token" value="([^"]+)"', html).group(1)


@dataclass
class HttpSession:
    """A signed-in session driven over plain HTTP: its cookie and its CSRF token."""

    client: HttpClient
    cookie: str
    token: str

    @property
    def cookies(self) -> dict:
        return {"payrail_session": self.cookie}


def post_sign_in(client: HttpClient, role: str = OPERATOR, password: str = PASSWORD, cookies: dict | None = None, headers: dict | None = None) -> Reply:
    """The answer to the sign-in form posted as a browser posts it, with the form's own cookie
    (a given payrail_sign_in cookie, or the one the form came with) and any other cookies (a
    session's: the form was left open in another tab). headers: more of them (a User-Agent)."""
    cookies = dict(cookies or {})
    form_cookie = {k: v for k, v in cookies.items() if k == "payrail_sign_in"}
    page = client.get("/sign-in", cookies=form_cookie)
    cookies.setdefault("payrail_sign_in", cookie_value(page.cookies()["payrail_sign_in"]))
    return client.post(
        "/sign-in",
        {"csrf_token": csrf_token(page.body), "username": role, "password": password},
        headers={**(headers or {}), "Origin": client.origin},
        cookies=cookies,
    )


def http_sign_in(client: HttpClient, role: str = OPERATOR, password: str = PASSWORD, headers: dict | None = None) -> HttpSession:
    reply = post_sign_in(client, role, password, headers=headers)
    assert reply.status == 303 and reply.location == "/records", (reply.status, reply.body)
    cookie = cookie_value(reply.cookies()["payrail_session"])
    records = client.get("/records", cookies={"payrail_session": cookie})
    return HttpSession(client, cookie, csrf_token(records.body))


def connections_of(database_url: str, role: str = OPERATOR, *, settles_at: int | None = None) -> int:
    """How many connections role has to the database. settles_at: a count the caller expects once
    closed connections are gone (a backend leaves pg_stat_activity a moment after its client
    closes), waited for up to 30 seconds."""
    with psycopg.connect(database_url, autocommit=True) as conn:

        def count() -> int:
            return conn.execute("select count(*) from pg_stat_activity where usename = %s and datname = current_database()", (role,)).fetchone()[0]

        if settles_at is None:
            return count()
        wait_until(lambda: count() == settles_at, lambda: f"{settles_at} connections of {role}, not {count()}", timeout=30)
        return settles_at


def confirmation(page: str) -> dict:
    """What a Restore's confirmation page posts (but its CSRF token): the entry, the version it
    measured, and the digest of what it showed."""
    return dict(re.findall(r'name="(history_id|version|previewed)" value="([^"]*)"', page))


def record_form(record: dict, version: int, token: str, **changes) -> dict:
    """The record page's form fields as the browser posts them."""
    record = {**record, **changes}
    form = {
        "csrf_token": token,
        "version": str(version),
        "provider": record["provider"],
        "method": record["method"],
        "urls": "\r\n".join(record["urls"]),
        "docsUrl": record["docsUrl"] or "",
        "guidance": record["guidance"].replace("\n", "\r\n"),
    }
    if record["enabled"]:
        form["enabled"] = "on"
    return form


def use_operator_logins(server: TestServer, database_url: str) -> None:
    """The login roles of ROLES, asked for their passwords (a Docker server asks every login already)."""
    create_roles(database_url)
    if server.name.startswith("pg"):
        use_hba_rules(server.admin_url, TEST_HBA)


# Fixtures


@pytest.fixture
def operator_logins(server, database_url) -> None:
    use_operator_logins(server, database_url)


@pytest.fixture
def registry(cli_env, operator_logins, tmp_path) -> dict:
    """The test database holding CATALOG (imported through the CLI), with the login roles made."""
    cli_import(cli_env, tmp_path / "catalog.jsonl", CATALOG)
    return cli_env


@pytest.fixture
def backoffice(registry, tmp_path):
    running = start_backoffice(registry, tmp_path)
    yield running
    running.stop()


@dataclass
class SharedBackoffice:
    running: Backoffice
    database_url: str

    @property
    def client(self) -> HttpClient:
        return HttpClient(self.running.url)


# The shared backoffice holds every session its tests sign in, none of them ended: more than the
# limits of the backoffice command's defaults (5 per role).
SHARED_SESSION_LIMITS = ("--max-sessions", "100", "--max-sessions-per-role", "100")


@pytest.fixture(scope="module", params=server_names())
def shared_backoffice(request, servers, tmp_path_factory) -> Iterator[SharedBackoffice]:
    """One backoffice per server over a registry of CATALOG with the login roles made, shared by a
    module's tests that change nothing in it (refused requests, headers, sign-ins): a backoffice
    started for each of them was most of their time. A test that saves, ends sessions or counts
    connections takes a backoffice of its own (the backoffice fixture)."""
    server = servers(request.param)
    directory = tmp_path_factory.mktemp("shared-backoffice")
    database_url = server.create_database()
    openai_fake = FakeOpenAI().start()
    try:
        env = cli_environment(database_url, openai_fake, directory)
        use_operator_logins(server, database_url)
        cli_import(env, directory / "catalog.jsonl", CATALOG)
        with running_backoffice(env, directory, *SHARED_SESSION_LIMITS) as running:
            yield SharedBackoffice(running, database_url)
    finally:
        openai_fake.stop()
        server.drop_database(database_url)


def new_page(browser, backoffice: Backoffice, **context_options):
    """A page in a browser context of its own (its own cookies: another browser, as the backoffice
    sees it); context_options: Playwright's, e.g. user_agent."""
    context = browser.new_context(base_url=backoffice.url, viewport={"width": 1280, "height": 900}, **context_options)
    context.set_default_timeout(30_000)
    return context.new_page()


def sign_in(page, role: str = OPERATOR, password: str = PASSWORD) -> None:
    page.goto("/sign-in")
    page.get_by_label("Username").fill(role)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in").click()


@pytest.fixture
def page(browser, backoffice):
    """A browser page signed in as OPERATOR, on the records list."""
    from playwright.sync_api import expect

    page = new_page(browser, backoffice)
    sign_in(page)
    expect(page.get_by_role("heading", name="Records", exact=True)).to_be_visible()
    yield page
    page.context.close()


def take_screenshot(page, tmp_path: Path, name: str, **options) -> None:
    """A screenshot for the docs, into PAYRAIL_SCREENSHOT_DIR when set (e.g. docs/), else tmp_path.

    Headless chromium now and then answers "Unable to capture screenshot" (seen once in a CI run);
    the picture is documentation, not behaviour under test, so it gets a second try."""
    from playwright.sync_api import Error as PlaywrightError

    directory = Path(os.environ.get("PAYRAIL_SCREENSHOT_DIR") or tmp_path)
    directory.mkdir(parents=True, exist_ok=True)
    try:
        page.screenshot(path=directory / name, **options)
    except PlaywrightError:
        page.screenshot(path=directory / name, **options)
