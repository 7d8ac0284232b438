"""Every error answer of `mcp --http`, walked: one shape whoever makes it (the gate, the door,
GET /search, the MCP SDK, Starlette, a failure of the server's own). On every path but /mcp the
body is {"error": CODE, "detail": ...}, the OpenAPI document's Error; on /mcp the same is the
data of a JSON-RPC error whose message says it again after the status, which is what MCP clients
read: the SDK's own client raises it in words, a 401 included.

Real `payrail-embedder mcp --http` subprocesses on a real PostgreSQL (18 and 16) and the fake
OpenAI server; raw sockets for what a client would never send. No path answers 429: the server
has no rate of its own to refuse past (the door bounds connections, and answers 503).
"""

from __future__ import annotations

import json
import socket
import time
from urllib.parse import quote

import jsonschema
import psycopg
import pytest

from payrail_embedder.mcp_server import BODY_TIMEOUT, MAX_BODY_BYTES, SERVER_FAILED
from payrail_test_support.agent_helpers import SEMANTIC_QUERY
from payrail_test_support.remote_agents import TOOL, McpHttpServer, bearer, call_tool, tool_answer

CODES = {"invalid_query", "invalid_request", "unauthorized", "search_unavailable"}
MCP_CLIENT = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
TOOLS_LIST = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).encode()
# A registry changed by hand whose search answers a row no record can be (urls NULL): the server
# meets a failure of its own, as a bug would make one.
BROKEN_SEARCH = """create or replace function payrail.search_provider_methods(query text, query_embedding vector default null,
                                                                   query_embedding_model text default null)
returns table (provider text, method text, urls text[], docs_url text, guidance text) language sql
as $$ select 'Acme'::text, 'Broken'::text, null::text[], null::text, 'Purpose: none'::text $$"""


def one_shape(path: str, status: int, headers: dict, body: dict) -> dict:
    """The {"error", "detail"} of an error answer, checked to be the one shape for its path."""
    assert headers["content-type"] == "application/json", (path, status, headers)
    assert int(headers["content-length"]) == len(json.dumps(body).encode()), (path, status)
    if path.split("?")[0] == "/mcp":
        assert body.keys() == {"jsonrpc", "id", "error"} and body["jsonrpc"] == "2.0", (path, status, body)
        assert body["error"].keys() == {"code", "message", "data"} and isinstance(body["error"]["code"], int), body
        shape = body["error"]["data"]
        assert body["error"]["message"] == f"{status} {shape['error']}: {shape['detail']}", body
    else:
        shape = body
    assert shape.keys() == {"error", "detail"} and shape["error"] in CODES and shape["detail"].strip(), (path, status, body)
    return shape


def raw_answer(server: McpHttpServer, request: bytes) -> tuple[int, dict, dict]:
    """What the server answers bytes no client library would send, read until it closes."""
    with socket.create_connection((server.address, server.port), timeout=30) as sock:
        sock.sendall(request)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    head, _, body = received.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in lines[1:])}
    return int(lines[0].split()[1]), headers, json.loads(body)


@pytest.fixture
def with_tokens(agents_env, token_file, tmp_path):
    """A server given a token file on loopback (the default address): it asks for tokens there too."""
    server = McpHttpServer(agents_env, tmp_path / "tokens.log", "--token-file", str(token_file))
    yield server
    server.stop()


