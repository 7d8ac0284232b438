"""The local model on ONNX Runtime is the torch model: the same vectors, rankings and eval figures on
the benchmark's records and dev queries, and which runtime embeds a batch faster. Prints tables.

    ./scripts/benchmark runtime_parity [--eval-dir benchmarks/data]

For each runtime of the bundled all-MiniLM-L6-v2 (torch: sentence-transformers; onnx:
payrail_embedder.embedders.local_model), it imports records.jsonl (2,479 records) into its own registry on
a throwaway embedded PostgreSQL 18 through the product's import path (timed: the write path's
throughput), enables every record and runs queries-dev.jsonl (296 queries) through the product's
eval. Then it compares the two:
- every stored record vector and every query vector: the cosine distance between the runtimes'
  (the requirement: at most 1e-5);
- every eval figure, and every query's answer (the same three records in the same order);
- why no answer could differ: per query, pgvector's own cosine distances (`<=>`, what search orders
  by) to every record, on each runtime. When a distance moves by at most c between the runtimes,
  the records ranked 1st to 4th keep their order as long as each gap between consecutive ones
  exceeds 2c: the top 3 and their order cannot change. It prints the smallest such margin.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np

from payrail_embedder.embedders import LOCAL_RUNTIMES, LocalEmbedder
from payrail_embedder.embedders.local_model import SAME_MODEL_TOLERANCE, cosine_distances
from payrail_embedder.postgres.connection import connect, naming_pgvector
from payrail_embedder.quality import evaluation
from payrail_embedder.registry import search
from quality import DEFAULT_EVAL_DIR, METRICS, benchmark_data, imported_registry, print_table, stored_records
from throwaway_postgres import throwaway_postgres


def answers(conn, embedder: LocalEmbedder, queries, vectors) -> list[list[tuple[str, str]]]:
    """Each query's answer through the product's search, given its vector."""
    return [
        [(m["provider"], m["method"]) for m in search.search_provider_methods(search.holding(conn), lambda: embedder, q.query, query_vector=v)]
        for q, v in zip(queries, vectors, strict=True)
    ]


def pgvector_distances(conn, query_vector: np.ndarray) -> np.ndarray:
    """pgvector's cosine distance from the query to every enabled record, in id order."""
    distances = naming_pgvector(conn, "select embedding operator({pgvector}.<=>) %s from payrail.provider_methods where enabled order by id")
    rows = conn.execute(distances, (query_vector,)).fetchall()
    return np.array([row[0] for row in rows])


def run_runtime(server, runtime: str, lines, queries) -> dict:
    embedder = LocalEmbedder(runtime=runtime)
    embedder.embed(["warm up: load the model before the clock starts"])
    url, import_seconds = imported_registry(server, f"parity_{runtime}", embedder, lines)
    with connect(url, autocommit=True) as conn:
        started = time.perf_counter()
        vectors = search.embed_queries(embedder, [q.query for q in queries])
        query_seconds = time.perf_counter() - started
        name_path = [conn.execute("select payrail.query_takes_name_path(%s)", (q.query,)).fetchone()[0] for q in queries]
        return {
            "import_seconds": import_seconds,
            "query_seconds": query_seconds,
            "records": stored_records(conn),
            "queries": np.array(vectors),
            "metrics": evaluation.evaluate(conn, lambda: embedder, queries).metrics,
            "answers": answers(conn, embedder, queries, vectors),
            "distances": [pgvector_distances(conn, v) for v in vectors],
            "name_path": name_path,
        }


def top4_margin(reference: np.ndarray, other: np.ndarray) -> tuple[float, float]:
    """The smallest gap between the reference's 1st..4th nearest distances, and the largest change
    of any distance between the two."""
    nearest = np.sort(reference)[:4]
    return float(np.diff(nearest).min()), float(np.abs(other - reference).max())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--eval-dir", type=Path, default=DEFAULT_EVAL_DIR, help="holds records.jsonl, queries-dev.jsonl")
    args = parser.parse_args()
    lines, queries = benchmark_data(args.eval_dir)

    with throwaway_postgres() as server:
        results = {runtime: run_runtime(server, runtime, lines, queries) for runtime in LOCAL_RUNTIMES}
    torch_run, onnx_run = results["torch"], results["onnx"]

    print(
        f"{len(lines)} records, {len(queries)} dev queries ({args.eval_dir}); {os.cpu_count()} CPUs; not analyzed by the benchmark (autovacuum on, as a server runs)"
    )
    print_table(
        ["runtime", "import: records/s", "queries embedded in one batch: s"],
        [(r, len(lines) / results[r]["import_seconds"], results[r]["query_seconds"]) for r in LOCAL_RUNTIMES],
    )

    keys = [(r["provider"], r["method"]) for r in torch_run["records"]]
    assert keys == [(r["provider"], r["method"]) for r in onnx_run["records"]], "the registries hold other records"
    record_distances = cosine_distances(np.array([r["embedding"] for r in onnx_run["records"]]), np.array([r["embedding"] for r in torch_run["records"]]))
    query_distances = cosine_distances(onnx_run["queries"], torch_run["queries"])
    print_table(
        ["vectors (onnx vs torch)", "count", "max cosine distance", "max allowed", "all within"],
        [
            (name, len(d), f"{d.max():.2e}", f"{SAME_MODEL_TOLERANCE:g}", bool(d.max() <= SAME_MODEL_TOLERANCE))
            for name, d in (("records (stored)", record_distances), ("dev queries", query_distances))
        ],
    )

    print_table(
        ["metric", "torch", "onnx", "identical"],
        [(m, torch_run["metrics"][m], onnx_run["metrics"][m], torch_run["metrics"][m] == onnx_run["metrics"][m]) for m in METRICS],
    )
    same = sum(a == b for a, b in zip(torch_run["answers"], onnx_run["answers"], strict=True))
    print(f"answers: {same} of {len(queries)} queries get the same three records in the same order\n")

    semantic = [i for i, named in enumerate(torch_run["name_path"]) if not named]
    margins = [top4_margin(torch_run["distances"][i], onnx_run["distances"][i]) for i in semantic]
    gaps, changes = np.array([g for g, _ in margins]), np.array([c for _, c in margins])
    safe = gaps > 2 * changes
    tightest = int(np.argmin(gaps / np.maximum(2 * changes, 1e-300)))
    print(f"rankings ({len(semantic)} queries on the semantic path; pgvector's distances, torch registry as reference):")
    print(f"- largest change of a query-record distance between the runtimes: {changes.max():.2e}")
    print(f"- smallest gap between consecutive 1st..4th nearest records: {gaps.min():.2e}")
    print(
        f"- queries whose every such gap exceeds twice their largest change: {int(safe.sum())} of {len(semantic)}; "
        f"tightest ratio {gaps[tightest] / (2 * changes[tightest]):.0f}x (gap {gaps[tightest]:.2e}, change {changes[tightest]:.2e})"
    )
    for i in np.flatnonzero(~safe):
        query = queries[semantic[i]]
        print(f"  not provable by the margin: line {query.line} (gap {gaps[i]:.2e}, change {changes[i]:.2e}): {query.query[:80]}")


if __name__ == "__main__":
    main()
