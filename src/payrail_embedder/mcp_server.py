"""`payrail-embedder mcp`: the registry's search as a Model Context Protocol server.

One tool, search_provider_methods, over stdio (the default: an agent host starts the command)
or streamable HTTP on 127.0.0.1 (`--http PORT`). It answers exactly what the Python API, the CLI
and the SQL function answer, from one api.Registry that keeps its pool and embedder for the
server's lifetime. The MCP SDK is imported only when the server starts, so the rest of the CLI
does not pay for it.
"""

# No `from __future__ import annotations`: the SDK reads the tool's annotations, which name
# types imported inside build_server.
import json
import os
import signal
import socket
import sys
from importlib.metadata import version
from typing import Annotated

# pydantic builds the output schema from these, and needs typing_extensions.TypedDict before Python 3.12.
from typing_extensions import TypedDict

from .base.errors import CodedError
from .registry.agent_path import Registry
from .registry.search import QUERY_MAX_CHARACTERS, InvalidQuery, MatchJSON, NeedsEmbedding, Query, SearchError, check_query

SERVER_NAME = "payrail-agent-search"
TOOL_NAME = "search_provider_methods"
HOST = "127.0.0.1"
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


def failure_result(error: SearchError):
    """Every tool failure, whatever its cause: a tool error whose text is {"error", "detail"}."""
    from mcp_types import CallToolResult, TextContent

    return CallToolResult(content=[TextContent(type="text", text=json.dumps(error.to_json()))], is_error=True)


def build_server(registry: Registry):
    """The MCPServer with its one tool, answering from `registry`."""
    import anyio
    import anyio.to_thread
    from mcp.server.mcpserver import MCPServer
    from mcp_types import ToolAnnotations
    from pydantic import Field

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

    lanes: dict[str, anyio.CapacityLimiter] = {}

    def lane(name: str) -> anyio.CapacityLimiter:
        """Worker threads of their own for each step (made on first use: a limiter belongs to the event loop)."""
        if name not in lanes:
            lanes[name] = anyio.CapacityLimiter(LANE_THREADS)
        return lanes[name]

    # Each step runs on a worker thread, so the database and a slow embedding never stall the
    # protocol; the name path on threads of its own, so searches waiting on the embedding service,
    # however many, never keep exact names waiting for a thread.
    async def search_provider_methods(
        query: Annotated[str, Field(description=QUERY_DESCRIPTION, min_length=1, max_length=QUERY_MAX_CHARACTERS)],
    ) -> Answer:
        checked = Query(query)  # RegistryServer.call_tool checked it, before the SDK's validation
        try:
            by_name = await anyio.to_thread.run_sync(registry.answer_by_name, checked, limiter=lane("name"))
            if isinstance(by_name, NeedsEmbedding):
                answer = await anyio.to_thread.run_sync(registry.search_by_embedding, checked, by_name, limiter=lane("embedding"))
            else:
                answer = by_name
        except SearchError as error:
            return failure_result(error)
        return {"matches": [match.to_json() for match in answer["matches"]]}

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


class PortInUse(CodedError):
    """--http PORT: another program listens there."""

    code = "invalid_input"


def bind_loopback(port: int) -> socket.socket:
    """The listening socket for --http, bound before the server starts, so a busy port is one clear error."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a restart need not wait out TIME_WAIT
    try:
        sock.bind((HOST, port))
    except OSError as error:
        sock.close()
        raise PortInUse(f"cannot listen on {HOST}:{port}: {error.strerror}; choose another --http PORT") from None
    return sock


def serve(registry: Registry, http_port: int | None = None) -> None:
    """Serves until standard input closes (stdio) or SIGTERM / Ctrl-C (HTTP, where it exits 0)."""
    server = build_server(registry)
    sock = bind_loopback(http_port) if http_port is not None else None
    # The pool opened (the embedded default started) and a local model loaded before the server
    # answers anything, so the first question is as fast as the next ones.
    registry.warm_up()
    # Stopped with SIGTERM (agent hosts, service managers), the server exits 0, as for a closed stdin.
    try:
        if sock is None:
            # At once: a SystemExit raised inside the SDK's stdio tasks was now and then reported as
            # an unhandled error (a traceback on stderr) or swallowed (the server kept running), and
            # a read of stdin blocks in a thread nothing can cancel. Searches write nothing to lose;
            # the pool's connections close with the process.
            signal.signal(signal.SIGTERM, lambda signum, frame: os._exit(0))
            server.run("stdio")
        else:
            signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))
            serve_http(server, sock)
    finally:
        registry.close()


def serve_http(server, sock: socket.socket) -> None:
    import uvicorn

    app = server.streamable_http_app(host=HOST)
    config = uvicorn.Config(app, log_level="warning", log_config=None)  # its lines through the package's handler
    http = uvicorn.Server(config)
    port = sock.getsockname()[1]
    print(f"serving MCP over streamable HTTP at http://{HOST}:{port}/mcp (loopback only)", flush=True)
    # uvicorn stops gracefully on SIGTERM, then raises it again for the handler serve() installed.
    http.run(sockets=[sock])
