"""The door of `mcp --http`, attacked: connections held half-open past its cap and under a low
limit of open files, request heads sent byte by byte, bodies that never end, idle keep-alive,
every connection held in a request, WebSocket upgrades and other ASGI scopes, malformed
requests flooding the log, Host headers naming another address than the one bound, and web
pages in a real browser calling a server on loopback without tokens.

Real `payrail-embedder mcp --http` subprocesses on a real PostgreSQL (18 and 16) and the fake
OpenAI server; raw sockets for what a client would never send. A few hundred sockets prove the
cap; benchmarks/http_door.py measures it at 1,100.
"""

from __future__ import annotations

import json
import select
import socket
import subprocess
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import quote

import anyio
import pytest

from payrail_embedder.base.http_door import HEAD_TIMEOUT, KEEP_ALIVE_TIMEOUT, Door
from payrail_embedder.faces.mcp_server import BODY_TIMEOUT, HttpGate
from payrail_test_support import CLI, REPO
from payrail_test_support.agent_helpers import CATALOG, SEMANTIC_QUERY, as_match
from payrail_test_support.logs import events_among
from payrail_test_support.ports import serve_in_thread, unused_port
from payrail_test_support.remote_agents import McpHttpServer, bearer
from payrail_test_support.waiting import wait_until

STRIPE = [as_match(r) for r in CATALOG[:2]]
# Long enough for every deadline of the door to have passed, with room for a loaded machine.
PAST_THE_DEADLINES = 3 * max(HEAD_TIMEOUT, KEEP_ALIVE_TIMEOUT, BODY_TIMEOUT)


@pytest.fixture
def door_server(agents_env, token_file, tmp_path):
    """A server with tokens and a cap of 100 connections, started with a soft limit of 256 open files."""
    server = McpHttpServer(agents_env, tmp_path / "mcp.log", "--token-file", str(token_file), "--max-connections", "100", open_files=256)
    yield server
    server.stop()


def connect(server: McpHttpServer, sent: bytes = b"") -> socket.socket:
    sock = socket.create_connection((server.address, server.port), timeout=10)
    sock.sendall(sent)
    return sock


def closed_by_server(sock: socket.socket, received: bytearray) -> bool:
    """Whether the server closed sock (what it sent first is added to received); never waits."""
    while select.select([sock], [], [], 0)[0]:
        try:
            data = sock.recv(65536)
        except ConnectionResetError:
            return True
        if not data:
            return True
        received += data
    return False


def head_of(server: McpHttpServer, path: str = "/search?query=Stripe", *headers: str) -> bytes:
    """A request's head but its last blank line."""
    return "".join(f"{line}\r\n" for line in (f"GET {path} HTTP/1.1", f"Host: {server.host_name}:{server.port}", *headers)).encode()


def slow_body(server: McpHttpServer, token: str) -> socket.socket:
    """An agent's POST whose body, declared 100 bytes, stops after 10."""
    head = (
        f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n"
    )
    return connect(server, head.encode() + b'{"jsonrpc"')


def response_of(received: bytes) -> tuple[int, dict]:
    head, _, body = bytes(received).partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


def test_half_open_connections_past_the_cap_make_room_and_an_agent_is_answered(door_server, tokens):
    """300 connections that never finish their heads, against a cap of 100 and a soft limit of 256
    open files: the server raised its limit, closed the 200 that waited longest (and one more for
    the agent), held at most 100, answered the agent, and logged one line."""
    server = door_server
    # An agent's search first, so that the files counted before include the pool's connections to
    # the database: what the attack may add is its connections alone.
    assert server.get("/search?query=Stripe", bearer(tokens["booking-agent"]))[0] == 200
    files_before = server.open_files()
    attackers = [connect(server, head_of(server)) for _ in range(300)]
    status, _, answer = server.get("/search?query=Stripe", bearer(tokens["booking-agent"]))
    assert status == 200 and answer == {"matches": STRIPE}, answer
    closed = wait_until(lambda: sum(closed_by_server(sock, bytearray()) for sock in attackers) >= 201 or None, "the longest waiting to be closed", timeout=30)
    assert closed
    assert server.open_files() <= files_before + 100, (files_before, server.open_files())
    still_open = [sock for sock in attackers if not closed_by_server(sock, bytearray())]
    assert attackers[-1] in still_open and attackers[0] not in still_open  # the newest stay, the oldest made room
    log = server.text()
    assert log.count("event=http_refused") == 1 and "event=http_refused displaced=1" in log, log
    assert "Too many open files" not in log and "Traceback" not in log, log
    for sock in attackers:
        sock.close()


