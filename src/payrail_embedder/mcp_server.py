"""`payrail-embedder mcp`: the registry's search as a Model Context Protocol server.

One tool, search_provider_methods, over stdio (the default: an agent host starts the command)
or streamable HTTP (`--http PORT`, on 127.0.0.1 unless `--host` says otherwise). Over HTTP the
same server also answers `GET /search?query=...` with the tool's JSON, described by the OpenAPI
document at /openapi.json, for agent frameworks that call tools from OpenAPI. Beyond loopback
every request needs a bearer token of a token file (base/agent_tokens.py), and on loopback too
once one is given. Every error answer has one shape, {"error": CODE, "detail": ...}, on /mcp as a
JSON-RPC error's data (error_body), whoever made it (HttpGate). It answers exactly what
the Python API, the CLI and the SQL function answer, from one api.Registry that keeps its pool and
embedder for the server's lifetime. The MCP SDK is imported only when the server starts, so the
rest of the CLI does not pay for it.
"""

# No `from __future__ import annotations`: the SDK reads the tool's annotations, which name
# types imported inside build_server.
import json
import os
import re
import signal
import socket
import sys
from collections.abc import Awaitable, Callable
from http import HTTPStatus
from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NamedTuple
from urllib.parse import parse_qs

# pydantic builds the output schema from these, and needs typing_extensions.TypedDict before Python 3.12.
from typing_extensions import TypedDict

from .base.agent_tokens import AgentTokens
from .base.errors import CodedError, as_json, as_text
from .base.logs import log_failure
from .base.network import allow_open_files, host_names, is_loopback
from .registry.agent_path import Registry
from .registry.search import QUERY_MAX_CHARACTERS, InvalidQuery, MatchJSON, NeedsEmbedding, Query, SearchError, SearchUnavailable, check_query

if TYPE_CHECKING:  # the web stack loads only when --http serves
    from .base.http_door import Door

SERVER_NAME = "payrail-agent-search"
TOOL_NAME = "search_provider_methods"
LOOPBACK = "127.0.0.1"
# Connections --http holds at once, unless --max-connections says otherwise.
MAX_CONNECTIONS = 1000
HOST_HEADER = re.compile(r"(\[[^\]]*\]|[^:]*)(?::(\d+))?")
# A Host header fit to name the server in its OpenAPI document: a name or an address, and a port.
SERVED_HOST = re.compile(r"(?:[A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\])(?::\d{1,5})?")
MCP_PATH = "/mcp"
# A request's body is read whole before any route sees it, within a deadline: the tool's largest
# call (a query of 2,000 characters, each written as a \uXXXX escape) is some 12 KB.
MAX_BODY_BYTES = 256 * 1024
BODY_TIMEOUT = 10
# A browser's Sec-Fetch-Site for a request a page of this server made, or a person typed in.
OWN_FETCHES = ("same-origin", "none")
# Worker threads for each of a search's two steps (anyio's default for all a server's threads is 40).
LANE_THREADS = 40

TOOL_DESCRIPTION = """\
Find at most three provider methods (third-party API operations) for a need described in plain
words, e.g. "find live hotel availability through a paid API", or by an exact provider or method
name. Each match gives the provider, the method, useful URLs, the official docs URL (docsUrl) and
concise guidance (Purpose / Instructions / Notes).

Matches are advisory guides, not approvals or callable capabilities: this registry never calls,
approves or pays for anything. Read the official docs (docsUrl) before calling a provider, then
call it yourself. Any payment requirement goes to Payrail Agent, the separate payment agent.

Errors come back as a tool error whose text is {"error": "invalid_query", ...} (the query is
missing, not a string, empty or longer than 2,000 characters: fix it) or
{"error": "search_unavailable", ...} (the registry's database or embedding service failed: try
again later); never as an empty or partial list."""

INSTRUCTIONS = """\
Payrail Agent Search is a discovery registry: ask search_provider_methods what you need and get
back at most three provider methods with their docs and guidance. They are advisory guides, not
approvals or callable capabilities. Read the official docs before calling a provider, call it
yourself, and take any payment requirement to Payrail Agent."""

