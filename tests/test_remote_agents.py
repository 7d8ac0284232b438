"""Remote agents: `mcp --http` beyond loopback behind agents' bearer tokens, its GET /search and
OpenAPI document answering as the MCP tool does, and `agent add` logins that may only search.
Real subprocesses, real HTTP (raw http.client where a header is the attack), the SDK's own client,
a real PostgreSQL and the fake OpenAI server."""

from __future__ import annotations

import json
import os
import pwd
import subprocess
from urllib.parse import quote, unquote_to_bytes, urlsplit

import anyio
import jsonschema
import psycopg
import pytest

from payrail_embedder.postgres.connection import connect
from payrail_embedder.postgres.local_server import use_hba_rules
from payrail_test_support import CLI
from payrail_test_support.agent_helpers import CATALOG, SEMANTIC_QUERY, as_match, expected_semantic_matches
from payrail_test_support.cli import run_cli, run_cli_subprocess
from payrail_test_support.environments import cli_environment
from payrail_test_support.pgbouncer import PASSWORD as PGBOUNCER_PASSWORD
from payrail_test_support.pgbouncer import start_pgbouncer
from payrail_test_support.ports import unused_port
from payrail_test_support.remote_agents import TOOL, McpHttpServer, bearer, call_tool, write_tokens
from payrail_test_support.servers import embedded_bin

ALL_INTERFACES = "0.0.0.0"
NOBODY = pwd.getpwnam("nobody").pw_uid


@pytest.fixture
def served(agents_env, token_file, tmp_path):
    server = McpHttpServer(agents_env, tmp_path / "mcp.log", "--host", ALL_INTERFACES, "--token-file", str(token_file))
    yield server
    server.stop()


def test_beyond_loopback_the_server_will_not_start_without_tokens(agents_env):
    result = run_cli(agents_env, "mcp", "--http", str(unused_port()), "--host", ALL_INTERFACES)
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith(f"Error: invalid_input: --host {ALL_INTERFACES} is beyond loopback"), result.stderr
    assert "--token-file FILE" in result.stderr
    # --host and --token-file belong to --http.
    stdio = run_cli(agents_env, "mcp", "--host", ALL_INTERFACES)
    assert stdio.returncode == 2 and "--host, --token-file and --max-connections go with --http PORT" in stdio.stderr, stdio.stderr


@pytest.mark.parametrize(
    "lines, mode, problem",
    [
        (["booking-agent " + "a" * 64], 0o644, "can be read or written by other users (mode 644); chmod 600"),
        (["booking-agent " + "a" * 64], 0o620, "can be read or written by other users (mode 620); chmod 600"),
        (["# none"], 0o600, "names no agent"),
        (["booking-agent short-token-1"], 0o600, ":1: the token of booking-agent must be 32 to 512 visible ASCII characters"),
        (["booking-agent " + "b" * 64, "", "travel-agent " + "b" * 64], 0o600, ":3: travel-agent has the token of booking-agent"),
        (["booking-agent " + "c" * 64, "booking-agent " + "d" * 64], 0o600, ":2: booking-agent has a line already"),
        (["booking agent " + "e" * 64], 0o600, ":1: write one agent per line as NAME TOKEN"),
        (["<script> " + "f" * 64], 0o600, ":1: an agent's name is 1 to 63 letters"),
    ],
)
def test_a_token_file_that_cannot_be_trusted_stops_the_server_naming_the_line_never_the_token(agents_env, tmp_path, lines, mode, problem):
    path = write_tokens(tmp_path / "agent-tokens", lines, mode)
    result = run_cli(agents_env, "mcp", "--http", str(unused_port()), "--host", ALL_INTERFACES, "--token-file", str(path))
    assert result.returncode == 2 and result.stderr.startswith(f"Error: invalid_input: {path}"), result.stderr
    assert problem in result.stderr, result.stderr
    for line in lines:
        for word in line.split()[1:]:
            assert word not in result.stderr or len(word) < 8, word  # a token, even a bad one, is never printed