@pytest.mark.slow  # waits out the door's deadlines
def test_heads_however_slow_bodies_that_never_end_and_idle_keep_alive_meet_their_deadlines(door_server, tokens):
    """A connection that says nothing, one that sends its head a byte every half second, one kept
    alive after an answer, and an agent's body that stops: each is closed by the server (the body
    answered 408 first), the one still sending included."""
    server = door_server
    token = tokens["booking-agent"]
    silent = connect(server)
    trickling = connect(server, b"GET /search?query=Stripe HTTP/1.1\r\n")
    kept_alive = connect(server, head_of(server, "/search?query=Stripe", f"Authorization: Bearer {token}") + b"\r\n")
    body = slow_body(server, token)
    received = {sock: bytearray() for sock in (silent, trickling, kept_alive, body)}
    closed_at: dict[socket.socket, float] = {}
    started = time.monotonic()
    while len(closed_at) < len(received) and time.monotonic() - started < PAST_THE_DEADLINES:
        if trickling not in closed_at:
            try:
                trickling.send(b"X")  # a header's name, byte by byte, never ended
            except (BrokenPipeError, ConnectionResetError):
                closed_at[trickling] = time.monotonic() - started
        for sock, data in received.items():
            if sock not in closed_at and closed_by_server(sock, data):
                closed_at[sock] = time.monotonic() - started
        time.sleep(0.5)
    assert set(closed_at) == set(received), closed_at
    assert response_of(received[kept_alive]) == (200, {"matches": STRIPE})
    # On /mcp, the one shape inside a JSON-RPC error (tests/faces/test_http_errors.py walks them all).
    status, answer = response_of(received[body])
    assert (status, answer["error"]["data"]) == (
        408,
        {"error": "invalid_request", "detail": f"the request's body did not all come within {BODY_TIMEOUT} seconds"},
    )
    assert received[silent] == received[trickling] == b""
    assert "Traceback" not in server.text()


@pytest.mark.slow  # waits out the door's deadlines
def test_when_every_connection_is_in_a_request_a_newcomer_is_answered_503_until_one_ends(agents_env, token_file, tokens, tmp_path):
    server = McpHttpServer(agents_env, tmp_path / "mcp.log", "--token-file", str(token_file), "--max-connections", "10")
    try:
        token = tokens["travel-agent"]
        in_requests = [slow_body(server, token) for _ in range(10)]
        wait_until(lambda: server.open_files() >= 10, "the server to hold the ten requests")
        time.sleep(0.5)  # accepted: the server reads their heads as they come
        newcomer = connect(server, head_of(server, "/search?query=Stripe", f"Authorization: Bearer {token}") + b"\r\n")
        received = bytearray()
        wait_until(lambda: closed_by_server(newcomer, received), "the newcomer to be answered")
        status, busy = response_of(received)
        assert status == 503 and busy == {
            "error": "search_unavailable",
            "detail": "the server holds as many connections as it may (10), each in a request; try again",
        }
        # Their bodies' deadline ends the ten requests, and the server answers again.
        wait_until(lambda: all(closed_by_server(sock, bytearray()) for sock in in_requests), "the ten bodies' deadline", timeout=PAST_THE_DEADLINES)
        assert server.get("/search?query=Stripe", bearer(token))[2] == {"matches": STRIPE}
        assert "event=http_refused over_capacity=1" in server.text()
    finally:
        server.stop()


def test_upgrades_and_malformed_requests_are_answered_as_http_and_log_ten_lines_a_minute(door_server, tokens):
    """No WebSocket is ever opened (uvicorn without one, and the gate passes http and lifespan
    scopes only); 40 upgrade requests and 40 malformed ones leave at most ten lines of each kind."""
    server = door_server
    upgrade = ["Connection: Upgrade", "Upgrade: websocket", "Sec-WebSocket-Version: 13", "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ=="]
    for attempt in range(40):
        token = [f"Authorization: Bearer {tokens['booking-agent']}"] if attempt % 2 else []
        sock = connect(server, head_of(server, "/search?query=Stripe", *upgrade, *token) + b"\r\n")
        received = bytearray()
        wait_until(lambda sock=sock, received=received: closed_by_server(sock, received) or b"}" in received, "an answer")
        status, body = response_of(received)
        assert (status, body.get("error")) == ((200, None) if token else (401, "unauthorized")), (status, body)
        sock.close()
        malformed = connect(server, b"GET / HTTP/1.1\r\nHost \x00: nowhere\r\n\r\n")
        wait_until(lambda malformed=malformed: closed_by_server(malformed, bytearray()), "a malformed request's answer")
        malformed.close()
    log = server.text()
    assert 1 <= log.count("Unsupported upgrade request") <= 10, log
    assert 1 <= log.count("Invalid HTTP request received") <= 10, log
    assert server.get("/search?query=Stripe", bearer(tokens["booking-agent"]))[0] == 200