QUERY_DESCRIPTION = f"What you need, in plain words, or an exact provider or method name; 1 to {QUERY_MAX_CHARACTERS:,} characters."
# GET /search answers with the tool's JSON; a failure's status says whose it is.
HTTP_STATUS = {"invalid_query": 400, "search_unavailable": 503}
# What a browser sends or a library sees of a query string: invalid UTF-8 becomes lone surrogates
# (as on the command line), which check_query refuses, instead of U+FFFD searched for.
QUERY_STRING_ERRORS = "surrogateescape"


def failure_result(error: SearchError):
    """Every tool failure, whatever its cause: a tool error whose text is {"error", "detail"}."""
    from mcp_types import CallToolResult, TextContent

    return CallToolResult(content=[TextContent(type="text", text=json.dumps(error.to_json()))], is_error=True)


def build_server(registry: Registry):
    """The MCPServer with its one tool, answering from `registry`."""
    from mcp.server.mcpserver import MCPServer
    from mcp_types import ToolAnnotations
    from pydantic import Field, TypeAdapter

    class Answer(TypedDict):
        """At most three matches, in the registry's order; no scores."""

        matches: Annotated[list[MatchJSON], Field(max_length=3)]

    class RegistryServer(MCPServer):
        async def call_tool(self, name, arguments, context=None):
            # Judged here, before the SDK's own validation (whose text is not the documented JSON)
            # and before the database: a bad query is invalid_query even while it is down.
            if name != TOOL_NAME:
                return failure_result(InvalidQuery(f"there is no tool {name!r}; the one tool is {TOOL_NAME}"))
            if "query" not in (arguments or {}):
                return failure_result(InvalidQuery(f'the query is missing: call {TOOL_NAME} with {{"query": "what you need, in plain words"}}'))
            try:
                check_query(arguments["query"])
            except InvalidQuery as error:
                return failure_result(error)
            return await super().call_tool(name, arguments, context)

    server = RegistryServer(SERVER_NAME, instructions=INSTRUCTIONS, version=version("payrail-agent-search"), log_level="WARNING")

    answer = answering(registry)

    async def search_provider_methods(
        query: Annotated[str, Field(description=QUERY_DESCRIPTION, min_length=1, max_length=QUERY_MAX_CHARACTERS)],
    ) -> Answer:
        checked = Query(query)  # RegistryServer.call_tool checked it, before the SDK's validation
        try:
            return Answer(matches=(await answer(checked))["matches"])
        except SearchError as error:
            return failure_result(error)
        except Exception as error:  # a bug, or a registry changed by hand: said in the log, answered as every failure is
            log_failure("server_error", error, tool=TOOL_NAME)
            return failure_result(SearchUnavailable(SERVER_FAILED, "server_error"))

    add_http_routes(server, answer, TypeAdapter(Answer).json_schema(ref_template="#/components/schemas/{model}"))
    server.add_tool(
        search_provider_methods,
        name=TOOL_NAME,
        title="Search provider methods",
        description=TOOL_DESCRIPTION,
        annotations=ToolAnnotations(
            title="Search provider methods",
            read_only_hint=True,
            destructive_hint=False,
            idempotent_hint=True,
            open_world_hint=False,
        ),
    )
    return server


def answering(registry: Registry) -> Callable[[Query], Awaitable[dict]]:
    """The answer to a checked query, as the tool and GET /search both give it.

    Each step runs on a worker thread, so the database and a slow embedding never stall the
    protocol; the name path on threads of its own, so searches waiting on the embedding service,
    however many, never keep exact names waiting for a thread."""
    import anyio
    import anyio.to_thread

    lanes: dict[str, anyio.CapacityLimiter] = {}

    def lane(name: str) -> anyio.CapacityLimiter:
        """Worker threads of their own for each step (made on first use: a limiter belongs to the event loop)."""
        if name not in lanes:
            lanes[name] = anyio.CapacityLimiter(LANE_THREADS)
        return lanes[name]

    async def answer(query: Query) -> dict:
        by_name = await anyio.to_thread.run_sync(registry.answer_by_name, query, limiter=lane("name"))
        found = (
            await anyio.to_thread.run_sync(registry.search_by_embedding, query, by_name, limiter=lane("embedding"))
            if isinstance(by_name, NeedsEmbedding)
            else by_name
        )
        return {"matches": [match.to_json() for match in found["matches"]]}

    return answer


