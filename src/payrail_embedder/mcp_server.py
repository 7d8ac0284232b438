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
import threading
from importlib.metadata import version
from typing import Annotated

from .api import Registry, SearchResult
from .search import SearchError

SERVER_NAME = "payrail-agent-search"

TOOL_DESCRIPTION = """\
Find at most three provider methods (third-party API operations) for a need described in plain
words, e.g. "find live hotel availability through a paid API", or by an exact provider or method
name. Each match gives the provider, the method, useful URLs, the official docs URL (docsUrl) and
concise guidance (Purpose / Instructions / Notes).

Matches are advisory guides, not approvals or callable capabilities: this registry never calls,
approves or pays for anything. Read the official docs (docsUrl) before calling a provider, then
call it yourself. Any payment requirement goes to Payrail Agent, the separate payment agent.

Errors come back as a tool error whose text is {"error": "invalid_query", ...} (the query is empty
or longer than 2,000 characters: fix it) or {"error": "search_unavailable", ...} (the registry's
database or embedding service failed: try again later); never as an empty or partial list."""

INSTRUCTIONS = """\
Payrail Agent Search is a discovery registry: ask search_provider_methods what you need and get
back at most three provider methods with their docs and guidance. They are advisory guides, not
approvals or callable capabilities. Read the official docs before calling a provider, call it
yourself, and take any payment requirement to Payrail Agent."""

QUERY_DESCRIPTION = "What you need, in plain words, or an exact provider or method name; 1 to 2,000 characters."


def build_server(registry: Registry):
    """The MCPServer with its one tool, answering from `registry`."""
    from mcp.server.mcpserver import MCPServer
    from mcp_types import CallToolResult, TextContent, ToolAnnotations
    from pydantic import Field

    server = MCPServer(
        SERVER_NAME,
        instructions=INSTRUCTIONS,
        version=version("payrail-agent-search"),
        log_level="WARNING",
    )

    # A sync tool runs on a worker thread, so a slow embedding never stalls the protocol.
    def search_provider_methods(query: Annotated[str, Field(description=QUERY_DESCRIPTION)]) -> SearchResult:
        try:
            return registry.search_provider_methods(query)
        except SearchError as error:
            return CallToolResult(content=[TextContent(type="text", text=json.dumps(error.to_json()))], is_error=True)

    server.add_tool(
        search_provider_methods,
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


def serve(registry: Registry, http_port: int | None = None) -> None:
    server = build_server(registry)
    # Opens the pool (and loads a local model) while the host is still handshaking.
    threading.Thread(target=registry.warm_up, name="payrail-warm-up", daemon=True).start()
    try:
        if http_port is None:
            server.run("stdio")
        else:
            server.run("streamable-http", host="127.0.0.1", port=http_port)
    finally:
        registry.close()
