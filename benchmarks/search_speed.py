"""Search latency: the SQL semantic path and name path against an exact in-memory NumPy top 3.

    ./scripts/benchmark search_speed [--sizes 1000,10000,100000] [--dimensions 1536,384] [--first-pass half,exact] [--load import|copy]

One process, one run: a throwaway embedded PostgreSQL 18 with db/ applied and autovacuum off (so
the moment right after a load, before any statistics, lasts until the benchmark analyzes), its
shared_buffers large enough to hold the largest derived table. For each size N, N enabled records
loaded the way users load them (`--load import`, the default: `payrail-embedder import` of a JSON
Lines file in a subprocess, embedded by an OpenAI-compatible fake server over HTTP that answers a
random unit vector per text; `--load copy`: binary COPY, faster for trying settings), then two
states, each measured in new sessions (plans made afresh): right after the load (nothing
analyzed), and after `vacuum (analyze)` with every page read into shared_buffers. In each state,
for each first pass (`half`: the schema's, over payrail.provider_method_half_vectors; `exact`:
over the exact vectors, what db/ installs on pgvector before 0.7, measured by dropping that
table), query by query and interleaved so all see the same machine load:
- NumPy: M @ q over the same unit vectors (float32), top 3, on one BLAS thread and on all cores
  (OpenBLAS's idle threads sleep at once rather than spin into the next measurement);
- the semantic path: payrail.search_provider_methods(query, vector, model), a new random vector
  each time, as the schema runs it (with parallel workers where it plans them) and in a session
  that allows none (max_parallel_workers_per_gather = 0: one core);
- the name path: payrail.search_provider_methods(an existing provider name);
then the semantic path's throughput with 1, 2 and 4 concurrent clients (one connection each).
The workers column gives the workers the first pass planned and launched per search, read from
PostgreSQL itself (see first_pass_workers). Latencies are client round trips (psycopg, Unix
socket). Exact everywhere: no index.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import tempfile
import threading
import time
from functools import partial
from pathlib import Path

# OpenBLAS's idle threads spin for about 0.1 s of CPU after every call on all cores (measured:
# 110 ms), on the cores the search measured next needs: its leader and worker ran up to 2x slower.
# Threads that sleep at once leave the machine to the search.
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")
import numpy as np
import psycopg
from pgvector.psycopg import register_vector
from threadpoolctl import threadpool_limits

from import_throughput import catalog_record, cli_import, print_table, start_fake, write_catalog
from payrail_embedder.embedders import record_text
from payrail_test_support.openai_fake import FAKE_MODEL, random_embedding
from payrail_test_support.stored import content_hash
from throwaway_postgres import throwaway_postgres

MODEL = FAKE_MODEL
SEARCH = "select provider, method, urls, docs_url, guidance from payrail.search_provider_methods(%s, %s, %s)"
NAME_SEARCH = "select provider, method, urls, docs_url, guidance from payrail.search_provider_methods(%s)"
# What a production server needs for search (docs/operations.md, "Production server"): workers for all cores but
# the leader's; shared_buffers is sized in main(). --set adds or overrides.
DEFAULT_SETTINGS = {
    "autovacuum": "off",
    "max_wal_size": "4GB",
    "checkpoint_timeout": "30min",
    "max_parallel_workers_per_gather": str(max(0, (os.cpu_count() or 1) - 1)),
}
MINIMUM_SHARED_BUFFERS_MB = 2048
WORKERS_PLANNED = re.compile(r":num_workers (\d+)")


def derived_table_bytes(records: int, dimensions: int) -> int:
    """The size of payrail.provider_method_half_vectors: whole rows per 8 kB page (24-byte page
    header; per row a 4-byte line pointer, a 24-byte tuple header, the bigint id and the halfvec's
    8-byte header and 2 bytes per dimension, aligned to 8)."""
    row = -(-(24 + 8 + 8 + 2 * dimensions) // 8) * 8 + 4
    return -(-records // ((8192 - 24) // row)) * 8192


def shared_buffers_for(records: int, dimensions: int) -> str:
    """Enough to keep the derived table and the rows search re-ranks cached (docs/operations.md, "Production server")."""
    megabytes = -(-derived_table_bytes(records, dimensions) * 5 // 4 // 2**20)
    return f"{max(MINIMUM_SHARED_BUFFERS_MB, megabytes)}MB"


def unit_vectors(rng: np.random.Generator, count: int, dimensions: int) -> np.ndarray:
    matrix = rng.standard_normal((count, dimensions), dtype=np.float32)
    # Row norms without a temporary the size of the matrix (6 GB at 1,000,000 x 1,536).
    matrix /= np.sqrt(np.einsum("ij,ij->i", matrix, matrix))[:, np.newaxis]
    return matrix


def catalog_vectors(count: int, dimensions: int) -> np.ndarray:
    """The unit vectors the fake embedding server answers for the first `count` catalog records."""
    matrix = np.empty((count, dimensions), dtype=np.float32)
    for number in range(count):
        record = catalog_record(number)
        matrix[number] = random_embedding(record_text(record["provider"], record["method"], record["guidance"]), dimensions)
    return matrix


def load_by_import(url: str, fake, count: int, scratch: str) -> str:
    """The first `count` catalog records imported by the CLI: the seconds it took (its peak memory)."""
    path = write_catalog(Path(scratch) / f"catalog-{count}.jsonl", count)
    seconds, peak_mb, report = cli_import(url, fake, path, Path(scratch))
    path.unlink()
    assert report["created"] == count, report
    return f"{seconds:.1f} ({peak_mb:.0f} MB)"


def load_by_copy(url: str, matrix: np.ndarray, storage: str | None) -> str:
    """The catalog records with these vectors, by binary COPY: the seconds it took."""
    started = time.perf_counter()
    with psycopg.connect(url) as conn:
        register_vector(conn)
        if storage:
            conn.execute(f"alter table payrail.provider_methods alter column embedding set storage {storage}")
        conn.execute("select payrail.set_embedding_model(%s, %s)", (MODEL, matrix.shape[1]))
        copy_sql = (
            "copy payrail.provider_methods (provider, method, urls, docs_url, guidance, enabled, embedding,"
            " embedding_model, embedding_content_hash) from stdin (format binary)"
        )
        with conn.cursor().copy(copy_sql) as copy:
            copy.set_types(["text", "text", "text[]", "text", "text", "bool", "vector", "text", "bytea"])
            for number, vector in enumerate(matrix):
                r = catalog_record(number)
                copy.write_row(
                    (
                        r["provider"],
                        r["method"],
                        r["urls"],
                        r["docsUrl"],
                        r["guidance"],
                        True,
                        vector,
                        MODEL,
                        content_hash(r["provider"], r["method"], r["guidance"]),
                    )
                )
    return f"{time.perf_counter() - started:.1f}"


def analyze(url: str) -> None:
    """What autovacuum would do by and by (pages all-visible, statistics), then every page cached."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("vacuum (analyze)")
        # Bring every page into shared_buffers, as pg_prewarm would. A sequential scan of a table
        # over a quarter of shared_buffers reads through a small ring of buffers and leaves the
        # rest uncached; an index scan fills the buffers. Each reads a column the index lacks: an
        # index-only scan (every page all-visible after the vacuum) would read no table page.
        conn.execute("set enable_seqscan = off")
        conn.execute("set enable_bitmapscan = off")
        conn.execute("select sum(pg_catalog.length(guidance)) from payrail.provider_methods where id > 0")
        conn.execute("select sum(vector_dims(unit_embedding)) from payrail.provider_method_half_vectors where provider_method_id > 0")


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def top3(matrix: np.ndarray, q: np.ndarray) -> np.ndarray:
    scores = matrix @ q
    top = np.argpartition(-scores, 3)[:3]
    return top[np.argsort(-scores[top])]