def add_http_routes(server, answer: Callable[[Query], Awaitable[dict]], answer_schema: dict) -> None:
    """GET /search?query= (the tool's answer and errors, as JSON) and GET /openapi.json, for agent
    frameworks that call tools from OpenAPI; behind the same token as the MCP endpoint (HttpGate)."""
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response

    @server.custom_route("/search", methods=["GET"])
    async def search_over_http(request: Request) -> Response:
        query_string = request.scope["query_string"].decode("latin-1")
        given = parse_qs(query_string, keep_blank_values=True, encoding="utf-8", errors=QUERY_STRING_ERRORS).get("query", [])
        try:
            if not given:
                raise InvalidQuery("the query is missing: GET /search?query=what+you+need")
            if len(given) > 1:
                raise InvalidQuery(f"give one query, not {len(given)}")
            return JSONResponse(await answer(check_query(given[0])))
        except SearchError as error:
            return JSONResponse(error.to_json(), status_code=HTTP_STATUS.get(error.code, 503))

    document = openapi_document(answer_schema)

    @server.custom_route("/openapi.json", methods=["GET"])
    async def openapi(request: Request) -> Response:
        # servers, after info: the URL this request reached, which frameworks call /search at.
        introduction = {key: document[key] for key in ("openapi", "info")}
        return JSONResponse({**introduction, "servers": [{"url": served_at(request.scope)}], **document})


def served_at(scope) -> str:
    """The URL a request reached the server at (what its OpenAPI document names in servers): its
    scheme (https where a reverse proxy on this machine says so with X-Forwarded-Proto, which
    uvicorn believes of 127.0.0.1 alone) and its Host, or, without one fit to name a server, the
    address and port it came in at."""
    hosts = [value.decode("latin-1") for name, value in scope["headers"] if name == b"host"]
    if len(hosts) == 1 and SERVED_HOST.fullmatch(hosts[0]):
        host = hosts[0]
    else:
        address, port = scope["server"]
        host = f"[{address}]:{port}" if ":" in address else f"{address}:{port}"
    return f"{scope['scheme']}://{host}"


