"""`payrail-embedder mcp --http` in a subprocess as remote agents meet it: its token file, plain
HTTP requests with exactly the headers a test gives (raw http.client, where a header is the
attack), and the MCP SDK's own client; and the fixtures of a registry remote agents search (a
pytest plugin, conftest's pytest_plugins). The remote-agent tests and the HTTP door's benchmark share it."""

from __future__ import annotations

import http.client
import json
import resource
import secrets
import subprocess
from pathlib import Path

import anyio
import pytest

from payrail_test_support import CLI, REPO
from payrail_test_support.agent_helpers import import_catalog
from payrail_test_support.ports import unused_port
from payrail_test_support.waiting import wait_until

TOOL = "search_provider_methods"


def write_tokens(path: Path, lines: list[str], mode: int = 0o600) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="ascii")
    path.chmod(mode)
    return path


@pytest.fixture
def agents_env(cli_env, database_url, openai_fake, tmp_path):
    """The environment of a server whose registry holds the agents' catalog (agent_helpers.CATALOG)."""
    import_catalog(database_url, openai_fake, tmp_path)
    return cli_env


@pytest.fixture
def tokens() -> dict[str, str]:
    return {"booking-agent": secrets.token_hex(32), "travel-agent": secrets.token_hex(32)}


@pytest.fixture
def token_file(tmp_path, tokens) -> Path:
    return write_tokens(tmp_path / "agent-tokens", ["# one line per agent", *(f"{name} {token}" for name, token in tokens.items())])


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


class McpHttpServer:
    """`payrail-embedder mcp --http PORT ARGS` writing its standard output and error to log;
    open_files: the soft limit of open files it starts with (as a service manager may give it)."""

    def __init__(self, env: dict[str, str], log: Path, *args: str, address: str = "127.0.0.1", open_files: int | None = None, cli: Path = CLI) -> None:
        self.port = unused_port()
        self.address = address
        self.host_name = f"[{address}]" if ":" in address else address
        self.log = log

        def limit_open_files() -> None:
            if open_files is not None:
                resource.setrlimit(resource.RLIMIT_NOFILE, (open_files, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))

        with log.open("w") as output:
            self.process = subprocess.Popen(
                [str(cli), "mcp", "--http", str(self.port), *args], env=env, cwd=REPO, stdout=output, stderr=output, preexec_fn=limit_open_files
            )
        # Its start is imports and the pool's first connection: seconds alone, far more under load.
        wait_until(lambda: "serving MCP" in self.text(), lambda: f"the MCP server to listen: {self.text()}", timeout=90)

    def text(self) -> str:
        assert self.process.poll() is None, self.log.read_text()
        return self.log.read_text()

    def open_files(self) -> int:
        """The files (sockets included) the server holds open now."""
        return len(list(Path(f"/proc/{self.process.pid}/fd").iterdir()))

    def get(self, path: str, headers: dict[str, str] | list[tuple[str, str]] = (), host: str | None = None) -> tuple[int, dict, dict]:
        """GET path with exactly these headers; the status, the headers and the JSON body."""
        return self.request("GET", path, headers, host)

    def post(self, path: str, message: dict, headers: dict[str, str]) -> tuple[int, dict, dict]:
        """POST a JSON message as an MCP client does (answers as JSON, or as an event stream)."""
        return self.request(
            "POST", path, {**headers, "Content-Type": "application/json", "Accept": "application/json, text/event-stream"}, body=json.dumps(message).encode()
        )

    def request(self, method: str, path: str, headers: dict[str, str] | list[tuple[str, str]] = (), host: str | None = None, body: bytes | None = None):
        connection = http.client.HTTPConnection(self.address, self.port, timeout=60)
        try:
            connection.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
            connection.putheader("Host", host or f"{self.host_name}:{self.port}")
            for name, value in headers.items() if isinstance(headers, dict) else headers:
                connection.putheader(name, value)
            if body is not None:
                connection.putheader("Content-Length", str(len(body)))
            connection.endheaders(body)
            response = connection.getresponse()
            body = response.read()
            return response.status, {k.lower(): v for k, v in response.getheaders()}, json.loads(body) if body else {}
        finally:
            connection.close()

    def answers(self, queries: list[str]) -> list[dict]:
        """Each query's answer through the MCP SDK's client on one connection (its structured
        content, or its error's JSON)."""
        from mcp.client import Client

        async def main():
            async with Client(f"http://127.0.0.1:{self.port}/mcp") as client:
                return [tool_answer(await client.call_tool(TOOL, {"query": query})) for query in queries]

        return anyio.run(main)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def call_tool(port: int, token: str | None, query: str):
    from mcp.client import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    async def main():
        http = create_mcp_http_client(headers=bearer(token) if token else None)
        async with http, Client(streamable_http_client(f"http://127.0.0.1:{port}/mcp", http_client=http)) as client:
            return await client.call_tool(TOOL, {"query": query})

    return anyio.run(main)


def tool_answer(result) -> dict:
    """A tool call's structured answer, or its error's JSON."""
    return json.loads(result.content[0].text) if result.is_error else result.structured_content
