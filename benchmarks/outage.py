"""How fast each agent interface says search_unavailable when PostgreSQL goes away, and answers again.

    ./scripts/benchmark outage [--runs 5]

Starts a throwaway embedded PostgreSQL 18 with a small registry (enabled records found by name,
so no embedding service is involved), then, for each interface — a new `payrail-embedder search
--json` process, a warm Python API Registry, a warm `payrail-embedder mcp` server over stdio —
measures a warm answer, the answer while the server is stopped, and the first answer after it
is started again; and counts the lines each wrote on standard error meanwhile. Prints a table of
medians (ms) over the runs. The tests check what the answers are; this measures how soon.

Then the embedding service's outage: a warm Python API Registry (a pool of 4 connections) whose
embedding service (the tests' fake OpenAI server, real HTTP) hangs, while 8 agents' semantic
searches wait on it (PAYRAIL_EMBEDDING_TIMEOUT 5 s): how fast exact names answer meanwhile, and
what the waiting searches answer in the end.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg

from payrail_embedder.faces.api import Registry
from payrail_embedder.registry.search import SearchUnavailable
from throwaway_postgres import throwaway_postgres

CLI = Path(sys.executable).parent / "payrail-embedder"
QUERY = "Acme"


def seed(url: str) -> None:
    with psycopg.connect(url) as conn:
        conn.execute("select payrail.set_embedding_model('outage-benchmark', 3)")
        conn.execute(
            """
            insert into payrail.provider_methods
              (provider, method, guidance, enabled, embedding, embedding_model, embedding_content_hash)
            select 'Acme', 'Method ' || n, 'Purpose: benchmark record.', true, '[1,0,0]', 'outage-benchmark',
                   payrail._content_hash('Acme', 'Method ' || n, 'Purpose: benchmark record.')
            from generate_series(1, 3) as n
            """
        )


def timed(call) -> tuple[float, str]:
    """Milliseconds a call took, and the error code it answered (or "ok")."""
    started = time.perf_counter()
    outcome = call()
    return (time.perf_counter() - started) * 1000, outcome


def cli_search(url: str) -> str:
    result = subprocess.run([str(CLI), "search", "--json", QUERY], env={"PAYRAIL_DATABASE_URL": url, "PATH": "/usr/bin:/bin"}, capture_output=True, text=True)
    return json.loads(result.stdout).get("error", "ok")


class ApiAgent:
    def __init__(self, url: str) -> None:
        self.registry = Registry(url, backend="openai")

    def search(self) -> str:
        try:
            self.registry.search_provider_methods(QUERY)
        except SearchUnavailable as error:
            return error.code
        return "ok"


class McpAgent:
    """A warm `payrail-embedder mcp` over stdio, spoken to in plain JSON-RPC lines (the transport's own format)."""

    def __init__(self, url: str, errlog) -> None:
        env = {"PAYRAIL_DATABASE_URL": url, "PATH": "/usr/bin:/bin"}
        self.process = subprocess.Popen([str(CLI), "mcp"], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errlog, text=True)
        self.last_id = 0
        self.request("initialize", {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "outage", "version": "0"}})
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def send(self, message: dict) -> None:
        self.process.stdin.write(json.dumps(message) + "\n")
        self.process.stdin.flush()

    def request(self, method: str, params: dict) -> dict:
        self.last_id += 1
        self.send({"jsonrpc": "2.0", "id": self.last_id, "method": method, "params": params})
        while True:
            message = json.loads(self.process.stdout.readline())
            if message.get("id") == self.last_id:
                return message["result"]

    def search(self) -> str:
        result = self.request("tools/call", {"name": "search_provider_methods", "arguments": {"query": QUERY}})
        return json.loads(result["content"][0]["text"])["error"] if result.get("isError") else "ok"

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=30)


EMBEDDING_TIMEOUT = 5.0
WAITING_AGENTS = 8