def test_only_http_and_lifespan_scopes_reach_the_application():
    """The gate itself, with an ASGI scope no uvicorn of this server makes: never passed on."""
    reached, sent = [], []

    async def application(scope, receive, send):
        reached.append(scope["type"])

    async def send(message):
        sent.append(message)

    async def receive():
        return {"type": "websocket.connect"}

    async def main():
        gate = HttpGate(application, Door(10, b""), None, ("127.0.0.1", 8471))
        for kind in ("websocket", "webtransport", "lifespan"):
            await gate({"type": kind, "headers": [], "path": "/mcp"}, receive, send)

    anyio.run(main)
    assert reached == ["lifespan"]
    assert sent == [{"type": "websocket.close", "code": 1008}]


@pytest.mark.parametrize(
    "address, answered, refused", [("127.0.0.2", ["127.0.0.2"], ["127.0.0.1", "localhost"]), ("::1", ["[::1]", "localhost"], ["127.0.0.1"])]
)
def test_without_tokens_the_host_names_answered_are_the_bound_addresss(agents_env, tmp_path, address, answered, refused):
    server = McpHttpServer(agents_env, tmp_path / "mcp.log", "--host", address, address=address)
    try:
        for name in answered:
            assert server.get("/search?query=Stripe", host=f"{name}:{server.port}")[2] == {"matches": STRIPE}, name
        shown = f"[{address}]" if ":" in address else address
        for host in [*(f"{name}:{server.port}" for name in refused), shown, f"{shown}:{server.port + 1}", f"evil.example:{server.port}"]:
            status, _, body = server.get("/search?query=Stripe", host=host)
            assert (status, body["detail"]) == (421, f"this server answers on loopback only: ask it at {shown}:{server.port}"), host
    finally:
        server.stop()


def test_the_open_files_a_cap_needs_beyond_the_hard_limit_stop_the_server_at_start(agents_env):
    def low_hard_limit():
        import resource

        resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 2048))

    result = subprocess.run(
        [str(CLI), "mcp", "--http", str(unused_port()), "--max-connections", "5000"],
        env=agents_env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=low_hard_limit,
    )
    assert result.returncode == 2 and result.stderr == (
        "Error: invalid_input: --max-connections 5,000 needs 5,512 open files, and this process may open at most 2,048 "
        "(its hard limit, ulimit -Hn); lower it, or raise the limit (LimitNOFILE= in a systemd unit, ulimit -n in a shell)\n"
    ), result.stderr


class PageServer(BaseHTTPRequestHandler):
    """A web page of another origin that calls the MCP server in every way a page can."""

    page = ""

    def do_GET(self):
        body = self.page.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_a_web_page_cannot_make_a_server_without_tokens_spend_embeddings(browser, agents_env, openai_fake, tmp_path):
    """A page's fetch (cors and no-cors), image, form post and iframe: each refused (403) before the
    query is embedded; the same URL typed in the address bar is answered."""
    server = McpHttpServer(agents_env, tmp_path / "mcp.log")
    search = f"http://127.0.0.1:{server.port}/search?query={quote(SEMANTIC_QUERY)}"
    PageServer.page = f"""<!doctype html><title>a page</title>
<img src="{search}&by=img"><iframe src="{search}&by=iframe"></iframe>
<form method="post" action="http://127.0.0.1:{server.port}/mcp" enctype="text/plain"><input name='{{"jsonrpc":"2.0","x":"' value='"}}'></form>
<script>
  fetch("{search}&by=cors").catch(() => {{}});
  fetch("{search}&by=no-cors", {{mode: "no-cors"}}).catch(() => {{}});
  fetch("http://127.0.0.1:{server.port}/mcp", {{method: "POST", mode: "no-cors", headers: {{"Content-Type": "text/plain"}}, body: "{{}}"}}).catch(() => {{}});
  document.forms[0].submit();
</script>"""
    pages = ThreadingHTTPServer(("127.0.0.1", 0), PageServer)
    stop = serve_in_thread(pages)
    try:
        embedded = openai_fake.embedded_inputs
        context = browser.new_context()
        page = context.new_page()
        page.goto(f"http://127.0.0.1:{pages.server_address[1]}/")
        refusals = wait_until(lambda: events_among(server.text(), "http_refused"), "the first refusal's line")
        assert refusals[0]["cross_origin"] == "1", refusals
        time.sleep(2)  # what else the page sent has come too
        assert openai_fake.embedded_inputs == embedded
        assert "event=search_unavailable" not in server.text()
        # A person typing the URL (Sec-Fetch-Site: none) is answered.
        typed = page.goto(search)
        assert typed is not None and typed.status == 200 and json.loads(typed.text())["matches"], typed
        assert openai_fake.embedded_inputs == embedded + 1
        context.close()
    finally:
        stop()
        server.stop()