def timed(run) -> tuple[object, float]:
    started = time.perf_counter()
    result = run()
    return result, (time.perf_counter() - started) * 1000


def fetch_all(conn: psycopg.Connection, sql, params) -> list:
    return conn.execute(sql, params).fetchall()


def first_pass_workers(url: str, table: str, queries: list[np.ndarray]) -> tuple[int, float]:
    """The workers the first pass over `table` plans, as PostgreSQL prints its plans
    (debug_print_plan) in a new session where every statement of the search is planned afresh,
    and launches per search: every process that scans the table, the leader and each worker,
    counts one sequential scan in its statistics."""
    plans: list[str] = []
    with psycopg.connect(url, autocommit=True) as conn:
        register_vector(conn)
        relid, scans_before = conn.execute("select relid, seq_scan from pg_stat_user_tables where relid = %s::regclass", (table,)).fetchone()
        conn.add_notice_handler(lambda notice: plans.append(notice.message_detail or ""))
        conn.execute("set debug_print_plan = on")
        conn.execute("set client_min_messages = log")
        for number, q in enumerate(queries):
            conn.execute(SEARCH, (f"benchmark plan {number}", q, MODEL)).fetchall()
        conn.execute("reset debug_print_plan")
        conn.execute("select pg_stat_force_next_flush()")  # this session's counts, flushed once it is idle
    with psycopg.connect(url) as conn:
        scans = conn.execute("select seq_scan from pg_stat_user_tables where relid = %s", (relid,)).fetchone()[0] - scans_before
    planned = max((int(n) for plan in plans if re.search(rf":relid {relid}\b", plan) for n in WORKERS_PLANNED.findall(plan)), default=0)
    return planned, scans / len(queries) - 1