def test_every_request_needs_an_agents_token_and_nothing_else_passes(served, tokens):
    token = tokens["booking-agent"]
    ok_status, _, answer = served.get("/search?query=Stripe", bearer(token))
    assert ok_status == 200 and answer == {"matches": [as_match(r) for r in CATALOG[:2]]}, answer

    # Each refusal says what was wrong, in RFC 6750's challenge too (no error for a request that presented no token).
    none = ("", "present an agent's token in an Authorization header: Bearer TOKEN")
    wrong = (', error="invalid_token"', "the bearer token is not one of this server's agents' tokens (mistyped, or revoked?)")
    refusals = {
        "no header": ({}, none),
        "a wrong token": (bearer("x" * 64), wrong),
        "another scheme": ({"Authorization": f"Basic {token}"}, none),
        "a token one character short": (bearer(token[:-1]), wrong),
        "a token and more": (bearer(token + "0"), wrong),
        "two headers, one right": (
            [("Authorization", f"Bearer {token}"), ("Authorization", "Bearer " + "y" * 64)],
            (', error="invalid_request"', "give one Authorization header, not several: Bearer TOKEN"),
        ),
        "bytes that are not ASCII": ({"Authorization": "Bearer " + "\u00e9" * 64}, wrong),
        "a header of 40 KB": (bearer("z" * 40_000), wrong),
    }
    for attack, (headers, (challenge, detail)) in refusals.items():
        status, response_headers, body = served.get("/search?query=Stripe", headers)
        assert status == 401, (attack, status, body)
        assert response_headers["www-authenticate"] == 'Bearer realm="payrail-agent-search"' + challenge, attack
        assert body == {"error": "unauthorized", "detail": detail}, attack
    # A token in the URL is never read; the MCP endpoint and the OpenAPI document are guarded alike.
    assert served.get(f"/search?query=Stripe&access_token={token}")[0] == 401
    assert served.get("/openapi.json")[0] == 401
    assert served.get("/mcp")[0] == 401
    # The SDK's client, refused at its first request, says so in the server's words (its handshake's
    # error comes wrapped in the SDK's task groups), and carries the one shape as the error's data.
    with pytest.raises(ExceptionGroup) as refused:
        call_tool(served.port, None, "Stripe")
    error = refused.value
    while isinstance(error, ExceptionGroup):
        error = error.exceptions[0]
    assert str(error) == f"401 unauthorized: {none[1]}" and error.error.data == {"error": "unauthorized", "detail": none[1]}, error
    # A header far past any real one is refused by the HTTP layer; the server lives on.
    try:
        oversized = served.get("/search?query=Stripe", bearer("z" * 200_000))[0]
    except ConnectionResetError:
        oversized = "closed while still sending"
    assert oversized in (400, 431, "closed while still sending"), oversized
    assert served.get("/search?query=Stripe", bearer(token))[0] == 200


def test_search_over_http_answers_exactly_as_the_tool_does(served, tokens, openai_fake):
    token = tokens["travel-agent"]
    for query in ("stripe", SEMANTIC_QUERY):
        status, _, answer = served.get(f"/search?query={quote(query)}", bearer(token))
        tool = call_tool(served.port, token, query)
        assert status == 200 and not tool.is_error
        assert answer == tool.structured_content, query
    assert answer == {"matches": expected_semantic_matches(SEMANTIC_QUERY)}

    # The tool's errors, with their status: the query's fault 400, the services' 503.
    for query in ("", "x" * 2001, "\x00"):
        status, _, error = served.get(f"/search?query={quote(query)}", bearer(token))
        tool = call_tool(served.port, token, query)
        assert status == 400 and tool.is_error and error == json.loads(tool.content[0].text), (query, error)
        assert error["error"] == "invalid_query"
    missing = served.get("/search", bearer(token))
    assert missing[0] == 400 and missing[2] == {"error": "invalid_query", "detail": "the query is missing: GET /search?query=what+you+need"}
    twice = served.get("/search?query=a&query=b", bearer(token))
    assert twice[0] == 400 and twice[2] == {"error": "invalid_query", "detail": "give one query, not 2"}
    # A query of 2,000 characters fits in the URL, percent-encoded (up to 24 KB).
    long_query = "\u4e2d" * 2000
    assert served.get(f"/search?query={quote(long_query)}", bearer(token))[0] == 200

    openai_fake.behaviour = "500"
    status, _, outage = served.get(f"/search?query={quote(SEMANTIC_QUERY)}", bearer(token))
    tool = call_tool(served.port, token, SEMANTIC_QUERY)
    assert status == 503 and outage["error"] == "search_unavailable" == json.loads(tool.content[0].text)["error"], outage
    assert served.get("/search?query=Stripe", bearer(token))[0] == 200  # exact names need no embedding