def embedding_outage(url: str, calls: int) -> dict:
    """Name-path latencies (ms) before and while WAITING_AGENTS semantic searches wait on a hanging
    embedding service, and what those searches answered."""
    import threading

    from payrail_embedder.embedders import OpenAIEmbedder
    from payrail_test_support.openai_fake import FakeOpenAI

    fake = FakeOpenAI(dimensions=3).start()
    embedder = OpenAIEmbedder("outage-benchmark", api_key="benchmark", base_url=fake.base_url, timeout=EMBEDDING_TIMEOUT, dimensions=3)
    outcomes = []
    with Registry(url, embedder=embedder, pool_size=4) as registry:

        def search(query: str) -> str:
            try:
                registry.search_provider_methods(query)
            except SearchUnavailable as error:
                return f"{error.code} ({error.cause})"
            return "ok"

        assert search("a question for the semantic path") == "ok"
        healthy = [timed(lambda: search(QUERY)) for _ in range(calls)]
        fake.behaviour = "hang"

        def wait_on_the_service():
            outcomes.append(search("a question for the semantic path"))

        agents = [threading.Thread(target=wait_on_the_service) for _ in range(WAITING_AGENTS)]
        for thread in agents:
            thread.start()
        deadline = time.monotonic() + 2
        while fake.hanging < WAITING_AGENTS and time.monotonic() < deadline:
            time.sleep(0.01)
        reached = fake.hanging
        hanging = [timed(lambda: search(QUERY)) for _ in range(calls)]
        for thread in agents:
            thread.join()
    fake.stop()
    return {"healthy": healthy, "hanging": hanging, "reached": reached, "outcomes": outcomes}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--calls", type=int, default=20, help="name-path searches timed while the embedding service hangs")
    args = parser.parse_args()
    rows = {name: {"warm": [], "down": [], "back": [], "stderr lines": 0} for name in ("cli", "api", "mcp")}
    with throwaway_postgres() as server, tempfile.TemporaryFile("w+") as mcp_stderr:
        url = server.registry("outage")
        seed(url)
        api, mcp = ApiAgent(url), McpAgent(url, mcp_stderr)
        agents = {"cli": lambda: cli_search(url), "api": api.search, "mcp": mcp.search}
        try:
            for _ in range(args.runs):
                for name, search in agents.items():
                    rows[name]["warm"].append(timed(search))
                server.stop()
                for name, search in agents.items():
                    rows[name]["down"].append(timed(search))
                server.start()
                for name, search in agents.items():
                    rows[name]["back"].append(timed(search))
        finally:
            mcp.close()
            api.registry.close()
        mcp_stderr.seek(0)
        rows["mcp"]["stderr lines"] = len(mcp_stderr.read().splitlines())

    print(
        f"outage: {args.runs} runs of warm / stopped / restarted, name-path query {QUERY!r}; medians in ms; not analyzed by the benchmark (autovacuum on, as a server runs)"
    )
    print("| interface | warm ms | while stopped ms | answer while stopped | first after restart ms | answer after restart | stderr lines |")
    print("|---|---:|---:|---|---:|---|---:|")

    def median(samples):
        return f"{statistics.median(ms for ms, _ in samples):.1f}"

    def answers(samples):
        return ", ".join(sorted({answer for _, answer in samples}))

    for name, row in rows.items():
        label = {"cli": "CLI, new process", "api": "Python API, warm", "mcp": "MCP stdio, warm"}[name]
        print(
            f"| {label} | {median(row['warm'])} | {median(row['down'])} | {answers(row['down'])} | {median(row['back'])} | {answers(row['back'])} | {row['stderr lines']} |"
        )

    with throwaway_postgres() as server:
        url = server.registry("embedding_outage")
        seed(url)
        outage = embedding_outage(url, args.calls)
    print(
        f"\nembedding service hanging: {WAITING_AGENTS} semantic searches waiting on it ({outage['reached']} reached it), "
        f"a Python API with a pool of 4, PAYRAIL_EMBEDDING_TIMEOUT {EMBEDDING_TIMEOUT:g} s; {args.calls} name-path searches ({QUERY!r}) each"
    )
    print("| name-path searches | p50 ms | max ms | answers |")
    print("|---|---:|---:|---|")
    for phase in ("healthy", "hanging"):
        timings = [ms for ms, _ in outage[phase]]
        answers = ", ".join(sorted({answer for _, answer in outage[phase]}))
        print(f"| {phase} service | {statistics.median(timings):.1f} | {max(timings):.1f} | {answers} |")
    print(f"the {WAITING_AGENTS} waiting semantic searches answered: {', '.join(sorted(set(outage['outcomes'])))}")


if __name__ == "__main__":
    main()
