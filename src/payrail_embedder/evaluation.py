"""Retrieval quality: labelled queries run through the product's own search path, and their metrics.

A labelled query is {"query": "...", "relevant": [[provider, method], ...]}. Metrics, per query
and then averaged (the definitions of the benchmark's SOURCE.md), with rel the relevant pairs
and top_k the first k results:
recall@k = |rel ∩ top_k| / |rel|; capped recall@3 = |rel ∩ top_3| / min(|rel|, 3);
hit@k = 1 if rel ∩ top_k is not empty; MRR@3 = 1 / rank of the first relevant result, or 0.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from .embedders import Embedder, EmbeddingUnavailable
from .search import SearchError, embed_queries, search_provider_methods

METRICS = ("hit@1", "hit@3", "recall@1", "recall@3", "capped_recall@3", "mrr@3")

Pair = tuple[str, str]


class EvaluationError(Exception):
    """The labelled file cannot be read, or a query has no answer (the search failed)."""


@dataclass(frozen=True)
class LabelledQuery:
    line: int
    query: str
    relevant: tuple[Pair, ...]


def normalize_name(name: str) -> str:
    """payrail._normalize_name in Python: trimmed, case-folded, runs of white space collapsed."""
    return re.sub(r"\s+", " ", name.strip()).lower()


def pair_key(provider: str, method: str) -> Pair:
    return normalize_name(provider), normalize_name(method)


def read_labelled_queries(path: Path) -> list[LabelledQuery]:
    queries = []
    with path.open(encoding="utf-8") as file:
        for number, text in enumerate(file, start=1):
            if not text.strip():
                continue
            try:
                data = json.loads(text)
                query, relevant = data["query"], data["relevant"]
                if not isinstance(query, str):
                    raise ValueError("query must be a string")
                if not (
                    isinstance(relevant, list)
                    and relevant
                    and all(
                        isinstance(pair, list) and len(pair) == 2 and all(isinstance(n, str) for n in pair)
                        for pair in relevant
                    )
                ):
                    raise ValueError("relevant must be a non-empty array of [provider, method] pairs")
            except (json.JSONDecodeError, KeyError, TypeError, ValueError) as error:
                reason = f"missing field {error}" if isinstance(error, KeyError) else str(error)
                raise EvaluationError(f"{path}:{number}: {reason}") from error
            queries.append(LabelledQuery(number, query, tuple((p, m) for p, m in relevant)))
    if not queries:
        raise EvaluationError(f"{path}: no labelled queries")
    return queries


def query_metrics(relevant: Sequence[Pair], returned: Sequence[Pair]) -> dict[str, float]:
    """The metrics of one query; pairs compare as the registry compares names (normalized)."""
    rel = {pair_key(*pair) for pair in relevant}
    ranked = [pair_key(*pair) for pair in returned]
    found = [pair in rel for pair in ranked[:3]]
    first = found.index(True) + 1 if any(found) else None
    return {
        "hit@1": float(any(found[:1])),
        "hit@3": float(any(found)),
        "recall@1": sum(found[:1]) / len(rel),
        "recall@3": sum(found) / len(rel),
        "capped_recall@3": sum(found) / min(len(rel), 3),
        "mrr@3": 1.0 / first if first else 0.0,
    }


@dataclass
class EvaluationReport:
    queries: int
    metrics: dict[str, float]
    # Queries with no relevant pair in the top 3: line, query, relevant and returned pairs.
    misses: list[dict] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"queries": self.queries, "metrics": self.metrics, "misses": self.misses}


def evaluate(
    conn: psycopg.Connection,
    embedder_factory: Callable[[], Embedder],
    queries: Sequence[LabelledQuery],
) -> EvaluationReport:
    """Runs every query through search_provider_methods, as an agent's search would, and scores it.

    The queries are embedded in one batch up front (a query the name path answers simply does
    not use its vector). conn should be in autocommit mode, as the search command's is.
    """
    embedder = embedder_factory()
    try:
        vectors = embed_queries(embedder, [q.query for q in queries])
    except EmbeddingUnavailable as error:
        raise EvaluationError(f"search_unavailable: embedding the queries failed: {error}") from error
    totals = dict.fromkeys(METRICS, 0.0)
    misses = []
    for labelled, vector in zip(queries, vectors):
        try:
            matches = search_provider_methods(conn, lambda: embedder, labelled.query, query_vector=vector)
        except SearchError as error:
            raise EvaluationError(f"line {labelled.line}: {error.code}: {error.detail}") from error
        returned = [(m["provider"], m["method"]) for m in matches]
        scores = query_metrics(labelled.relevant, returned)
        for name in METRICS:
            totals[name] += scores[name]
        if not scores["hit@3"]:
            misses.append(
                {
                    "line": labelled.line,
                    "query": labelled.query,
                    "relevant": [list(pair) for pair in labelled.relevant],
                    "returned": [list(pair) for pair in returned],
                }
            )
    return EvaluationReport(len(queries), {name: totals[name] / len(queries) for name in METRICS}, misses)