def test_the_openapi_document_describes_what_search_answers(served, tokens, openai_fake):
    token = tokens["booking-agent"]
    status, _, document = served.get("/openapi.json", bearer(token))
    assert status == 200 and document["openapi"] == "3.1.0"
    operation = document["paths"]["/search"]["get"]
    assert operation["operationId"] == TOOL
    assert [(p["name"], p["in"], p["required"], p["schema"]["maxLength"]) for p in operation["parameters"]] == [("query", "query", True, 2000)]
    assert document["components"]["securitySchemes"]["bearer"] == {"type": "http", "scheme": "bearer"}
    # servers: the URL the request reached, by the address or the name it was asked at; https where
    # a reverse proxy on this machine says so. A Host that names no server is never echoed.
    assert document["servers"] == [{"url": f"http://127.0.0.1:{served.port}"}]
    assert list(document)[:3] == ["openapi", "info", "servers"]
    by_name = served.get("/openapi.json", bearer(token), host=f"localhost:{served.port}")[2]
    assert by_name["servers"] == [{"url": f"http://localhost:{served.port}"}]
    proxied = served.get("/openapi.json", {**bearer(token), "X-Forwarded-Proto": "https"}, host="registry.example.com")[2]
    assert proxied["servers"] == [{"url": "https://registry.example.com"}]
    for host in ('evil"><script>', "a b", "registry.example.com/path", "user@registry.example.com"):
        assert served.get("/openapi.json", bearer(token), host=host)[2]["servers"] == [{"url": f"http://127.0.0.1:{served.port}"}], host
    # Real answers and errors validate against the schemas it gives for their status.
    registry = {"$id": "urn:payrail-openapi", **document}

    def validates(status_code: str, body: dict) -> None:
        schema = {"$ref": operation["responses"][status_code]["content"]["application/json"]["schema"]["$ref"]}
        jsonschema.validate(body, {**registry, **schema})

    validates("200", served.get(f"/search?query={quote(SEMANTIC_QUERY)}", bearer(token))[2])
    validates("400", served.get("/search?query=", bearer(token))[2])
    validates("401", served.get("/search?query=Stripe")[2])
    with pytest.raises(jsonschema.ValidationError):
        validates("200", {"matches": [{"provider": "A"}] * 4})  # more than three, and fields missing


def test_a_token_deleted_from_the_file_is_refused_at_its_next_request_without_a_restart(served, token_file, tokens):
    booking, travel = tokens["booking-agent"], tokens["travel-agent"]
    assert served.get("/search?query=Stripe", bearer(booking))[0] == 200
    write_tokens(token_file, [f"travel-agent {travel}"])
    assert served.get("/search?query=Stripe", bearer(booking))[0] == 401
    assert served.get("/search?query=Stripe", bearer(travel))[0] == 200
    # A file spoilt by an edit lets no one in, and the log says why; fixed, it works again.
    write_tokens(token_file, [f"travel-agent {travel}", "oops"])
    assert served.get("/search?query=Stripe", bearer(travel))[0] == 401
    assert "event=token_file_refused" in served.text() and "NAME TOKEN" in served.text()
    assert travel not in served.text()
    token_file.unlink()
    assert served.get("/search?query=Stripe", bearer(travel))[0] == 401
    write_tokens(token_file, [f"booking-agent {booking}"])
    assert served.get("/search?query=Stripe", bearer(booking))[0] == 200


def test_a_token_file_others_may_read_or_another_user_owns_stops_being_trusted_while_serving(served, token_file, tokens):
    """A chmod or a chown changes no byte of the file: the server sees it all the same, at the next
    request, as it would have refused the file at start; set right again, the file is trusted again."""
    token = tokens["booking-agent"]
    assert served.get("/search?query=Stripe", bearer(token))[0] == 200
    for mode in (0o640, 0o604, 0o620):
        token_file.chmod(mode)
        assert served.get("/search?query=Stripe", bearer(token))[0] == 401, oct(mode)
        token_file.chmod(0o600)
        assert served.get("/search?query=Stripe", bearer(token))[0] == 200, oct(mode)
    os.chown(token_file, NOBODY, -1)
    assert served.get("/search?query=Stripe", bearer(token))[0] == 401
    os.chown(token_file, os.geteuid(), -1)
    assert served.get("/search?query=Stripe", bearer(token))[0] == 200
    log = served.text()
    assert f"can be read or written by other users (mode 640); chmod 600 {token_file}" in log, log
    assert f"belongs to another user (uid {NOBODY}), who could change it" in log, log
    assert token not in log