@pytest.mark.slow  # waits out a body's deadline
def test_every_error_answer_of_a_server_with_tokens_has_one_shape(with_tokens, tokens, database_url, openai_fake):
    server, token = with_tokens, tokens["booking-agent"]
    document = {"$id": "urn:payrail-openapi", **server.get("/openapi.json", bearer(token))[2]}
    statuses = set()

    def answered(status: int, path: str, answer: tuple[int, dict, dict]) -> tuple[dict, dict]:
        """The answer's headers and shape, checked: its status, the one shape, the OpenAPI document's Error."""
        got, headers, body = answer
        assert got == status, (path, got, body)
        shape = one_shape(path, status, headers, body)
        if not path.startswith("/mcp"):
            jsonschema.validate(shape, {**document, "$ref": "#/components/schemas/Error"})
        statuses.add(status)
        return headers, shape

    # A body that stops coming: its 408 is read last, once its deadline has passed.
    slow = socket.create_connection((server.address, server.port), timeout=3 * BODY_TIMEOUT)
    slow.sendall(f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\nAuthorization: Bearer {token}\r\n".encode())
    slow.sendall(b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{")

    # 401 on loopback too, on every path, with RFC 6750's challenge; its error once a token was presented.
    for path in ("/search?query=Stripe", "/openapi.json", "/nothing"):
        headers, shape = answered(401, path, server.get(path))
        assert headers["www-authenticate"] == 'Bearer realm="payrail-agent-search"', headers
        assert shape == {"error": "unauthorized", "detail": "present an agent's token in an Authorization header: Bearer TOKEN"}, shape
    answered(401, "/mcp", server.request("POST", "/mcp", MCP_CLIENT, body=TOOLS_LIST))
    headers, shape = answered(401, "/search?query=Stripe", server.get("/search?query=Stripe", bearer("w" * 64)))
    assert headers["www-authenticate"] == 'Bearer realm="payrail-agent-search", error="invalid_token"', headers
    assert shape["detail"] == "the bearer token is not one of this server's agents' tokens (mistyped, or revoked?)", shape

    # 400: a query refused; messages the SDK cannot read or take, its words and JSON-RPC code kept;
    # a request h11 cannot read.
    assert answered(400, "/search?query=", server.get("/search?query=", bearer(token)))[1]["error"] == "invalid_query"
    garbage = server.request("POST", "/mcp", {**bearer(token), **MCP_CLIENT}, body=b"{not json")
    assert answered(400, "/mcp", garbage)[1]["detail"].startswith("Parse error") and garbage[2]["error"]["code"] == -32700, garbage
    text = server.request("POST", "/mcp", {**bearer(token), "Content-Type": "text/plain", "Accept": MCP_CLIENT["Accept"]}, body=TOOLS_LIST)
    assert answered(400, "/mcp", text)[1]["detail"] == "Invalid Content-Type header", text
    malformed = raw_answer(server, b"GET / HTTP/1.1\r\nHost \x00: nowhere\r\n\r\n")
    assert answered(400, "/", malformed)[1]["detail"].startswith("the request is not HTTP/1.1 as this server reads it"), malformed

    # 404 and 405 in this server's words, 406 in the SDK's, 413.
    assert answered(404, "/nothing", server.get("/nothing", bearer(token)))[1]["detail"] == (
        "nothing is served at /nothing: ask POST /mcp, GET /search?query=... or GET /openapi.json"
    )
    headers, shape = answered(405, "/search", server.request("POST", "/search", bearer(token), body=b""))
    assert set(headers["allow"].split(", ")) == {"GET", "HEAD"} and shape["detail"] == f"/search does not answer POST: it answers {headers['allow']}", shape
    assert answered(405, "/mcp", server.get("/mcp", {**bearer(token), "Accept": "text/event-stream"}))[0]["allow"] == "POST"
    answered(405, "/mcp", server.request("DELETE", "/mcp", bearer(token)))
    answered(406, "/mcp", server.request("POST", "/mcp", {**bearer(token), "Content-Type": "application/json", "Accept": "text/html"}, body=TOOLS_LIST))
    answered(413, "/mcp", server.request("POST", "/mcp", {**bearer(token), **MCP_CLIENT}, body=b" " * (MAX_BODY_BYTES + 1)))

    # 503: the embedding service down. 500: a failure of the server's own, logged with its traceback;
    # over MCP, the tool's error in the same shape.
    openai_fake.behaviour = "500"
    assert answered(503, "/search", server.get(f"/search?query={quote(SEMANTIC_QUERY)}", bearer(token)))[1]["error"] == "search_unavailable"
    openai_fake.behaviour = "ok"
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(BROKEN_SEARCH)
    _, failure = answered(500, "/search", server.get("/search?query=Stripe", bearer(token)))
    assert failure == {"error": "search_unavailable", "detail": SERVER_FAILED}, failure
    tool = call_tool(server.port, token, "Stripe")
    assert tool.is_error and tool_answer(tool) == failure, tool
    log = server.text()
    assert log.count("event=server_error") == 2 and "path=/search" in log and f"tool={TOOL}" in log and "traceback=" in log, log

    # 408 once the body's deadline has passed (the socket's timeout is above it), then closed.
    received = b""
    while chunk := slow.recv(65536):
        received += chunk
    slow.close()
    head, _, body = received.partition(b"\r\n\r\n")
    headers = {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in head.decode("latin-1").split("\r\n")[1:])}
    assert head.startswith(b"HTTP/1.1 408 ") and headers["connection"] == "close", head
    answered(408, "/mcp", (408, headers, json.loads(body)))

    # Every refusal this server makes; none is 429 (see the module's doc).
    assert statuses == {400, 401, 404, 405, 406, 408, 413, 500, 503}


def test_refusals_of_a_server_without_tokens_and_its_busy_door_have_one_shape(agents_env, tmp_path):
    """421 and 403 (loopback without tokens) on both kinds of path, and the 503 the door answers a
    newcomer while its one connection is in a request, before that request is read."""
    server = McpHttpServer(agents_env, tmp_path / "loopback.log", "--max-connections", "1")
    try:
        for path in ("/search?query=Stripe", "/mcp"):
            method, body = ("POST", TOOLS_LIST) if path == "/mcp" else ("GET", None)
            status, headers, answer = server.request(method, path, MCP_CLIENT, host=f"evil.example:{server.port}", body=body)
            assert status == 421 and one_shape(path, status, headers, answer)["error"] == "invalid_request", answer
            status, headers, answer = server.request(method, path, {**MCP_CLIENT, "Origin": "https://evil.example"}, body=body)
            assert status == 403 and one_shape(path, status, headers, answer)["error"] == "invalid_request", answer
        held = socket.create_connection((server.address, server.port), timeout=30)
        held.sendall(f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{".encode())
        try:
            time.sleep(0.5)  # its head read: it is in a request
            status, headers, answer = raw_answer(server, b"")
            assert status == 503 and one_shape("*", status, headers, answer)["error"] == "search_unavailable", answer
        finally:
            held.close()
    finally:
        server.stop()