def openapi_document(answer_schema: dict) -> dict:
    """The OpenAPI 3.1 document of GET /search: the tool's own output schema, its errors, the token."""
    error = {
        "type": "object",
        "required": ["error", "detail"],
        "properties": {
            "error": {"type": "string", "enum": ["invalid_query", "search_unavailable", "unauthorized", "invalid_request"]},
            "detail": {"type": "string"},
        },
    }
    schemas = {**answer_schema.pop("$defs", {}), "Answer": answer_schema, "Error": error}

    def json_of(name: str, description: str) -> dict:
        return {"description": description, "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{name}"}}}}

    return {
        "openapi": "3.1.0",
        "info": {"title": "Payrail Agent Search", "version": version("payrail-agent-search"), "description": INSTRUCTIONS},
        "paths": {
            "/search": {
                "get": {
                    "operationId": TOOL_NAME,
                    "summary": "Search provider methods",
                    "description": TOOL_DESCRIPTION,
                    "parameters": [
                        {
                            "name": "query",
                            "in": "query",
                            "required": True,
                            "description": QUERY_DESCRIPTION,
                            "schema": {"type": "string", "minLength": 1, "maxLength": QUERY_MAX_CHARACTERS},
                        }
                    ],
                    "responses": {
                        "200": json_of("Answer", "At most three matches, in the registry's order; no scores."),
                        "400": json_of("Error", "invalid_query: the query is missing, empty, too long or not UTF-8; fix it."),
                        "401": json_of("Error", "unauthorized: no valid bearer token (servers given a token file, on loopback too)."),
                        "403": json_of("Error", "invalid_request: a web page's request (servers on loopback without tokens)."),
                        "408": json_of("Error", "invalid_request: the request's body did not come within its deadline."),
                        "413": json_of("Error", "invalid_request: the request's body is too large."),
                        "421": json_of("Error", "invalid_request: the Host header names another address than the server's."),
                        "500": json_of("Error", f"search_unavailable: {SERVER_FAILED}."),
                        "503": json_of(
                            "Error",
                            "search_unavailable: the registry's database or embedding service failed, or the server holds "
                            "as many connections as it may; try again later.",
                        ),
                    },
                }
            }
        },
        "components": {"schemas": schemas, "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
        "security": [{"bearer": []}, {}],
    }


class PortInUse(CodedError):
    """--http PORT: another program listens there."""

    code = "invalid_input"


class TokenRequired(CodedError):
    """--host beyond loopback without a token file: anyone who reaches the port could search."""

    code = "invalid_input"


def bind(host: str, port: int) -> socket.socket:
    """The listening socket for --http, bound before the server starts, so a busy port is one clear error."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]
    except socket.gaierror as error:
        raise PortInUse(f"cannot listen on {host}: {error.strerror}; give --host an address of this machine") from None
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a restart need not wait out TIME_WAIT
    try:
        sock.bind((host, port))
        # Listening at once: a client that read the URL the server prints is queued, not refused,
        # while uvicorn starts.
        sock.listen(socket.SOMAXCONN)
    except OSError as error:
        sock.close()
        raise PortInUse(f"cannot listen on {host}:{port}: {error.strerror}; choose another --http PORT or --host") from None
    return sock


def serve(
    registry: Registry, http_port: int | None = None, host: str = LOOPBACK, token_file: Path | None = None, max_connections: int = MAX_CONNECTIONS
) -> None:
    """Serves until standard input closes (stdio) or SIGTERM / Ctrl-C (HTTP, where it exits 0)."""
    # What can refuse to start does before the MCP SDK loads (most of a start's second).
    tokens = AgentTokens(token_file) if token_file is not None else None  # a wrong file stops it here, named
    if http_port is not None and tokens is None and not is_loopback(host):
        raise TokenRequired(
            f"--host {host} is beyond loopback: every agent there must present a bearer token; "
            "give --token-file FILE (one line per agent: NAME TOKEN, mode 600; see docs/agents.md)"
        )
    door = None
    if http_port is not None:
        from .base.http_door import Door, http_response

        # Answered before a request is read (its path unknown): the one shape, as on every path but /mcp.
        busy = as_json("search_unavailable", f"the server holds as many connections as it may ({max_connections:,}), each in a request; try again")
        malformed = as_json("invalid_request", "the request is not HTTP/1.1 as this server reads it: a malformed line or header, or a head over 64 KB")
        door = Door(
            max_connections,
            http_response(503, "Service Unavailable", "application/json", json.dumps(busy).encode()),
            http_response(400, "Bad Request", "application/json", json.dumps(malformed).encode()),
        )
        allow_open_files(door.open_files, f"--max-connections {max_connections:,}")
    sock = bind(host, http_port) if http_port is not None else None
    server = build_server(registry)
    # The pool opened (the embedded default started) and a local model loaded before the server
    # answers anything, so the first question is as fast as the next ones.
    registry.warm_up()
    # Stopped with SIGTERM (agent hosts, service managers), the server exits 0, as for a closed stdin.
    try:
        if sock is None or door is None:
            # At once: a SystemExit raised inside the SDK's stdio tasks was now and then reported as
            # an unhandled error (a traceback on stderr) or swallowed (the server kept running), and
            # a read of stdin blocks in a thread nothing can cancel. Searches write nothing to lose;
            # the pool's connections close with the process.
            signal.signal(signal.SIGTERM, lambda signum, frame: os._exit(0))
            server.run("stdio")
        else:
            signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))
            serve_http(server, sock, door, tokens)
    finally:
        registry.close()


class Refusal(NamedTuple):
    """A request the gate answers itself: its status, its name in the door's tally, why, and the
    headers that say more (RFC 6750's challenge, Allow)."""

    status: int
    tally: str
    detail: str
    headers: tuple[tuple[bytes, bytes], ...] = ()


REALM = b'Bearer realm="payrail-agent-search"'
# A request that presented no bearer token is told the scheme; one that presented a wrong one, or
# several, also what was wrong with it (RFC 6750, 3.1), in the header and in the answer's words.
NO_TOKEN = Refusal(401, "unauthorized", "present an agent's token in an Authorization header: Bearer TOKEN", ((b"www-authenticate", REALM),))
WRONG_TOKEN = Refusal(
    401,
    "unauthorized",
    "the bearer token is not one of this server's agents' tokens (mistyped, or revoked?)",
    ((b"www-authenticate", REALM + b', error="invalid_token"'),),
)
SEVERAL_TOKENS = Refusal(
    401, "unauthorized", "give one Authorization header, not several: Bearer TOKEN", ((b"www-authenticate", REALM + b', error="invalid_request"'),)
)
# JSON-RPC's codes for a request refused and for a server's own failure (mcp_types', not imported:
# the SDK loads only once the server starts).
JSONRPC_INVALID_REQUEST = -32600
JSONRPC_INTERNAL_ERROR = -32603
# The most of an application's error answer read for its words.
MAX_ERROR_BYTES = 64 * 1024
SERVER_FAILED = "the server failed while answering, an error of its own (its log says which); try again later"


class HttpGate:
    """What every connection meets before any route, each refusal answered at once (JSON, see
    error_body) and counted in the door's tally:

    - only HTTP requests pass, and the server's own lifespan: a WebSocket, or any other kind;
    - with tokens, a request without one of them (401), on loopback too; without (loopback only),
      a Host header naming another address than the one bound (DNS rebinding, 421), and a web
      page's request (an Origin other than the server's own, or a browser's Sec-Fetch-Site saying
      another site sent it: 403), so no page a browser shows can spend the registry's embeddings;
    - GET /mcp (405): the server never speaks unasked, so it holds no stream open;
    - a body over MAX_BODY_BYTES (413) or not all come within BODY_TIMEOUT seconds (408): it is
      read whole, and only then does a route see the request.

    What the application answers with a status of 400 or more goes out in the same shape
    (InOneShape), and a failure of its own is logged (event=server_error) and answered 500.
    """

    def __init__(self, app, door: "Door", tokens: AgentTokens | None, bound: tuple[str, int]) -> None:
        self.app = app
        self.door = door
        self.tokens = tokens
        self.hosts = host_names(bound[0])
        self.port = bound[1]

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "lifespan":
            return await self.app(scope, receive, send)
        if scope["type"] != "http":
            self.door.count("not_http")
            if scope["type"] == "websocket":
                await send({"type": "websocket.close", "code": 1008})
            return None
        headers = [(name.lower(), value.decode("latin-1")) for name, value in scope["headers"]]
        refusal = self.refusal(headers)
        if refusal is not None:
            self.door.count(refusal.tally)
            return await refuse(send, scope, refusal)
        if scope["path"] == MCP_PATH and scope["method"] == "GET":
            return await refuse(
                send, scope, Refusal(405, "", f"this server sends nothing unasked: POST each JSON-RPC message to {MCP_PATH}", ((b"allow", b"POST"),))
            )
        body = await self.whole_body(headers, receive)
        if isinstance(body, Refusal):
            self.door.count(body.tally)
            return await refuse(send, scope, body)
        if body is None:  # the client went away
            return None
        shaped = InOneShape(scope, send)
        try:
            await self.app(scope, replaying(body, receive), shaped)
        except Exception as error:  # a bug, or a registry changed by hand: said in the log, answered 500 if nothing was
            log_failure("server_error", error, method=scope["method"], path=scope["path"])
            if not shaped.started:
                await shaped({"type": "http.response.start", "status": 500, "headers": []})
                await shaped({"type": "http.response.body", "body": b""})
        return None

    def refusal(self, headers: list[tuple[bytes, str]]) -> Refusal | None:
        """Why a request's head is refused, or None."""
        if self.tokens is not None:
            presented = [value for name, value in headers if name == b"authorization"]
            if len(presented) > 1:
                return SEVERAL_TOKENS
            scheme, _, token = presented[0].partition(" ") if presented else ("", "", "")
            if scheme.lower() != "bearer":
                return NO_TOKEN
            return WRONG_TOKEN if self.tokens.agent_of(token.strip()) is None else None
        named = [HOST_HEADER.fullmatch(value) for name, value in headers if name == b"host"]
        if len(named) != 1 or named[0] is None or named[0].group(1).lower() not in self.hosts or int(named[0].group(2) or 80) != self.port:
            return Refusal(421, "wrong_host", f"this server answers on loopback only: ask it at {min(self.hosts)}:{self.port}")
        own_origin = f"http://{named[0].group(0)}".lower()
        origins = [value.lower() for name, value in headers if name == b"origin"]
        fetched_by = [value.lower() for name, value in headers if name == b"sec-fetch-site"]
        if any(origin != own_origin for origin in origins) or any(site not in OWN_FETCHES for site in fetched_by):
            return Refusal(403, "cross_origin", "a web page may not call this server: without tokens it answers programs on this machine only")
        return None

    async def whole_body(self, headers: list[tuple[bytes, str]], receive) -> dict | Refusal | None:
        """The request's body as one message, why it is refused, or None when the client went away."""
        import anyio

        declared = [value for name, value in headers if name == b"content-length"]
        too_large = Refusal(413, "body_too_large", f"the request's body is larger than {MAX_BODY_BYTES // 1024} KB")
        if declared and declared[0].isdigit() and int(declared[0]) > MAX_BODY_BYTES:
            return too_large
        body = bytearray()
        with anyio.move_on_after(BODY_TIMEOUT):
            while True:
                message = await receive()
                if message["type"] != "http.request":
                    return None
                body += message.get("body", b"")
                if len(body) > MAX_BODY_BYTES:
                    return too_large
                if not message.get("more_body", False):
                    return {"type": "http.request", "body": bytes(body), "more_body": False}
        return Refusal(408, "body_too_slow", f"the request's body did not all come within {BODY_TIMEOUT} seconds", ((b"connection", b"close"),))


def replaying(message: dict, receive):
    """receive() that gives the whole body first, then what the client sends after (its disconnect)."""
    given: list[dict] = []

    async def replay() -> dict:
        if not given:
            given.append(message)
            return message
        return await receive()

    return replay


def error_code(status: int) -> str:
    """The code of an error answer whose words name none: the token's, the server's (try again), or the request's."""
    if status == 401:
        return "unauthorized"
    return "search_unavailable" if status >= 500 else "invalid_request"


def error_body(path: str, status: int, code: str, detail: str, rpc_id: str | int | None = None, rpc_code: int | None = None) -> bytes:
    """Every error answer's JSON: {"error": CODE, "detail": ...}. On the MCP endpoint the same
    inside a JSON-RPC error, as its data, its message the same in words after the HTTP status:
    MCP clients read that alone (the Python SDK says only "Server returned an error response" of
    any other body). rpc_id, rpc_code: those of the JSON-RPC error the SDK answered, kept."""
    shape = as_json(code, detail)
    if path != MCP_PATH:
        return json.dumps(shape).encode()
    if rpc_code is None:
        rpc_code = JSONRPC_INTERNAL_ERROR if status >= 500 else JSONRPC_INVALID_REQUEST
    error = {"code": rpc_code, "message": f"{status} {as_text(code, detail)}", "data": shape}
    return json.dumps({"jsonrpc": "2.0", "id": rpc_id, "error": error}).encode()


async def send_error(send, status: int, headers, body: bytes) -> None:
    """An error answer: body (error_body's) as JSON, with headers but a content type or length of their own."""
    kept = [(name, value) for name, value in headers if name.lower() not in (b"content-type", b"content-length")]
    head = [*kept, (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": body})


async def refuse(send, scope, refusal: Refusal) -> None:
    """A refusal in the one shape (error_body). Its connection then waits for a request like any
    other (the door's deadline, the first to give its place), what is left of a body read and
    dropped meanwhile: closed at once, a body still arriving would make the kernel reset it, and
    the client could lose the answer. A body too slow closes it (its Connection: close)."""
    body = error_body(scope["path"], refusal.status, error_code(refusal.status), refusal.detail)
    await send_error(send, refusal.status, refusal.headers, body)


class InOneShape:
    """The application's send(): an answer of status 400 or more is held whole (its first
    MAX_ERROR_BYTES) and goes out in the one shape (error_body), whatever made it: GET /search's
    own errors as they are, the MCP SDK's JSON-RPC errors and plain-text refusals with their words
    kept, Starlette's 404, 405 and 500 in words of this server. Anything else passes as it is."""

    def __init__(self, scope, send) -> None:
        self.scope = scope
        self.send = send
        self.started = False  # whether an answer's start went out
        self.error: dict | None = None
        self.body = bytearray()

    async def __call__(self, message: dict) -> None:
        if message["type"] == "http.response.start" and message["status"] >= 400:
            self.error, self.body = message, bytearray()
            return
        if message["type"] == "http.response.body" and self.error is not None:
            self.body += message.get("body", b"")[: MAX_ERROR_BYTES - len(self.body)]
            if not message.get("more_body", False):
                self.started = True
                status, headers = self.error["status"], self.error.get("headers", [])
                await send_error(self.send, status, headers, self.reshaped(status, headers))
            return
        if message["type"] == "http.response.start":
            self.started = True
        await self.send(message)

    def reshaped(self, status: int, headers) -> bytes:
        path = self.scope["path"]
        try:
            said = json.loads(self.body)
        except ValueError:
            said = None
        if isinstance(said, dict) and isinstance(said.get("error"), str) and isinstance(said.get("detail"), str):
            return error_body(path, status, said["error"], said["detail"])
        if isinstance(said, dict) and isinstance(said.get("error"), dict):  # the SDK's JSON-RPC error
            rpc = said["error"]
            rpc_id = said.get("id") if isinstance(said.get("id"), (str, int)) else None
            rpc_code = rpc.get("code") if isinstance(rpc.get("code"), int) else None
            return error_body(path, status, error_code(status), str(rpc.get("message") or HTTPStatus(status).phrase), rpc_id, rpc_code)
        text = self.body.decode("utf-8", "replace").strip()
        if text in ("", HTTPStatus(status).phrase):  # Starlette's words: the status alone
            text = self.in_words(status, headers)
        return error_body(path, status, error_code(status), text)

    def in_words(self, status: int, headers) -> str:
        path, method = self.scope["path"], self.scope["method"]
        if status == 404:
            return f"nothing is served at {path}: ask POST {MCP_PATH}, GET /search?query=... or GET /openapi.json"
        if status == 405:
            allowed = [value.decode("latin-1") for name, value in headers if name.lower() == b"allow"]
            return f"{path} does not answer {method}" + (f": it answers {allowed[0]}" if allowed else "")
        if status == 500:
            return SERVER_FAILED
        return HTTPStatus(status).phrase


def serve_http(server, sock: socket.socket, door: "Door", tokens: AgentTokens | None) -> None:
    import uvicorn
    from mcp.server.transport_security import TransportSecuritySettings

    bound = sock.getsockname()[:2]
    # Stateless: each request stands alone (the one tool keeps no state), so a server holds no
    # session between requests, and a token deleted from the file is refused at the very next one.
    # The gate checks Host and Origin for every route; the SDK's own check covers /mcp only.
    app = server.streamable_http_app(
        stateless_http=True, json_response=True, transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False)
    )
    # A query of 2,000 characters percent-encoded in a URL is up to 24 KB: above h11's default 16 KB.
    # uvicorn's own lines go through the package's handler (log_config=None, which door.config sets).
    config = door.config(HttpGate(app, door, tokens, bound), log_level="warning", h11_max_incomplete_event_size=64 * 1024)
    http = uvicorn.Server(config)
    bound_host, port = bound
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    guard = f"bearer tokens of {tokens.path}" if tokens is not None else "loopback only"
    print(f"serving MCP over streamable HTTP at http://{shown}:{port}/mcp and GET /search (OpenAPI: /openapi.json), {guard}", flush=True)
    # uvicorn stops gracefully on SIGTERM, then raises it again for the handler serve() installed.
    http.run(sockets=[sock])