def test_a_token_file_another_user_owns_stops_the_server_as_ssh_refuses_a_key(agents_env, token_file):
    os.chown(token_file, NOBODY, -1)
    result = run_cli(agents_env, "mcp", "--http", str(unused_port()), "--host", ALL_INTERFACES, "--token-file", str(token_file))
    assert result.returncode == 2, result.stderr
    assert result.stderr == (
        f"Error: invalid_input: {token_file}: the token file belongs to another user (uid {NOBODY}), who could change it; "
        f"it must be owned by the user the server runs as (uid {os.geteuid()})\n"
    )


def test_no_session_outlives_a_request_so_a_revoked_token_is_refused_at_the_clients_next_call(served, token_file, tokens):
    """Stateless MCP: an agent's client that has made its handshake and called the tool holds
    nothing on the server, and the call after its token is deleted is refused like any request."""
    from mcp.client import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client
    from mcp.shared.exceptions import MCPError

    booking, travel = tokens["booking-agent"], tokens["travel-agent"]

    async def main():
        http = create_mcp_http_client(headers=bearer(booking))
        async with http, Client(streamable_http_client(f"http://127.0.0.1:{served.port}/mcp", http_client=http)) as client:
            answered = await client.call_tool(TOOL, {"query": "Stripe"})
            write_tokens(token_file, [f"travel-agent {travel}"])
            with pytest.raises(MCPError) as refused:
                await client.call_tool(TOOL, {"query": "Stripe"})
            return answered, refused.value

    answered, refused = anyio.run(main)
    assert answered.structured_content == {"matches": [as_match(r) for r in CATALOG[:2]]}
    # The SDK raises the refusal in the server's words (an MCPError, its data the one shape).
    assert str(refused) == "401 unauthorized: the bearer token is not one of this server's agents' tokens (mistyped, or revoked?)", refused
    assert refused.error.data["error"] == "unauthorized", refused
    assert "event=http_refused unauthorized=1" in served.text()  # refused at the gate, its first refusal
    # No session ID is ever given, and no stream is held open for server-sent messages.
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    }
    status, headers, _ = served.post("/mcp", initialize, bearer(travel))
    assert status == 200 and "mcp-session-id" not in headers, headers
    status, headers, body = served.get("/mcp", {**bearer(travel), "Accept": "text/event-stream"})
    assert status == 405 and headers["allow"] == "POST" and body["error"]["data"]["error"] == "invalid_request", body


@pytest.mark.parametrize("encoded", ["%FF", "caf%E9", "%C3%28", "%ED%A0%80", "Stripe%80"])
def test_search_over_http_refuses_a_query_that_is_not_utf8_as_the_command_line_does(served, agents_env, tokens, encoded):
    """Bytes that are not UTF-8 are never searched for as U+FFFD (what a lenient decoder makes of them)."""
    status, _, error = served.get(f"/search?query={encoded}", bearer(tokens["booking-agent"]))
    command_line = run_cli_subprocess(agents_env, "search", "--json", os.fsdecode(unquote_to_bytes(encoded)))
    assert status == 400 and command_line.returncode == 2, (status, command_line.stderr)
    assert error == json.loads(command_line.stdout), error
    assert error["detail"].startswith("query is not valid Unicode text (a lone surrogate"), error
    assert served.get("/search?query=caf%C3%A9", bearer(tokens["booking-agent"]))[0] == 200


def test_on_loopback_no_token_is_asked_and_a_foreign_host_name_is_refused(agents_env, tmp_path):
    server = McpHttpServer(agents_env, tmp_path / "mcp.log")
    try:
        assert server.text().startswith(f"serving MCP over streamable HTTP at http://127.0.0.1:{server.port}/mcp and GET /search")
        assert server.get("/search?query=Stripe")[0] == 200
        assert server.get("/search?query=Stripe", host=f"localhost:{server.port}")[0] == 200
        for host in (f"evil.example:{server.port}", "evil.example", f"127.0.0.1.evil.example:{server.port}"):
            status, _, body = server.get("/search?query=Stripe", host=host)
            assert status == 421 and body["detail"] == f"this server answers on loopback only: ask it at 127.0.0.1:{server.port}", host
    finally:
        server.stop()


