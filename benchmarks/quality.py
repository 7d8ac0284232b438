"""Retrieval quality of the product on the benchmark's dev split, next to a BM25 baseline.

    ./scripts/benchmark quality [--variants] [--runtime onnx|torch] [--eval-dir benchmarks/data]

Starts a throwaway embedded PostgreSQL 18, applies db/, imports records.jsonl through the
product's import path with the local model (timed: the write path's throughput), enables every
record, and runs queries-dev.jsonl through the product's eval (the search path). The model runs
on ONNX Runtime, as the product runs it; --runtime torch runs it on sentence-transformers.
BM25 (k1 1.2, b 0.75, standard library only) ranks the same records in the same run. --variants also measures
alternatives of what a record's and a query's embedding are made from, ranked exactly as the
SQL does (cosine, ties by normalized provider and method) in NumPy.
Dev split only: the held-out queries are not distributed here, and nothing is tuned on them.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from payrail_embedder.embedders import LOCAL_RUNTIMES, LocalEmbedder, record_text
from payrail_embedder.postgres.connection import connect
from payrail_embedder.quality import evaluation
from payrail_embedder.registry import catalog, labelled_queries, sync
from payrail_embedder.registry.records import Line, read_lines
from payrail_embedder.registry.search import embed_queries
from throwaway_postgres import throwaway_postgres

REPO = Path(__file__).resolve().parents[1]
# The benchmark's records and dev queries, shipped in the repository (benchmarks/data/README.md).
DEFAULT_EVAL_DIR = REPO / "benchmarks" / "data"
METRICS = evaluation.METRICS


# BM25 ---------------------------------------------------------------------------------------------


def tokens(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


class BM25:
    """Okapi BM25 with the non-negative idf ln(1 + (N - n + 0.5) / (n + 0.5)) (Lucene's); each distinct
    query term counts once. This reproduces the baseline figures of the benchmark's SOURCE.md exactly.
    """

    def __init__(self, documents: Sequence[str], k1: float = 1.2, b: float = 0.75) -> None:
        self.k1, self.b = k1, b
        self.docs = [Counter(tokens(d)) for d in documents]
        self.lengths = [sum(d.values()) for d in self.docs]
        self.average_length = sum(self.lengths) / len(self.docs)
        frequency = Counter(term for d in self.docs for term in d)
        n = len(self.docs)
        self.idf = {t: math.log(1 + (n - f + 0.5) / (f + 0.5)) for t, f in frequency.items()}

    def top(self, query: str, k: int = 3) -> list[int]:
        """Indexes of the k best documents; equal scores keep document order."""
        terms = [t for t in dict.fromkeys(tokens(query)) if t in self.idf]
        scores = []
        for index, (doc, length) in enumerate(zip(self.docs, self.lengths, strict=True)):
            norm = self.k1 * (1 - self.b + self.b * length / self.average_length)
            score = sum(self.idf[t] * doc[t] * (self.k1 + 1) / (doc[t] + norm) for t in terms if t in doc)
            scores.append((-score, index))
        return [index for _, index in sorted(scores)[:k]]


# Scoring ------------------------------------------------------------------------------------------


def score(queries: Sequence[labelled_queries.LabelledQuery], rankings: Sequence[Sequence[tuple[str, str]]], names) -> dict:
    """The metrics of rankings, names compared as the registry compares them (names: labelled_queries.NormalizedNames)."""
    totals = dict.fromkeys(METRICS, 0.0)
    for labelled, returned in zip(queries, rankings, strict=True):
        relevant, ranked = [names.pair(*p) for p in labelled.relevant], [names.pair(*p) for p in returned]
        for name, value in evaluation.query_metrics(relevant, ranked).items():
            totals[name] += value
    return {name: totals[name] / len(queries) for name in METRICS}


def names_a_relevant_provider(labelled: labelled_queries.LabelledQuery) -> bool:
    return any(provider.lower() in labelled.query.lower() for provider, _ in labelled.relevant)


def exact_cosine_top3(records: Sequence[dict], matrix: np.ndarray, query_vectors: np.ndarray, names) -> list[list]:
    """The semantic path's order in NumPy (evaluation.nearest_three), as (provider, method) pairs."""
    keys = [names.pair(r["provider"], r["method"]) for r in records]
    return [[(records[i]["provider"], records[i]["method"]) for i in top] for top in evaluation.nearest_three(matrix, keys, query_vectors)]


# Variants of what is embedded ---------------------------------------------------------------------


def guidance_lines(guidance: str) -> dict[str, str]:
    """The template's Purpose / Instructions / Notes lines, by label (a line without one is "Other")."""
    lines: dict[str, str] = {}
    for line in guidance.splitlines():
        label, _, rest = line.partition(": ")
        key = label if label in ("Purpose", "Instructions", "Notes") and rest else "Other"
        lines[key] = (lines.get(key, "") + " " + (rest if key != "Other" else line)).strip()
    return lines


def plain_instructions(text: str) -> str:
    """Instructions without the HTTP verb, the "Required/Optional parameters" labels and the types."""
    text = re.sub(r"\bHTTP [A-Z]+\.\s*", "", text)
    text = re.sub(r"\b(Required|Optional) parameters:\s*", "", text)
    return re.sub(r"\s*\((STRING|NUMBER|BOOLEAN|ENUM|ARRAY|OBJECT|DATE[^)]*|TIME[^)]*|[a-z]+)\)", "", text)


def category(notes: str) -> str:
    match = re.search(r"Category: ([^.]+)\.", notes)
    return match.group(1) if match else ""


def without_labels(guidance: str) -> str:
    return re.sub(r"(?m)^(Purpose|Instructions|Notes): ", "", guidance)


RECORD_VARIANTS: dict[str, Callable[[str, str, str], str]] = {
    "product record_text": record_text,
    "provider: method only": lambda p, m, g: f"{p}: {m}",
    "provider: method + Purpose": lambda p, m, g: f"{p}: {m}\n{guidance_lines(g).get('Purpose', '')}".strip(),
    "provider: method + Purpose + category": lambda p, m, g: "\n".join(
        filter(None, [f"{p}: {m}", guidance_lines(g).get("Purpose"), category(guidance_lines(g).get("Notes", ""))])
    ),
    "guidance without Notes": lambda p, m, g: "\n".join(filter(None, [f"{p}: {m}", guidance_lines(g).get("Purpose"), guidance_lines(g).get("Instructions")])),
    "guidance without Instructions": lambda p, m, g: "\n".join(filter(None, [f"{p}: {m}", guidance_lines(g).get("Purpose"), guidance_lines(g).get("Notes")])),
    "Purpose + plain parameters (no HTTP/labels/types)": lambda p, m, g: "\n".join(
        filter(
            None,
            [f"{p}: {m}", guidance_lines(g).get("Purpose"), plain_instructions(guidance_lines(g).get("Instructions", ""))],
        )
    ),
    "full guidance, template labels dropped": lambda p, m, g: f"{p}: {m}\n{without_labels(g)}",
    "full guidance, labels + HTTP/parameter boilerplate dropped": lambda p, m, g: f"{p}: {m}\n{plain_instructions(without_labels(g))}",
}

COURTESY = re.compile(
    r"[^.!?]*\b(thank|thanks|appreciate|grateful|eager|excited|looking forward|your help|your assistance)\b[^.!?]*[.!?]?",
    re.IGNORECASE,
)
QUERY_VARIANTS: dict[str, Callable[[str], str]] = {
    "as written": lambda q: q,
    "courtesy sentences dropped": lambda q: COURTESY.sub("", q).strip() or q,
}


def run_variants(records: list[dict], queries: list, embedder: LocalEmbedder, product: dict, names) -> list[tuple]:
    rows = []
    query_texts = [q.query for q in queries]
    raw_queries = np.array(embed_queries(embedder, query_texts))
    for name, make_text in RECORD_VARIANTS.items():
        started = time.perf_counter()
        if name == "product record_text":  # the vectors the import stored
            matrix = np.array([r["embedding"] for r in records])
        else:
            matrix = np.array(embedder.embed([make_text(r["provider"], r["method"], r["guidance"]) for r in records]))
        metrics = score(queries, exact_cosine_top3(records, matrix, raw_queries, names), names)
        rows.append((name, "as written", metrics, time.perf_counter() - started))
        if name == "product record_text":
            same = all(abs(metrics[k] - product[k]) < 1e-9 for k in METRICS)
            print(f"check: NumPy exact cosine over the stored vectors {'equals' if same else 'DIFFERS FROM'} the SQL eval\n")
            for query_name, prepare in QUERY_VARIANTS.items():
                if query_name != "as written":
                    started = time.perf_counter()
                    vectors = np.array(embedder.embed([prepare(q) for q in query_texts]))
                    metrics = score(queries, exact_cosine_top3(records, matrix, vectors, names), names)
                    rows.append((name, query_name, metrics, time.perf_counter() - started))
    return rows


# The registry ---------------------------------------------------------------------------------------


def benchmark_data(eval_dir: Path) -> tuple[list[Line], list[labelled_queries.LabelledQuery]]:
    """The benchmark's records (records.jsonl, every line valid) and dev queries (queries-dev.jsonl)."""
    lines = list(read_lines(eval_dir / "records.jsonl"))
    refused = [line for line in lines if not isinstance(line, Line)]
    if refused:
        sys.exit(f"records refused: {refused[:3]}")
    return lines, labelled_queries.read_labelled_queries(eval_dir / "queries-dev.jsonl")


def imported_registry(server, name: str, embedder: LocalEmbedder, lines: Sequence[Line]) -> tuple[str, float]:
    """A new registry with the records imported through the product's import path (its seconds
    are returned), then every record enabled; its URL."""
    url = server.registry(name)
    with connect(url, autocommit=True) as conn:
        started = time.perf_counter()
        report = catalog.import_records(conn, lambda: embedder, lines)
        seconds = time.perf_counter() - started
        assert report.saved and report.created == len(lines), report.to_json()
        conn.execute("update payrail.provider_methods set enabled = true")
    return url, seconds


def stored_records(conn) -> list[dict]:
    """The enabled records with their stored vectors, in id order."""
    return [
        {"provider": p, "method": m, "guidance": g, "embedding": e}
        for p, m, g, e in conn.execute(
            "select provider, method, guidance, embedding::real[] from payrail.provider_methods where enabled order by id"
        ).fetchall()
    ]


# Output -------------------------------------------------------------------------------------------


def print_table(headers: Sequence[str], rows: Sequence[Sequence]) -> None:
    cells = [[str(h) for h in headers]] + [[f"{c:.3f}" if isinstance(c, float) else str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for number, row in enumerate(cells):
        print("| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |")
        if number == 0:
            print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--eval-dir", type=Path, default=DEFAULT_EVAL_DIR, help="holds records.jsonl, queries-dev.jsonl")
    parser.add_argument("--variants", action="store_true", help="also measure variants of the embedded texts")
    parser.add_argument("--runtime", choices=LOCAL_RUNTIMES, default="onnx", help="run the local model on ONNX Runtime (the product's) or torch")
    args = parser.parse_args()
    records_path, queries_path = args.eval_dir / "records.jsonl", args.eval_dir / "queries-dev.jsonl"
    lines, queries = benchmark_data(args.eval_dir)
    embedder = LocalEmbedder(runtime=args.runtime)
    embedder.embed(["warm up: load the model before the clock starts"])

    with throwaway_postgres() as server:
        # The write path, twice: import (new records embedded, then saved) and sync (drafts embedded).
        url, import_seconds = imported_registry(server, "quality", embedder, lines)

        sync_url = server.registry("sync")
        with connect(sync_url, autocommit=True) as conn:
            with conn.cursor() as cursor:
                cursor.executemany(
                    "insert into payrail.provider_methods (provider, method, urls, docs_url, guidance) values (%s, %s, %s, %s, %s)",
                    [(ln.record.provider, ln.record.method, ln.record.urls, ln.record.docs_url, ln.record.guidance) for ln in lines],
                )
            started = time.perf_counter()
            sync_report = sync.sync(conn, embedder)
            sync_seconds = time.perf_counter() - started
        assert sync_report.embedded == len(lines), sync_report.to_json()
        server.drop("sync")

        with connect(url, autocommit=True) as conn:
            started = time.perf_counter()
            product = evaluation.evaluate(conn, lambda: embedder, queries)
            eval_seconds = time.perf_counter() - started
            unnamed = [i for i, q in enumerate(queries) if not names_a_relevant_provider(q)]
            product_unnamed = evaluation.evaluate(conn, lambda: embedder, [queries[i] for i in unnamed])
            records = stored_records(conn)
            names = labelled_queries.NormalizedNames(conn, [*((r["provider"], r["method"]) for r in records), *(pair for q in queries for pair in q.relevant)])

    print(f"records: {len(records)} ({records_path}); dev queries: {len(queries)} ({queries_path})")
    print(
        f"model: {embedder.model_name} on the {embedder.runtime} runtime, {os.cpu_count()} CPUs; not analyzed by the benchmark (autovacuum on, as a server runs)"
    )
    print(f"product record_text: {record_text('PROVIDER', 'METHOD', 'GUIDANCE')!r}")
    print_table(
        ["write path (local model)", "records", "seconds", "records/s"],
        [
            ("import (embed + upsert, one transaction)", len(lines), import_seconds, len(lines) / import_seconds),
            (f"sync (embed drafts, {sync.default_batch_size(embedder)} per batch)", sync_report.embedded, sync_seconds, sync_report.embedded / sync_seconds),
        ],
    )
    print(f"eval through the SQL search path: {len(queries)} queries in {eval_seconds:.1f} s (one embedding batch)\n")

    bm25 = BM25([f"{r['provider']} {r['method']} {r['guidance']}" for r in records])
    bm25_rankings = [[(records[i]["provider"], records[i]["method"]) for i in bm25.top(q.query)] for q in queries]
    bm25_metrics = score(queries, bm25_rankings, names)
    bm25_unnamed = score([queries[i] for i in unnamed], [bm25_rankings[i] for i in unnamed], names)
    print(f"dev split: all {len(queries)} queries, and the {len(unnamed)} that name no relevant provider")
    print_table(
        ["metric", "payrail, all", "BM25, all", "payrail, unnamed", "BM25, unnamed"],
        [(n, product.metrics[n], bm25_metrics[n], product_unnamed.metrics[n], bm25_unnamed[n]) for n in METRICS],
    )

    if args.variants:
        variant_rows = run_variants(records, queries, embedder, product.metrics, names)
        print(f"variants (dev only, exact cosine in NumPy, {len(records)} records, {len(queries)} queries)")
        print_table(
            ["record text", "query text", *METRICS, "embedding s"],
            [(r, q, *(m[k] for k in METRICS), s) for r, q, m, s in variant_rows] + [("BM25 baseline", "-", *(bm25_metrics[k] for k in METRICS), 0.0)],
        )


if __name__ == "__main__":
    main()