def latencies(url: str, matrix: np.ndarray, queries: int, rng: np.random.Generator) -> dict[str, list[float]]:
    """Milliseconds per query: NumPy on one thread and on all cores, the semantic path with and
    without workers and the name path, interleaved (the name query right after a semantic one,
    whose scan has evicted the CPU caches), then the name path back to back."""
    count, dimensions = matrix.shape
    times: dict[str, list[float]] = {"numpy": [], "numpy all cores": [], "semantic": [], "semantic one core": [], "name after semantic": [], "name": []}
    with psycopg.connect(url, autocommit=True) as conn, psycopg.connect(url, autocommit=True) as one_core:
        register_vector(conn)
        register_vector(one_core)
        one_core.execute("set max_parallel_workers_per_gather = 0")
        for number in range(queries + 5):  # the first 5 warm up caches and prepare the statements
            q = unit_vectors(rng, 1, dimensions)[0]
            provider = catalog_record(int(rng.integers(count)))["provider"].lower()

            with threadpool_limits(limits=1):
                top, numpy_ms = timed(partial(top3, matrix, q))
            _, numpy_all_cores_ms = timed(partial(top3, matrix, q))
            semantic, semantic_ms = timed(partial(fetch_all, conn, SEARCH, (f"benchmark question {number}", q, MODEL)))
            alone, one_core_ms = timed(partial(fetch_all, one_core, SEARCH, (f"benchmark question {number}", q, MODEL)))
            named, name_ms = timed(partial(fetch_all, conn, NAME_SEARCH, (provider,)))

            if number == 0:  # the same answer, or the comparison is meaningless
                expected = [catalog_record(int(i))["method"] for i in top]
                assert [row[1] for row in semantic] == expected == [row[1] for row in alone], (semantic, alone, expected)
                assert len(named) == 3, named
            if number >= 5:
                times["numpy"].append(numpy_ms)
                times["numpy all cores"].append(numpy_all_cores_ms)
                times["semantic"].append(semantic_ms)
                times["semantic one core"].append(one_core_ms)
                times["name after semantic"].append(name_ms)
        for number in range(queries + 5):
            provider = catalog_record(int(rng.integers(count)))["provider"].lower()
            _, name_ms = timed(partial(fetch_all, conn, NAME_SEARCH, (provider,)))
            if number >= 5:
                times["name"].append(name_ms)
    return times


