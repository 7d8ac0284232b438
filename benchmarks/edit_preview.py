"""What an edit would change for the golden queries, before it is saved, at 10,000 records and 1,000
golden queries: the preview (golden_rankings.measured_edit: saved in a transaction, measured,
rolled back; what the record page's Preview changes, `edit` and `preview --draft` run), the Quality page's ranking of every
golden query, and a record's golden queries. Not a test: it prints a table.

    taskset -c 0 ./scripts/benchmark edit_preview [--records 10000] [--golden 1000] [--dimensions 1536,384] [--repeats 5]

What it does, for each size of vectors:
- starts its own throwaway embedded PostgreSQL 18 (autovacuum off, no ANALYZE: as an import
  leaves a registry) and deletes it at the end;
- imports --records generated records (nine in ten enabled) with `payrail-embedder import`, and
  --golden golden queries with `payrail-embedder golden import`, which embeds and keeps them. The
  embedding service is payrail_test_support's OpenAI-compatible fake, answering at once: a
  record's vector is a random unit vector seeded by its text (unrelated texts, unrelated
  directions, as a real model's), a golden query's is a record's vector plus noise, so each golden
  query has its record among its nearest, as labelled queries do;
- times, in this process and on the same connection, each edit's preview: new guidance for a
  record some golden queries are about (a new vector: it leaves them), enabling a draft some are
  about, disabling such a record, a rename, a URL-only edit; then the ranking of every golden query
  (the Quality page's: quality_page.quality_report) and of one record's golden queries (its page); and,
  for comparison, eval's way: every golden query through search, after embedding them all;
- checks that the first edit's preview is what eval finds once it is saved: the same top three for
  every golden query (tests/quality/test_golden_rankings.py proves it on many edits, on both servers);
- runs the whole benchmark on the cores it is given: `taskset -c 0` gives it one, the server and
  the fake included.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from agent_latency import generated_rows, percentile
from payrail_embedder.embedders import OpenAIEmbedder, record_text
from payrail_embedder.postgres import connection
from payrail_embedder.quality import golden_rankings, quality_page
from payrail_embedder.quality.evaluation import run_queries
from payrail_embedder.registry import golden
from payrail_embedder.registry.write import Change, save_changes
from payrail_test_support.environments import cli_environment
from payrail_test_support.openai_fake import FAKE_MODEL, FakeOpenAI, random_embedding
from throwaway_postgres import throwaway_postgres

REPO = Path(__file__).resolve().parents[1]
CLI = Path(sys.executable).parent / "payrail-embedder"
# A golden query's text names the record it is about: "golden N about RECORD_TEXT_DIGEST".
GOLDEN_PREFIX = "golden "
NOISE = 0.6


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class Vectors:
    """The fake service's embedding: a record's text gets a random unit vector seeded by it; a
    golden query's, its record's vector plus NOISE times another random one, scaled to unit length."""

    def __init__(self) -> None:
        self.records: dict[str, str] = {}  # digest -> record text

    def __call__(self, text: str, dimensions: int) -> np.ndarray:
        if text.startswith(GOLDEN_PREFIX):
            about = self.records[text.rsplit(" ", 1)[1]]
            vector = random_embedding(about, dimensions) + NOISE * random_embedding(text, dimensions)
            return (vector / np.linalg.norm(vector)).astype(np.float32)
        return random_embedding(text, dimensions)


def write_catalog(path: Path, records: int, vectors: Vectors) -> list[dict]:
    rng, np_rng = random.Random(42), np.random.default_rng(42)
    catalog = []
    with path.open("w", encoding="utf-8") as file:
        for n, (provider, method, urls, docs_url, guidance, _) in enumerate(generated_rows(0, records, rng, np_rng)):
            record = {"provider": provider, "method": method, "urls": urls, "docsUrl": docs_url, "guidance": guidance, "enabled": n % 10 != 0}
            vectors.records[digest(record_text(provider, method, guidance))] = record_text(provider, method, guidance)
            catalog.append(record)
            file.write(json.dumps(record) + "\n")
    return catalog


def write_golden(path: Path, catalog: list[dict], count: int) -> list[dict]:
    """count golden queries, each about one record (drafts too), a few records having several."""
    rng = random.Random(7)
    about = [rng.randrange(len(catalog)) for _ in range(count)]
    lines = []
    for n, index in enumerate(about):
        record = catalog[index]
        text = record_text(record["provider"], record["method"], record["guidance"])
        lines.append({"query": f"{GOLDEN_PREFIX}{n} about {digest(text)}", "relevant": [[record["provider"], record["method"]]]})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return lines


def timed(function, repeats: int) -> tuple[list[float], object]:
    samples, result = [], None
    for _ in range(repeats):
        started = time.perf_counter()
        result = function()
        samples.append((time.perf_counter() - started) * 1000)
    return samples, result


def load(args, dimensions: int, scratch: Path, vectors: Vectors, fake: FakeOpenAI, url: str) -> tuple[dict, list[dict], list[dict]]:
    env = cli_environment(url, fake, scratch)
    catalog = write_catalog(scratch / "catalog.jsonl", args.records, vectors)
    golden_lines = write_golden(scratch / "golden.jsonl", catalog, args.golden)
    seconds = {}
    for name, command in (("import", ["import", str(scratch / "catalog.jsonl")]), ("golden import", ["golden", "import", str(scratch / "golden.jsonl")])):
        started = time.perf_counter()
        result = subprocess.run([str(CLI), *command], env=env, capture_output=True, text=True, cwd=REPO)
        seconds[name] = time.perf_counter() - started
        if result.returncode != 0:
            raise SystemExit(f"{name} failed:\n{result.stdout}{result.stderr}")
    fake.requests.clear()
    return seconds, catalog, golden_lines


def edits(conn, catalog: list[dict], golden_lines: list[dict]) -> list[tuple[str, Change]]:
    """The edits previewed: each of a record golden queries are about."""
    about = {tuple(line["relevant"][0]) for line in golden_lines}
    rows = {
        (provider, method): (record_id, version, enabled)
        for record_id, version, provider, method, enabled in conn.execute("select id, version, provider, method, enabled from payrail.provider_methods")
    }

    def change_of(record: dict, **fields) -> Change:
        record_id, version, _ = rows[(record["provider"], record["method"])]
        from payrail_embedder.registry.records import ProviderMethod

        current = ProviderMethod(record["provider"], record["method"], record["urls"], record["docsUrl"], record["guidance"], record["enabled"])
        return Change(replace(current, **fields), record_id, version)

    enabled = [r for r in catalog if r["enabled"] and (r["provider"], r["method"]) in about]
    drafts = [r for r in catalog if not r["enabled"] and (r["provider"], r["method"]) in about]
    return [
        ("new guidance (a new vector)", change_of(enabled[0], guidance=enabled[0]["guidance"] + "\nNotes: rewritten.")),
        ("enabling a draft", change_of(drafts[0], enabled=True)),
        ("disabling a record", change_of(enabled[1], enabled=False)),
        ("a rename (a new vector)", change_of(enabled[2], method=enabled[2]["method"] + " renamed")),
        ("URL-only (vector kept)", change_of(enabled[3], urls=["https://api.renamed.example/v1"])),
    ]


def same_as_eval_after_save(conn, embedder, change: Change) -> bool:
    """The preview's changes are exactly the golden queries whose top three eval finds changed once it is saved."""
    before = {r.labelled.golden_query_id: [(m.provider, m.method) for m in r.returned] for r in run_queries(conn, embedder, golden.labelled_queries(conn))}
    preview = golden_rankings.measured_edit(conn, embedder, change)
    save_changes(conn, embedder, [change], embeddings=[preview.embedding])
    effect = preview.effect
    after = {r.labelled.golden_query_id: [(m.provider, m.method) for m in r.returned] for r in run_queries(conn, embedder, golden.labelled_queries(conn))}
    said = {c.golden.golden_query_id: [(m.provider, m.method) for m in c.after.top] for c in effect.changes}
    return said == {i: top for i, top in after.items() if top != before[i]}


