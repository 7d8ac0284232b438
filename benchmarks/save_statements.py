"""Statements, round trips and time of one backoffice save: a content save, a URL-only save and a
delete, as the record page's actions run them on the session's connection; and of an import of one
batch of new lines, and of the same lines again (unchanged). Not a test: it prints a table.

    ./scripts/benchmark save_statements [--records 1000] [--repeats 30] [--postgres 18|16]

What it does:
- starts its own throwaway embedded PostgreSQL in a temporary directory, applies db/ and deletes
  everything when it ends; imports --records generated records (all enabled) through the write
  path (catalog.import_records), with payrail_test_support's OpenAI-compatible fake at 384
  dimensions as the embedding service (one HTTP request per content save). No ANALYZE;
- runs each action once with libpq's trace on (psycopg's `pgconn.trace`) and counts what the
  client sent: statements (a simple Query or an extended-protocol Execute each) and round trips
  (each time the client, having sent, waits for the server's answer: the trace turning from
  messages sent to messages received). Statements run inside a PL/pgSQL function are not the
  client's and are not counted;
- then times --repeats more of each with the trace off (median and 90th percentile), each on a
  record of its own read just before (the version the form carries), as the page does.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from psycopg import pq

from agent_latency import DIMENSIONS, percentile
from payrail_embedder.backoffice import actions
from payrail_embedder.embedders import OpenAIEmbedder
from payrail_embedder.postgres import connection
from payrail_embedder.registry import catalog, stored
from payrail_embedder.registry.records import Line, ProviderMethod
from payrail_test_support.openai_fake import FAKE_MODEL, FakeOpenAI, random_embedding
from throwaway_postgres import throwaway_postgres


def generated_records(count: int) -> list[ProviderMethod]:
    return [ProviderMethod(f"Provider {i // 10}", f"method {i}", [f"https://api.example.com/{i}"], None, f"Does thing {i}.", True) for i in range(count)]


def traffic(trace_file: Path) -> tuple[int, int]:
    """(statements, round trips) in a libpq trace of what the client sent and received."""
    statements = round_trips = 0
    sending = False
    for line in trace_file.read_text().splitlines():
        direction, _, kind = (line.split("\t") + ["", "", ""])[:3]
        if direction == "F":
            statements += kind in ("Query", "Execute")
            sending = True
        elif direction == "B" and sending:
            round_trips += 1
            sending = False
    return statements, round_trips


def counted(conn, scratch: Path, action) -> tuple[int, int]:
    trace_file = scratch / "trace.txt"
    with trace_file.open("w") as out:
        conn.pgconn.trace(out.fileno())
        conn.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
        try:
            action()
        finally:
            conn.pgconn.untrace()
    return traffic(trace_file)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1000, help="records in the registry, imported through the product")
    parser.add_argument("--repeats", type=int, default=30, help="timed saves of each kind")
    parser.add_argument("--postgres", type=int, choices=(18, 16), default=18)
    parser.add_argument("--batch", type=int, default=100, help="lines of the imported batch (at most one batch: 2,048)")
    args = parser.parse_args()

    fake = FakeOpenAI(dimensions=DIMENSIONS, embedding=random_embedding).start()
    embedder = OpenAIEmbedder(FAKE_MODEL, api_key="bench", base_url=fake.base_url, dimensions=DIMENSIONS)
    records = generated_records(args.records)
    with throwaway_postgres(args.postgres) as server, tempfile.TemporaryDirectory(prefix="payrail-bench-") as scratch:
        url = server.registry("payrail_bench")
        with connection.connect(url, autocommit=True) as conn:
            lines = [Line("generated", i + 1, record) for i, record in enumerate(records)]
            catalog.import_records(conn, lambda: embedder, lines)
            ids = iter([row[0] for row in conn.execute("select id from payrail.provider_methods order by id")])

            def content_save() -> None:
                row = stored.get(conn, next(ids))
                record = stored.record_of(row)
                edited = ProviderMethod(record.provider, record.method, record.urls, record.docs_url, record.guidance + " Edited.", True)
                assert actions.save_record(conn, lambda: embedder, edited, row["id"], row["version"]).saved

            def url_only_save() -> None:
                row = stored.get(conn, next(ids))
                record = stored.record_of(row)
                edited = ProviderMethod(record.provider, record.method, [*record.urls, "https://mirror.example.com/"], record.docs_url, record.guidance, True)
                assert actions.save_record(conn, lambda: embedder, edited, row["id"], row["version"]).saved

            def delete() -> None:
                row = stored.get(conn, next(ids))
                assert actions.delete(conn, row["id"], row["version"])[1] is None

            batches = iter(range(1, args.repeats + 2))
            last_batch: list[Line] = []

            def import_batch() -> None:
                batch = next(batches)
                last_batch[:] = [Line("batch", i + 1, replace(r, provider=f"Batch {batch} {r.provider}")) for i, r in enumerate(records[: args.batch])]
                report = catalog.import_records(conn, lambda: embedder, last_batch)
                assert report.created == args.batch, report

            def import_again() -> None:
                report = catalog.import_records(conn, lambda: embedder, last_batch)
                assert report.unchanged == args.batch, report

            table = []
            # Each with whether it reads the record first, as the page does: that read is the
            # page's, not the save's, and is counted apart.
            actions_measured = (
                ("content save (embedded first)", content_save, True),
                ("URL-only save", url_only_save, True),
                ("delete", delete, True),
                (f"import of {args.batch} new lines", import_batch, False),
                ("the same lines again", import_again, False),
            )
            for name, action, page_read in actions_measured:
                read_statements, read_trips = counted(conn, Path(scratch), lambda: stored.get(conn, 1)) if page_read else (0, 0)
                statements, trips = counted(conn, Path(scratch), action)
                times = []
                for _ in range(args.repeats):
                    started = time.perf_counter()
                    action()
                    times.append((time.perf_counter() - started) * 1000)
                table.append((name, statements - read_statements, trips - read_trips, statistics.median(times), percentile(times, 0.9)))
    fake.stop()

    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    print(
        f"one save through the backoffice's actions on PostgreSQL {args.postgres}, {args.records:,} records imported "
        f"through the product (no ANALYZE), {DIMENSIONS} dimensions, the OpenAI fake on loopback; "
        f"{args.repeats} timed saves each; {os.cpu_count()} CPUs (load average {load})"
    )
    print(f"{'save':<32} {'statements':>10} {'round trips':>11} {'median ms':>10} {'p90 ms':>8}")
    for name, statements, trips, median, p90 in table:
        print(f"{name:<32} {statements:>10} {trips:>11} {median:>10.1f} {p90:>8.1f}")


if __name__ == "__main__":
    main()