def role(database_url: str, name: str) -> dict | None:
    with connect(database_url) as conn:
        row = conn.execute(
            """select r.rolconnlimit, r.rolconfig, array(select g.rolname::text from pg_auth_members m join pg_roles g on g.oid = m.roleid
                      where m.member = r.oid order by 1), a.rolpassword is not null
               from pg_roles r join pg_authid a on a.oid = r.oid where r.rolname = %s""",
            (name,),
        ).fetchone()
    return None if row is None else {"limit": row[0], "settings": sorted(row[1] or []), "grants": row[2], "password": row[3]}


def test_agent_add_makes_a_login_that_can_search_and_read_nothing(agents_env, database_url):
    result = subprocess.run(
        [str(CLI), "agent", "add", "booking_agent", "--password-stdin"],
        input="a long passphrase\n",
        env=agents_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("created login booking_agent with a password, granted payrail_agent only, at most 20 connections"), result.stdout
    url = printed_url(result.stdout)
    assert role(database_url, "booking_agent") == {
        "limit": 20,
        "settings": ["idle_in_transaction_session_timeout=10s", "statement_timeout=2s"],
        "grants": ["payrail_agent"],
        "password": True,
    }
    with psycopg.connect(url, password="a long passphrase") as conn:
        assert conn.execute("select current_user").fetchone() == ("booking_agent",)
        assert conn.execute("select provider from payrail.search_provider_methods('Stripe')").fetchall()
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("select * from payrail.provider_methods")

    again = run_cli(agents_env, "agent", "add", "booking_agent", "--no-password", "--connection-limit", "5", "--statement-timeout", "1500ms", "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout) == {
        "login": "booking_agent",
        "created": False,
        "url": url,
        "grants": ["payrail_agent"],
        "otherRoles": [],
        "connectionLimit": 5,
        "statementTimeout": "1500ms",
        "idleInTransactionTimeout": "10s",
    }
    assert role(database_url, "booking_agent") == {
        "limit": 5,
        "settings": ["idle_in_transaction_session_timeout=10s", "statement_timeout=1500ms"],
        "grants": ["payrail_agent"],
        "password": False,
    }


def test_agent_add_never_makes_an_agent_of_a_role_that_reads_more_and_changes_nothing_on_bad_input(agents_env, database_url):
    operator = subprocess.run(
        [str(CLI), "operator", "add", "ada", "--password-stdin"], input="a long passphrase\n", env=agents_env, capture_output=True, text=True, timeout=120
    )
    assert operator.returncode == 0, operator.stderr
    refused = run_cli(agents_env, "agent", "add", "ada", "--no-password")
    assert refused.returncode == 2 and "ada cannot become an agent's login: it is a member of payrail_embedder, which reads drafts" in refused.stderr, (
        refused.stderr
    )
    assert "payrail_agent" not in role(database_url, "ada")["grants"]
    with connect(database_url) as conn:
        superuser = conn.execute("select current_user").fetchone()[0]
    refused = run_cli(agents_env, "agent", "add", superuser, "--no-password")
    assert refused.returncode == 2 and f"{superuser} cannot become an agent's login: it is a superuser" in refused.stderr, refused.stderr

    bad = run_cli(agents_env, "agent", "add", "timed_agent", "--no-password", "--statement-timeout", "forever")
    assert bad.returncode == 2 and 'invalid value for parameter "statement_timeout": "forever"' in bad.stderr, bad.stderr
    assert "nothing was changed" in bad.stderr and role(database_url, "timed_agent") is None
    empty = subprocess.run(
        [str(CLI), "agent", "add", "quiet_agent", "--password-stdin"], input="\n", env=agents_env, capture_output=True, text=True, timeout=120
    )
    assert empty.returncode == 2 and "the password is empty" in empty.stderr and role(database_url, "quiet_agent") is None
    both = run_cli(agents_env, "agent", "add", "x", "--no-password", "--password-stdin")
    assert both.returncode == 2 and "choose one" in both.stderr

    # A name is an identifier, never SQL.
    hostile = 'x"; drop table payrail.provider_methods; --'
    made = run_cli(agents_env, "agent", "add", hostile, "--no-password")
    assert made.returncode == 0, made.stderr
    assert role(database_url, hostile)["grants"] == ["payrail_agent"]
    with connect(database_url) as conn:
        assert conn.execute("select count(*) from payrail.provider_methods").fetchone()[0] == len(CATALOG)


def printed_url(stdout: str) -> str:
    """The URL agent add's text names for the login."""
    line = stdout.splitlines()[1]
    assert line.startswith("agents connect with postgresql://"), stdout
    return line.split()[3]


@pytest.fixture
def scram_registry(own_server, registry_url) -> str:
    """A registry on a server of the module's own (18 and 16) that asks every login but postgres for
    its password (scram-sha-256), as the embedded default does."""
    use_hba_rules(own_server.handle.get_uri("postgres"), "local all postgres trust\nlocal all all scram-sha-256\n")
    return registry_url


def test_the_url_agent_add_prints_connects_as_the_login_with_its_password_given_apart(scram_registry, openai_fake, tmp_path):
    """Over the server's Unix socket: postgresql://NAME@/DATABASE?host=DIRECTORY&port=PORT, every
    part percent-encoded, which psql and psycopg read alike; PostgreSQL checks the password."""
    env = cli_environment(scram_registry, openai_fake, tmp_path)
    name, password = "booking agent/é", "a long passphrase"
    made = run_cli(env, "agent", "add", name, "--password-stdin", input=password + "\n")
    assert made.returncode == 0, made.stderr
    url = printed_url(made.stdout)
    assert made.stdout.splitlines()[1].endswith(f"{url} (the password apart: in PGPASSWORD or ~/.pgpass)"), made.stdout
    with psycopg.connect(scram_registry) as conn:
        socket_dir, port, database = conn.info.host, conn.info.port, conn.info.dbname
    assert url == f"postgresql://booking%20agent%2F%C3%A9@/{database}?host={socket_dir}&port={port}", url
    as_json = run_cli(env, "agent", "add", name, "--password-stdin", "--json", input=password + "\n")
    assert json.loads(as_json.stdout)["url"] == url and password not in made.stdout + as_json.stdout
    assert "password" not in psycopg.conninfo.conninfo_to_dict(url)

    psql = embedded_bin(18) / "psql"
    clean = {key: value for key, value in os.environ.items() if not key.startswith("PG")}
    for given, answered in ((password, True), ("another passphrase", False), (None, False)):
        result = subprocess.run(
            [str(psql), "-X", "-w", "-At", "-c", "select current_user, current_database()", url],
            env=clean | ({"PGPASSWORD": given} if given else {}),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert (result.returncode == 0) == answered, (given, result.stderr)
        if answered:
            assert result.stdout == f"{name}|{database}\n", result.stdout
        else:
            assert "password" in result.stderr, result.stderr
    with psycopg.connect(url, password=password) as conn:
        assert conn.execute("select current_user").fetchone() == (name,)
        assert conn.execute("select payrail.query_takes_name_path('Stripe')").fetchone() == (False,)  # an empty registry
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("select * from payrail.provider_methods")


def test_through_a_network_address_the_url_names_its_host_port_and_sslmode(server, database_url, openai_fake, tmp_path):
    """Over TCP (here PgBouncer on 127.0.0.1, which checks the password): postgresql://NAME@HOST:PORT/DATABASE,
    and the sslmode the command's own connection asked for."""
    bouncer = start_pgbouncer(server.admin_url)
    try:
        env = cli_environment(bouncer.through(database_url) + "?sslmode=disable", openai_fake, tmp_path)
        made = run_cli(env, "agent", "add", "tcp_agent", "--password-stdin", "--json", input=PGBOUNCER_PASSWORD + "\n")
        assert made.returncode == 0, made.stderr
        url = json.loads(made.stdout)["url"]
        assert url == f"postgresql://tcp_agent@127.0.0.1:{bouncer.port}{urlsplit(database_url).path}?sslmode=disable", url
        bouncer.allow("tcp_agent")
        with psycopg.connect(url, password=PGBOUNCER_PASSWORD) as conn:
            assert conn.execute("select current_user").fetchone() == ("tcp_agent",)
        with pytest.raises(psycopg.OperationalError, match="authentication failed"):
            psycopg.connect(url, password="another passphrase").close()
    finally:
        bouncer.stop()