def throughput(url: str, dimensions: int, clients: int, seconds: float) -> float:
    """Semantic searches per second with `clients` connections searching back to back."""
    done = [0] * clients
    deadline = time.perf_counter() + seconds
    barrier = threading.Barrier(clients)

    def client(index: int) -> None:
        rng = np.random.default_rng(1000 + index)
        with psycopg.connect(url, autocommit=True) as conn:
            register_vector(conn)
            vectors = unit_vectors(rng, 64, dimensions)
            conn.execute(SEARCH, ("warm up", vectors[0], MODEL)).fetchall()
            barrier.wait()
            while time.perf_counter() < deadline:
                conn.execute(SEARCH, (f"benchmark question {done[index]}", vectors[done[index] % 64], MODEL)).fetchall()
                done[index] += 1

    started = time.perf_counter()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(done) / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,10000,100000", help="comma-separated record counts")
    parser.add_argument("--dimensions", default="1536,384", help="comma-separated")
    parser.add_argument("--first-pass", default="half,exact", help="comma-separated: half, exact (see above)")
    parser.add_argument("--queries", type=int, default=60, help="timed queries per size")
    parser.add_argument("--clients", default="1,2,4", help="concurrent clients for the throughput columns")
    parser.add_argument("--seconds", type=float, default=4.0, help="duration of each throughput measurement")
    parser.add_argument("--storage", choices=["main", "plain", "external", "extended"], help="override the embedding column's storage (default: the schema's)")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="a postgresql.conf setting")
    parser.add_argument("--postgres", type=int, default=18, choices=[16, 18])
    parser.add_argument("--load", choices=["import", "copy"], default="import", help="how records are loaded (see above)")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    clients = [int(c) for c in args.clients.split(",")]
    first_passes = args.first_pass.split(",")
    dimensions_list = [int(d) for d in args.dimensions.split(",")]
    shared_buffers = shared_buffers_for(max(sizes), max(dimensions_list))
    settings = {**DEFAULT_SETTINGS, "shared_buffers": shared_buffers, **dict(item.split("=", 1) for item in args.set)}

    rows = []
    fake = start_fake(max(dimensions_list)) if args.load == "import" else None
    with throwaway_postgres(args.postgres, settings) as server, tempfile.TemporaryDirectory(prefix="payrail-speed-") as scratch:
        with psycopg.connect(server.admin_url) as conn:
            version = conn.execute("show server_version").fetchone()[0]
            # huge_pages_status (PostgreSQL 17 and later) says whether huge pages were obtained.
            shown = dict(
                conn.execute(
                    "select name, setting || coalesce(unit, '') from pg_settings where name = any(%s) order by name",
                    (["shared_buffers", "max_parallel_workers_per_gather", "jit", "huge_pages", "huge_pages_status", "autovacuum"],),
                ).fetchall()
            )
        print(f"PostgreSQL {version}, settings {shown}, {os.cpu_count()} CPUs; NumPy {np.__version__} on 1 BLAS thread and on all cores")
        print(f"loaded by {args.load}; measured right after the load (never analyzed) and after vacuum (analyze)")
        print(f"{args.queries} timed queries per size, interleaved; throughput over {args.seconds:.0f} s per column\n", flush=True)
        for dimensions in dimensions_list:
            full = catalog_vectors(max(sizes), dimensions)
            if fake:
                fake.dimensions = dimensions
            for size in sizes:
                database = f"speed_{dimensions}_{size}"
                url = server.registry(database)
                matrix = full[:size]
                load_seconds = load_by_import(url, fake, size, scratch) if args.load == "import" else load_by_copy(url, matrix, args.storage)
                # Dropping the half-precision table cannot be undone: the exact first pass comes last.
                analyzed = False
                for state, first_pass in [("after load", "half"), ("after analyze", "half"), ("after analyze", "exact")]:
                    if first_pass not in first_passes:
                        continue
                    if state == "after analyze" and not analyzed:
                        analyze(url)
                        analyzed = True
                    with psycopg.connect(url, autocommit=True) as conn:
                        if first_pass == "exact":
                            conn.execute("drop table payrail.provider_method_half_vectors")
                        table_mb, derived_mb = conn.execute(
                            "select (pg_total_relation_size('payrail.provider_methods') + coalesce(pg_total_relation_size("
                            "to_regclass('payrail.provider_method_half_vectors')), 0)) / 1e6,"
                            " pg_total_relation_size(to_regclass('payrail.provider_method_half_vectors')) / 1e6"
                        ).fetchone()
                    rng = np.random.default_rng(size)
                    times = latencies(url, matrix, args.queries, rng)
                    first_pass_table = "payrail.provider_method_half_vectors" if first_pass == "half" else "payrail.provider_methods"
                    planned, launched = first_pass_workers(url, first_pass_table, list(unit_vectors(rng, 5, dimensions)))
                    qps = [throughput(url, dimensions, c, args.seconds) for c in clients]
                    numpy_p50 = statistics.median(times["numpy"])
                    semantic_p50 = statistics.median(times["semantic"])
                    rows.append(
                        [
                            dimensions,
                            size,
                            state,
                            first_pass,
                            f"{float(table_mb):.0f}",
                            "-" if derived_mb is None else f"{float(derived_mb):.0f}",
                            load_seconds,
                            numpy_p50,
                            statistics.median(times["numpy all cores"]),
                            semantic_p50,
                            percentile(times["semantic"], 0.95),
                            statistics.median(times["semantic one core"]),
                            f"{planned}/{launched:.1f}",
                            f"{semantic_p50 / numpy_p50:.1f}x",
                            statistics.median(times["name"]),
                            percentile(times["name"], 0.95),
                            statistics.median(times["name after semantic"]),
                            *[f"{q:.1f}" for q in qps],
                        ]
                    )
                    print(f"  done: {dimensions} dimensions, {size} records, {state}, {first_pass} first pass", flush=True)
                server.drop(database)
    if fake:
        fake.stop()
    print()
    print_table(
        [
            "dims",
            "records",
            "state",
            "first pass",
            "tables MB",
            "derived MB",
            "load s (import's peak memory)",
            "numpy 1 thread p50 ms",
            f"numpy {os.cpu_count()} threads p50 ms",
            "semantic p50 ms",
            "semantic p95 ms",
            "semantic no workers p50 ms",
            "workers planned/launched",
            "semantic/numpy 1 thread p50",
            "name p50 ms",
            "name p95 ms",
            "name after semantic p50 ms",
            *[f"semantic q/s {c} client{'s' if c > 1 else ''}" for c in clients],
        ],
        rows,
    )


if __name__ == "__main__":
    main()