def measure(args, dimensions: int) -> list[tuple[str, list[float], str]]:
    vectors = Vectors()
    fake = FakeOpenAI(dimensions=dimensions, embedding=vectors).start()
    try:
        with throwaway_postgres(18, {"autovacuum": "off"}) as server, tempfile.TemporaryDirectory(prefix="payrail-bench-") as scratch:
            url = server.registry("payrail_bench")
            seconds, catalog, golden_lines = load(args, dimensions, Path(scratch), vectors, fake, url)
            print(f"{dimensions} dimensions: import {seconds['import']:.0f} s, golden import {seconds['golden import']:.1f} s", file=sys.stderr)

            def embedder():
                return OpenAIEmbedder(FAKE_MODEL, api_key="bench", base_url=fake.base_url)

            rows = []
            with connection.connect(url, autocommit=True) as conn:
                for label, change in edits(conn, catalog, golden_lines):
                    samples, effect = timed(lambda change=change: golden_rankings.measured_edit(conn, embedder, change).effect, args.repeats)
                    gains, loses, displaced = effect.counts()
                    rows.append((f"preview: {label}", samples, f"{len(effect.changes)} changed ({gains} gain, {loses} lose, {displaced} displaced)"))
                samples, report = timed(lambda: quality_page.quality_report(conn, embedder), args.repeats)
                rows.append(("Quality page's report (every golden query)", samples, f"{len(report.misses)} misses, hit@3 {report.metrics['hit@3']:.3f}"))
                record_id = conn.execute(
                    "select r.record_id from payrail.golden_query_records as r group by r.record_id order by count(*) desc, r.record_id limit 1"
                ).fetchone()[0]
                of_record = golden.golden_queries(conn, record_id=record_id)
                samples, _ = timed(lambda: golden_rankings.rank_golden_queries(conn, embedder, of_record), args.repeats)
                rows.append((f"a record's golden queries ({len(of_record)})", samples, ""))
                labelled = golden.labelled_queries(conn)
                samples, _ = timed(lambda: run_queries(conn, embedder, labelled), 1)
                rows.append(("for comparison: eval's way (every golden query through search)", samples, "embeds them all first"))
                first = edits(conn, catalog, golden_lines)[0][1]
                rows.append(("first edit's preview = eval after its save", [], "yes" if same_as_eval_after_save(conn, embedder, first) else "NO"))
    finally:
        fake.stop()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=10_000, help="records in the registry, imported through the product")
    parser.add_argument("--golden", type=int, default=1_000, help="golden queries, imported through the product")
    parser.add_argument("--dimensions", default="1536,384", help="vector sizes to measure, comma-separated")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per row")
    args = parser.parse_args()
    results = [(int(d), measure(args, int(d))) for d in args.dimensions.split(",")]
    load_average = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    cores = len(os.sched_getaffinity(0))
    print(
        f"golden queries ranked at {args.records:,} records and {args.golden:,} golden queries; {cores} core(s) given "
        f"(load average {load_average}); embedded PostgreSQL 18, autovacuum off, no ANALYZE; {args.repeats} runs per row"
    )
    print(f"{'dimensions':>10} {'what':<64} {'p50 ms':>9} {'max ms':>9}  result")
    for dimensions, rows in results:
        for label, samples, note in rows:
            timing = f"{statistics.median(samples):>9.0f} {percentile(samples, 1.0):>9.0f}" if samples else f"{'':>9} {'':>9}"
            print(f"{dimensions:>10} {label:<64} {timing}  {note}")


if __name__ == "__main__":
    main()
