"""Deploys under traffic: what agents' searches see while `db apply` runs. Not a test: it prints a table.

    ./scripts/benchmark deploy [--sizes 20000,100000] [--rev REV] [--searchers 3] [--seconds 6] [--repeats 1]

For each size, on a throwaway embedded PostgreSQL 18 (shared_buffers sized as search_speed sizes them):
- the code measured is this checkout's src/ and db/ (uncommitted changes included), or with
  --rev REV that revision's (`git archive`), e.g. --rev main for the before; its own
  `payrail-embedder db apply` creates the registry, in a subprocess, as a deploy runs it;
- N enabled records of random unit vectors (1,536 dimensions) are loaded by binary COPY into
  payrail.provider_methods as the deployer: through the table's triggers and constraints, so the
  derived table is filled as the registry fills it. Neither VACUUM nor ANALYZE is run: autovacuum
  does what it does, as after a real import;
- `--searchers` threads search as a login granted payrail_agent (one connection each, autocommit,
  as the CLI, API and MCP server do): a semantic search with a new random vector, and every 4th
  an exact provider name; one more thread, a payrail_operator login, edits a record's URLs (an
  edit that keeps the vector) in a loop;
- after `--seconds` of that traffic alone, `db apply` runs (a new process, timed from start to
  exit) in each case, with `--seconds` of traffic after it: "current" (nothing changed: what every
  deploy of the same release runs), "function changed" (db/ with one function's message changed:
  payrail._check_query), "constraint changed" (db/ with provider_methods_guidance_length_check's
  limit changed), and "forced" (`db apply --force`: every file, and the derived rows checked; this
  checkout only: older revisions have no --force and always ran every file).
Columns: the apply's time, from its first connection to its process's exit (not the second or
so the process takes to import its packages, which touches no database), and the time it reports
itself (this checkout's `db apply` prints it: connected to done, without the process's exit); during the apply (every search that overlapped it): searches per
second, failed searches (with their SQLSTATEs), worst and median search latency; failed edits and
the worst edit latency; and, for comparison, searches per second with no apply running.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
import psycopg

from import_throughput import METHODS_PER_PROVIDER, catalog_record, print_table
from payrail_test_support.code import changed_tree, cli_of, code_tree, without_settings
from payrail_test_support.traffic import Traffic, overlapping
from search_speed import MODEL, load_by_copy, shared_buffers_for, unit_vectors
from throwaway_postgres import throwaway_postgres

DIMENSIONS = 1536
# Each case: what it changes in db/ (file, text, replacement), or None; and db apply's options.
CASES = {
    "current": (None, ()),
    "function changed": (("functions/200-search.sql", "message = 'query is empty',", "message = 'query is empty (deploy benchmark)',"), ()),
    "constraint changed": (
        ("schema/030-provider_methods.sql", "char_length(guidance) operator(pg_catalog.<=) 8000", "char_length(guidance) operator(pg_catalog.<=) 8001"),
        (),
    ),
    "forced": (None, ("--force",)),
}


def db_apply(tree: Path, url: str, *options: str, check: bool = True) -> tuple[float, float, str | None, str]:
    """`payrail-embedder db apply` of tree's code in a new process. Returns when its first session
    connected and when the process ended (time.perf_counter): the apply's time in the database,
    without the seconds the process takes to import its packages; why it failed (None: it did not),
    and its output. check: raise when it fails."""
    command, env = cli_of(tree, {**without_settings(), "PAYRAIL_DATABASE_URL": url}, "db", "apply", *options)
    with psycopg.connect(url, autocommit=True) as watcher:
        process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        connected = None
        while process.poll() is None and connected is None:
            if watcher.execute("select 1 from pg_stat_activity where application_name = 'payrail-embedder'").fetchone():
                connected = time.perf_counter()
            time.sleep(0.005)
        output, _ = process.communicate(timeout=3600)
    ended = time.perf_counter()
    # The CLI's last line: "Error: unavailable: database: deadlock detected. Hint: ..."
    failure = re.sub(r"^Error: \w+: (database: )?", "", output.strip().splitlines()[-1]).split(". Hint")[0] if process.returncode else None
    if failure and check:
        raise RuntimeError(f"db apply failed: {output}")
    return connected or ended, ended, failure, output.strip()


def load(url: str, count: int) -> float:
    """count enabled records by binary COPY (search_speed.load_by_copy; neither VACUUM nor ANALYZE),
    and the logins of the traffic; returns the seconds it took."""
    started = time.perf_counter()
    load_by_copy(url, unit_vectors(np.random.default_rng(count), count, DIMENSIONS), None)
    with psycopg.connect(url) as conn:
        conn.execute("create role bench_agent login in role payrail_agent")
        conn.execute("create role bench_editor login in role payrail_operator")
    return time.perf_counter() - started


def measure(url: str, tree: Path, records: int, searchers: int, seconds: float, options: tuple[str, ...]) -> list:
    providers = [catalog_record(n)["provider"] for n in range(0, records, METHODS_PER_PROVIDER)]
    traffic = Traffic(url, "bench_agent", "bench_editor", providers, list(range(1, records + 1)), DIMENSIONS, MODEL, searchers)
    with traffic.running():
        time.sleep(seconds)
        started, ended, failure, output = db_apply(tree, url, *options, check=False)
        time.sleep(seconds)
    alone = [c for c in traffic.searches if c.ended < started]
    searches = overlapping(traffic.searches, started, ended)
    failures = [c.error for c in searches if c.error]
    latencies = [c.milliseconds for c in searches]
    edits = overlapping(traffic.edits, started, ended)
    last = output.splitlines()[-1] if output else ""
    print(f"    {last}", flush=True)
    # What the apply itself says it took ("... (0.12 s)", "... in 1.49 s"); older releases do not say.
    own = re.search(r"(?:\(| in )([\d.]+) s\)?$", last)
    return [
        f"{ended - started:.2f}" + (f" FAILED: {failure}" if failure else ""),
        own.group(1) if own and not failure else "-",
        f"{len(searches) / max(ended - started, 1e-9):.1f}",
        f"{len(failures)}" + (f" ({', '.join(sorted(set(failures)))})" if failures else ""),
        f"{max(latencies):.0f}" if latencies else "-",
        f"{statistics.median(latencies):.0f}" if latencies else "-",
        f"{sum(1 for c in edits if c.error)}",
        f"{max(c.milliseconds for c in edits):.0f}" if edits else "-",
        f"{len(alone) / (started - min(c.started for c in alone)):.1f}",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="20000,100000", help="comma-separated record counts")
    parser.add_argument("--rev", help="measure this git revision's code (e.g. main) instead of this checkout's")
    parser.add_argument("--searchers", type=int, default=3, help="searching threads")
    parser.add_argument("--seconds", type=float, default=6.0, help="traffic before and after each apply")
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, of: {', '.join(CASES)}")
    parser.add_argument("--repeats", type=int, default=1, help="run the cases this many times, in turn")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    cases = args.cases.split(",")
    settings = {"shared_buffers": shared_buffers_for(max(sizes), DIMENSIONS), "max_wal_size": "4GB"}
    rows = []
    with tempfile.TemporaryDirectory(prefix="payrail-deploy-") as temp, throwaway_postgres(18, settings) as server:
        tree = code_tree(Path(temp) / "code", args.rev)
        with psycopg.connect(server.admin_url) as conn:
            version = conn.execute("show server_version").fetchone()[0]
        print(f"PostgreSQL {version}, code of {args.rev or 'this checkout'}, {os.cpu_count()} CPUs, {args.searchers} searchers and 1 editor\n", flush=True)
        for size in sizes:
            database = f"deploy_{size}"
            with psycopg.connect(server.admin_url, autocommit=True) as conn:
                conn.execute(f"create database {database}")
            url = server.url(database)
            connected, ended, _, _ = db_apply(tree, url)
            load_seconds = load(url, size)
            print(f"  {size} records: created in {ended - connected:.1f} s, loaded in {load_seconds:.0f} s", flush=True)
            for case in [case for _ in range(args.repeats) for case in cases]:
                change, options = CASES[case]
                if options and args.rev:
                    continue
                code = changed_tree(tree, Path(temp) / f"{case}-{size}-{len(rows)}".replace(" ", "-"), *change) if change else tree
                print(f"  {size} records, {case}:", flush=True)
                rows.append([size, case, *measure(url, code, size, args.searchers, args.seconds, options)])
                if change:  # back to the code measured (no traffic now), so the next case starts from it
                    db_apply(tree, url)
            server.drop(database)
            with psycopg.connect(server.admin_url, autocommit=True) as conn:
                conn.execute("drop role bench_agent")
                conn.execute("drop role bench_editor")
    print()
    print_table(
        [
            "records",
            "db apply",
            "apply s",
            "apply's own s",
            "searches/s during",
            "failed searches",
            "worst search ms",
            "median search ms",
            "failed edits",
            "worst edit ms",
            "searches/s alone",
        ],
        rows,
    )


if __name__ == "__main__":
    main()
