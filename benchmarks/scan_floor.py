"""Where a semantic search's time goes: its first pass taken apart, on one core, against NumPy.

    ./scripts/benchmark scan_floor [--records 100000] [--dimensions 1536] [--load import|copy] [--set NAME=VALUE]

A throwaway embedded PostgreSQL 18 (search_speed's settings: shared_buffers holds the derived
table, autovacuum off), N enabled records loaded as search_speed loads them (`--load import`, the
default, through the product; `copy`: binary COPY), then `vacuum (analyze)` and every page read
into shared_buffers (search_speed's "after analyze": the fastest state). One session without
parallel workers (max_parallel_workers_per_gather = 0: one core), each row the p50 of --queries
runs, a new random query vector each run:
- NumPy: M @ q over the same float32 unit vectors, top 3, on one BLAS thread;
- the page scan: count(*) of payrail.provider_method_half_vectors, read sequentially;
- the scan to each vector: count(unit_embedding), which also reads every row's vector header;
- the distance alone: halfvec <#> of one in-memory vector with itself N times (so in the CPU's
  cache), less the same loop without the distance;
- the first pass's scan: max(unit_embedding <#> q) over the table;
- the first pass: the nearest 64 (what payrail._first_pass returns), and the whole search;
and how many of the pages the scan reads it found in shared_buffers.
The floor is the scan to each vector plus the distance in cache: what the first pass would cost if
reading memory cost nothing more, so no schema can make PostgreSQL and pgvector search faster on
one core. The rest of the first pass's scan is the cost of reading the vectors from memory.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from functools import partial

import numpy as np
import psycopg
from pgvector import HalfVector
from pgvector.psycopg import register_vector
from threadpoolctl import threadpool_limits

from import_throughput import print_table, start_fake
from search_speed import DEFAULT_SETTINGS, MODEL, SEARCH, analyze, catalog_vectors, load_by_copy, load_by_import, shared_buffers_for, timed, top3, unit_vectors
from throwaway_postgres import throwaway_postgres

HALF_VECTORS = "payrail.provider_method_half_vectors"


def p50_ms(run, queries: list[np.ndarray]) -> float:
    """The median of one run per query, after 3 runs that warm up caches and prepare statements."""
    times = [timed(partial(run, q))[1] for q in [*queries[:3], *queries]]
    return statistics.median(times[3:])


def parts(url: str, matrix: np.ndarray, queries: list[np.ndarray]) -> list[tuple[str, float]]:
    records = matrix.shape[0]
    with psycopg.connect(url, autocommit=True) as conn:
        register_vector(conn)
        conn.execute("set max_parallel_workers_per_gather = 0")

        def sql(statement: str, *extra):
            """A run of `statement`, given the query as a half vector where it takes one, then `extra`."""
            query = (lambda q: (HalfVector(q),)) if "%s::halfvec" in statement else (lambda q: ())
            return lambda q: conn.execute(statement, (*query(q), *extra)).fetchall()

        with threadpool_limits(limits=1):
            numpy_ms = p50_ms(lambda q: top3(matrix, q), queries)
        # An index would answer the counts without reading the table; the scan is what is measured.
        conn.execute("set enable_indexonlyscan = off")
        conn.execute("set enable_indexscan = off")
        conn.execute("set enable_bitmapscan = off")
        page_scan = p50_ms(sql(f"select count(*) from {HALF_VECTORS}"), queries)
        to_vectors = p50_ms(sql(f"select count(unit_embedding) from {HALF_VECTORS}"), queries)
        # A materialized CTE keeps the vector a value read from memory (a parameter alone would
        # be folded into a constant, and the distance computed once).
        loop = "with q as materialized (select %s::halfvec as h) select {} from q, pg_catalog.generate_series(1, %s)"
        in_cache = p50_ms(sql(loop.format("max(q.h <#> q.h)"), records), queries) - p50_ms(sql(loop.format("count(q.h)"), records), queries)
        scan = p50_ms(sql(f"select max(unit_embedding <#> %s::halfvec) from {HALF_VECTORS}"), queries)
        nearest = p50_ms(sql(f"select provider_method_id from {HALF_VECTORS} order by unit_embedding <#> %s::halfvec limit 64"), queries)
        # Pages the scan found in shared_buffers and pages it had the kernel copy in: a sequential
        # scan of a table over a quarter of shared_buffers reads through a small ring of buffers.
        plan = conn.execute(
            f"explain (analyze, buffers, format json) select max(unit_embedding <#> %s::halfvec) from {HALF_VECTORS}", (HalfVector(queries[0]),)
        ).fetchone()[0][0]["Plan"]
        print(f"the first pass's scan found {plan['Shared Hit Blocks']:,} pages in shared_buffers and read {plan['Shared Read Blocks']:,}\n")
        conn.execute("reset all")
        conn.execute("set max_parallel_workers_per_gather = 0")
        search = p50_ms(lambda q: conn.execute(SEARCH, ("benchmark question", q, MODEL)).fetchall(), queries)
    floor = to_vectors + in_cache
    return [
        ("NumPy, 1 thread (M @ q, top 3)", numpy_ms),
        ("page scan: count(*)", page_scan),
        ("scan to each vector: count(unit_embedding)", to_vectors),
        ("distance alone, vectors in cache", in_cache),
        ("floor: scan to each vector + distance in cache", floor),
        ("first pass's scan: max(distance)", scan),
        ("  of which reading the vectors from memory", scan - floor),
        ("first pass: nearest 64", nearest),
        ("whole search (payrail.search_provider_methods)", search),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--dimensions", type=int, default=1536)
    parser.add_argument("--queries", type=int, default=30, help="timed runs per row")
    parser.add_argument("--load", choices=["import", "copy"], default="import", help="how records are loaded (see above)")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="a postgresql.conf setting")
    args = parser.parse_args()
    settings = {**DEFAULT_SETTINGS, "shared_buffers": shared_buffers_for(args.records, args.dimensions), **dict(item.split("=", 1) for item in args.set)}
    matrix = catalog_vectors(args.records, args.dimensions)
    queries = list(unit_vectors(np.random.default_rng(args.records), args.queries, args.dimensions))
    with throwaway_postgres(18, settings) as server, tempfile.TemporaryDirectory(prefix="payrail-floor-") as scratch:
        url = server.registry("floor")
        if args.load == "import":
            fake = start_fake(args.dimensions)
            loaded = load_by_import(url, fake, args.records, scratch)
            fake.stop()
        else:
            loaded = load_by_copy(url, matrix, None)
        analyze(url)
        with psycopg.connect(url) as conn:
            shown = dict(
                conn.execute(
                    "select name, setting || coalesce(unit, '') from pg_settings where name = any(%s) order by name",
                    (["server_version", "shared_buffers", "huge_pages", "huge_pages_status"],),
                ).fetchall()
            )
        print(
            f"{args.records:,} records of {args.dimensions} dimensions loaded by {args.load}: {loaded} (s{', peak memory' if args.load == 'import' else ''}), then vacuum (analyze)"
            f" and every page cached; {shown}; one core (no parallel workers); p50 of {args.queries} runs\n"
        )
        rows = parts(url, matrix, queries)
    numpy_ms = rows[0][1]
    print_table(["part", "p50 ms", "/ NumPy 1 thread"], [[name, ms, f"{ms / numpy_ms:.2f}x"] for name, ms in rows])


if __name__ == "__main__":
    main()
