"""Import throughput: `payrail-embedder import` of one JSON Lines file, records/s and peak memory by size.

    ./scripts/benchmark import_throughput [--sizes 1000,10000,100000] [--dimensions 1536] [--postgres 18|16] [--no-reimport]

One process, one run: a throwaway embedded PostgreSQL with autovacuum off (so no statistics are
taken behind the import's back: what a user meets in the minute after any bulk load, made
certain) and an OpenAI-compatible fake embedding server over real HTTP (random unit vectors, one
per text, at --dimensions). For each size N, a fresh registry (db/ applied, never analyzed) and a
file of N new enabled records, imported by the CLI in a subprocess, the way a user runs it. Peak
memory is the import process's maximum resident set (VmHWM, from its start). Nothing is analyzed; then the same
file is imported again (every line unchanged: planned and checked, nothing saved) unless --no-reimport.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg

from payrail_test_support.environments import cli_environment
from payrail_test_support.openai_fake import FAKE_MODEL, FakeOpenAI, random_embedding
from throwaway_postgres import throwaway_postgres

METHODS_PER_PROVIDER = 4
# About the length of the benchmark catalog's guidance, so rows are as wide as real ones.
GUIDANCE = (
    "Purpose: Returns the current and forecast values for the requested resource, with paging.\n"
    "Instructions: HTTP GET. Required parameters: id (STRING): the resource id; date (STRING): "
    "day to look up. Optional parameters: page (NUMBER): page number; limit (NUMBER): page size.\n"
    "Notes: Category: Data. Tool: Benchmark Provider {number}."
)
# What a production server is given (docs/operations.md, "Production server"); shared_buffers as that page
# recommends for a registry that fits it. --set adds or overrides.
SETTINGS = {"shared_buffers": "1GB", "max_wal_size": "4GB", "checkpoint_timeout": "30min", "autovacuum": "off"}


def catalog_record(number: int) -> dict:
    """The number-th benchmark record: 4 methods per provider, enabled."""
    provider_number = number // METHODS_PER_PROVIDER
    return {
        "provider": f"Benchmark Provider {provider_number:07d}",
        "method": f"Method {number:07d}",
        "urls": [f"https://api.example.com/v1/provider-{provider_number}/method-{number}"],
        "docsUrl": f"https://docs.example.com/provider-{provider_number}",
        "guidance": GUIDANCE.format(number=provider_number),
        "enabled": True,
    }


def write_catalog(path: Path, count: int) -> Path:
    with path.open("w", encoding="utf-8") as file:
        for number in range(count):
            file.write(json.dumps(catalog_record(number)) + "\n")
    return path


def start_fake(dimensions: int) -> FakeOpenAI:
    """The fake embedding server; it keeps only its last request (a million inputs would fill memory)."""
    fake = FakeOpenAI(dimensions=dimensions, embedding=random_embedding).start()
    fake.requests = collections.deque(maxlen=1)
    return fake


# The CLI, writing at exit its own peak resident memory (VmHWM, in kB) to the file named first:
# counted from its exec on, unlike wait4's ru_maxrss, which counts the parent it was forked from.
MEASURED_CLI = """
import atexit, sys
peak_file = sys.argv.pop(1)

def write_peak():
    with open("/proc/self/status") as status, open(peak_file, "w") as out:
        out.write(next(line.split()[1] for line in status if line.startswith("VmHWM:")))

atexit.register(write_peak)
from payrail_embedder.cli import cli
cli(prog_name="payrail-embedder")
"""


def cli_import(url: str, fake: FakeOpenAI, path: Path, scratch: Path) -> tuple[float, float, dict]:
    """`payrail-embedder import --json FILE` in a subprocess: (seconds, peak resident MB, its report)."""
    env = cli_environment(url, fake, scratch) | {"PAYRAIL_EMBEDDING_TIMEOUT": "600"}
    peak_file = scratch / "peak-memory-kb"
    started = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-c", MEASURED_CLI, str(peak_file), "import", "--json", str(path)],
        env=env,
        capture_output=True,
        text=True,
    )
    seconds = time.perf_counter() - started
    if result.returncode != 0:
        raise RuntimeError(f"import failed: {result.stdout[-2000:]} {result.stderr[-2000:]}")
    return seconds, int(peak_file.read_text()) / 1024, json.loads(result.stdout)


def print_table(headers: list[str], rows: list[list], decimals: int = 2) -> None:
    """A Markdown table, numbers right-aligned."""
    cells = [headers] + [[f"{c:.{decimals}f}" if isinstance(c, float) else str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for number, row in enumerate(cells):
        print("| " + " | ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) + " |")
        if number == 0:
            print("|" + "|".join("-" * (w + 1) + ":" for w in widths) + "|")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,10000,100000", help="comma-separated record counts")
    parser.add_argument("--dimensions", type=int, default=1536)
    parser.add_argument("--postgres", type=int, default=18, choices=[16, 18])
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="a postgresql.conf setting")
    parser.add_argument("--no-reimport", action="store_true", help="skip the second, unchanged import (it doubles the run)")
    args = parser.parse_args()
    settings = SETTINGS | dict(item.split("=", 1) for item in args.set)
    rows = []
    fake = start_fake(args.dimensions)
    with throwaway_postgres(args.postgres, settings) as server, tempfile.TemporaryDirectory(prefix="payrail-import-") as scratch:
        with psycopg.connect(server.admin_url) as conn:
            version = conn.execute("show server_version").fetchone()[0]
        print(
            f"PostgreSQL {version}, settings {settings}, {os.cpu_count()} CPUs; embeddings: {FAKE_MODEL} "
            f"over HTTP, {args.dimensions} dimensions; not analyzed (autovacuum off)\n",
            flush=True,
        )
        for size in (int(s) for s in args.sizes.split(",")):
            database = f"import_{size}"
            url = server.registry(database)
            path = write_catalog(Path(scratch) / f"catalog-{size}.jsonl", size)
            seconds, peak_mb, report = cli_import(url, fake, path, Path(scratch))
            assert report["created"] == size and report["saved"], report
            again = ["-", "-"]
            if not args.no_reimport:
                again_seconds, _, report = cli_import(url, fake, path, Path(scratch))
                assert report["unchanged"] == size, report
                again = [again_seconds, size / again_seconds]
            with psycopg.connect(url) as conn:
                table_mb = conn.execute(
                    "select (pg_total_relation_size('payrail.provider_methods')"
                    " + pg_total_relation_size('payrail.provider_method_half_vectors')"
                    " + pg_total_relation_size('payrail.provider_method_list_entries')) / 1e6"
                ).fetchone()[0]
            rows.append([size, f"{path.stat().st_size / 1e6:.0f}", f"{float(table_mb):.0f}", seconds, size / seconds, peak_mb, *again])
            print(f"  done: {size} records", flush=True)
            path.unlink()
            server.drop(database)
    fake.stop()
    print()
    print_table(
        ["records", "file MB", "tables MB", "import s", "records/s", "peak import MB", "re-import (unchanged) s", "re-import records/s"],
        rows,
        decimals=1,
    )


if __name__ == "__main__":
    main()
