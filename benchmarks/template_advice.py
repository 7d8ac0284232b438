"""Advice on the editorial template, measured on the two shipped catalogs: how many records get
each piece of advice, and what asking for it costs.

- starts its own throwaway embedded PostgreSQL 18 in a temporary directory and applies db/;
- saves each catalog's records as drafts (advice reads the fields alone: no vector is needed),
  catalog/sample.jsonl and benchmarks/data/records.jsonl each into a registry of its own;
- prints, for each, how many records get each piece (payrail.count_template_advice, the figures
  `payrail-embedder advise --summary`, the Quality page and an import's summary give);
- times payrail.count_template_advice() over every record (what the Quality page adds), the
  median of --repeat runs, on the benchmark's catalog and on copies of it --scale times larger.

Usage: ./scripts/benchmark template_advice [--repeat 5] [--scale 4]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import psycopg

from throwaway_postgres import throwaway_postgres

REPO = Path(__file__).resolve().parents[1]
CATALOGS = {"catalog/sample.jsonl": REPO / "catalog" / "sample.jsonl", "benchmarks/data/records.jsonl": REPO / "benchmarks" / "data" / "records.jsonl"}


def load(url: str, lines: list[dict], copies: int = 1) -> int:
    """The lines as drafts (each copy's providers suffixed, so names stay unique); how many records."""
    with psycopg.connect(url) as conn, conn.cursor() as cursor:
        for copy in range(copies):
            suffix = f" (copy {copy})" if copy else ""
            cursor.executemany(
                "insert into payrail.provider_methods (provider, method, urls, docs_url, guidance) values (%s, %s, %s, %s, %s)",
                [(line["provider"] + suffix, line["method"], line["urls"], line["docsUrl"], line["guidance"]) for line in lines],
            )
        return conn.execute("select count(*) from payrail.provider_methods").fetchone()[0]


def counts(url: str) -> list[tuple[str, str, int]]:
    with psycopg.connect(url) as conn:
        return [
            (code, summary, enabled + drafts)
            for code, summary, enabled, drafts in conn.execute("select code, summary, enabled, drafts from payrail.count_template_advice()")
        ]


def seconds(url: str, repeat: int) -> float:
    """The median time of payrail.count_template_advice() over every record, on one connection."""
    with psycopg.connect(url) as conn:
        conn.execute("select * from payrail.count_template_advice()")  # plans and caches warmed
        times = []
        for _ in range(repeat):
            started = time.perf_counter()
            conn.execute("select * from payrail.count_template_advice()").fetchall()
            times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5, help="timed runs of each size (median printed)")
    parser.add_argument("--scale", type=int, default=4, help="also time copies of the benchmark catalog this many times larger")
    args = parser.parse_args()
    catalogs = {name: [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()] for name, path in CATALOGS.items()}
    with throwaway_postgres(18) as server:
        measured = {}
        for number, (name, lines) in enumerate(catalogs.items()):
            url = server.registry(f"advice_{number}")
            measured[name] = (load(url, lines), counts(url))
        print("| advice (code) | " + " | ".join(f"{name} ({records:,} records)" for name, (records, _) in measured.items()) + " |")
        print("|---|" + "---:|" * len(measured))
        rows = zip(*(advice for _, advice in measured.values()), strict=True)
        for row in rows:
            code, summary, _ = row[0]
            print(
                f"| {summary} (`{code}`) | "
                + " | ".join(f"{records:,} ({records / measured[name][0]:.0%})" for (_, _, records), name in zip(row, measured))
                + " |"
            )
        print()
        print(f"| records | count_template_advice() (median of {args.repeat}) | per record |")
        print("|---:|---:|---:|")
        for copies in (1, args.scale):
            url = server.registry(f"advice_timed_{copies}")
            records = load(url, catalogs["benchmarks/data/records.jsonl"], copies)
            took = seconds(url, args.repeat)
            print(f"| {records:,} | {took * 1000:,.0f} ms | {took / records * 1e6:.0f} µs |")


if __name__ == "__main__":
    main()
