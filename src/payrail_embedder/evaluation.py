"""Retrieval quality: labelled queries run through the product's own search path, and their metrics.

A labelled query is {"query": "...", "relevant": [[provider, method], ...]}. Metrics, per query
and then averaged (the definitions of the benchmark's SOURCE.md), with rel the relevant pairs
and top_k the first k results:
recall@k = |rel ∩ top_k| / |rel|; capped recall@3 = |rel ∩ top_3| / min(|rel|, 3);
hit@k = 1 if rel ∩ top_k is not empty; MRR@3 = 1 / rank of the first relevant result, or 0.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import psycopg

from .embedders import Embedder, EmbeddingUnavailable, record_text
from .errors import CodedError
from .input_files import LineLimit, open_input
from .records import RECORD_LINE
from .registry_model import embedder_for, registry_model
from .search import InvalidQuery, SearchError, SearchUnavailable, check_query, embed_queries, holding, search_provider_methods

METRICS = ("hit@1", "hit@3", "recall@1", "recall@3", "capped_recall@3", "mrr@3")

Pair = tuple[str, str]


class EvaluationError(CodedError):
    """The labelled file cannot be read."""

    code = "invalid_input"


@dataclass(frozen=True)
class LabelledQuery:
    line: int
    query: str
    relevant: tuple[Pair, ...]


# A labelled query's line may be as long as a catalog line (records.RECORD_LINE): a query of
# 2,000 characters and a hundred or more relevant pairs written at their longest.
LABELLED_QUERY_LINE = LineLimit(RECORD_LINE.bytes, "more than a labelled query line may take (docs/embeddings.md, Tuning the local model)")


def read_labelled_queries(path: Path | str) -> list[LabelledQuery]:
    """The labelled queries of a file (any input open_input takes, "-" included); the first line
    that is not one is refused, naming the file and the line."""
    queries = []
    with open_input(path, line_limit=LABELLED_QUERY_LINE) as opened:
        for line in opened.lines():
            where = f"{opened.source}:{line.number}"
            try:
                if line.problem is not None:
                    raise ValueError(line.problem)
                data = json.loads(line.text)
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
            except RecursionError:
                raise EvaluationError(f"{where}: malformed JSON: nested too deeply") from None
            except (json.JSONDecodeError, KeyError, TypeError, ValueError) as error:
                reason = f"missing field {error}" if isinstance(error, KeyError) else str(error)
                raise EvaluationError(f"{where}: {reason}") from error
            try:
                check_query(query)  # invalid_query before the database or the embedder is asked
            except InvalidQuery as error:
                raise InvalidQuery(f"{where}: {error.detail}") from None
            queries.append(LabelledQuery(line.number, query, tuple((p, m) for p, m in relevant)))
        if not queries:
            raise EvaluationError(f"{opened.source}: no labelled queries")
    return queries


def query_metrics(relevant: Sequence[Pair], returned: Sequence[Pair]) -> dict[str, float]:
    """The metrics of one query, from pairs already normalized as the registry compares names."""
    rel = set(relevant)
    found = [pair in rel for pair in returned[:3]]
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
    # Labels that search can never return: {line, provider, method, problem}.
    label_warnings: list[dict] = field(default_factory=list)
    # The metrics of each query, in the file's order (for paired comparisons; not in the JSON).
    per_query: list[dict[str, float]] = field(default_factory=list, repr=False)

    def to_json(self) -> dict:
        return {"queries": self.queries, "metrics": self.metrics, "misses": self.misses, "labelWarnings": self.label_warnings}


class NormalizedNames:
    """Pairs normalized by the database (payrail._normalize_name), the way search compares names."""

    def __init__(self, conn: psycopg.Connection, names: Sequence[str]) -> None:
        rows = conn.execute(
            "select payrail._normalize_name(n) from unnest(%s::text[]) with ordinality as u(n, i) order by i", (list(names),)
        ).fetchall()
        self._key = {name: key for name, (key,) in zip(names, rows)}

    def pair(self, provider: str, method: str) -> Pair:
        return self._key[provider], self._key[method]


def label_warnings(conn: psycopg.Connection, queries: Sequence[LabelledQuery], names: NormalizedNames) -> list[dict]:
    """Labels naming a record the registry does not have, or has only as a draft: they count as misses."""
    labels = [names.pair(provider, method) for q in queries for provider, method in q.relevant]
    rows = conn.execute(
        """
        select payrail._normalize_name(pm.provider), payrail._normalize_name(pm.method), pm.enabled
        from payrail.provider_methods as pm
        where (payrail._normalize_name(pm.provider), payrail._normalize_name(pm.method))
              in (select * from unnest(%s::text[], %s::text[]))
        """,
        ([p for p, _ in labels], [m for _, m in labels]),
    ).fetchall()
    states = {(provider, method): enabled for provider, method, enabled in rows}
    warnings = []
    for labelled in queries:
        for provider, method in labelled.relevant:
            enabled = states.get(names.pair(provider, method))
            if enabled is not True:
                problem = "not in the registry" if enabled is None else "a draft: search never returns it"
                warnings.append({"line": labelled.line, "provider": provider, "method": method, "problem": problem})
    return warnings


def evaluate(
    conn: psycopg.Connection,
    embedder_factory: Callable[[], Embedder],
    queries: Sequence[LabelledQuery],
) -> EvaluationReport:
    """Runs every query through search_provider_methods, as an agent's search would, and scores it.

    The queries are embedded in one batch up front, with the registry's model (embedder_for; a
    query the name path answers simply does not use its vector). conn should be in autocommit
    mode, as the search command's is. Raises the search's own error (InvalidQuery,
    SearchUnavailable), naming the line.
    """
    embedder = embedder_for(registry_model(conn), embedder_factory())
    try:
        vectors = embed_queries(embedder, [q.query for q in queries])
    except EmbeddingUnavailable as error:
        raise SearchUnavailable(f"embedding the queries failed: {error}", "embedding_service") from error
    answers = []
    for labelled, vector in zip(queries, vectors):
        try:
            matches = search_provider_methods(holding(conn), lambda: embedder, labelled.query, query_vector=vector)
        except SearchError as error:
            raise type(error)(f"line {labelled.line}: {error.detail}") from error
        answers.append([(m["provider"], m["method"]) for m in matches])
    return scored(conn, queries, answers)


def evaluate_candidate(conn: psycopg.Connection, candidate: Embedder, queries: Sequence[LabelledQuery]) -> EvaluationReport:
    """What evaluate would report if candidate were the registry's model, without switching or
    writing anything: every enabled record embedded by candidate in memory, the queries on the
    semantic path ranked as the database ranks them (nearest_three), those on the name path
    answered by the database, as search answers them whatever the model."""
    cursor = conn.execute(
        """
        select provider, method, guidance, payrail._normalize_name(provider), payrail._normalize_name(method)
        from payrail.provider_methods where enabled order by id
        """
    )
    records = cursor.fetchall()
    for labelled in queries:
        try:
            check_query(labelled.query)
        except InvalidQuery as error:
            raise InvalidQuery(f"line {labelled.line}: {error.detail}") from error
    try:
        vectors = candidate.embed([record_text(provider, method, guidance) for provider, method, guidance, _, _ in records])
        query_vectors = embed_queries(candidate, [q.query for q in queries])
    except EmbeddingUnavailable as error:
        raise SearchUnavailable(f"embedding with {candidate.model_name} failed: {error}", "embedding_service") from error
    semantic = [
        not conn.execute("select payrail.query_takes_name_path(%s)", (labelled.query,)).fetchone()[0] for labelled in queries
    ]
    nearest = iter(
        nearest_three(
            np.array(vectors) if vectors else np.empty((0, 0)),
            [(p, m) for _, _, _, p, m in records],
            np.array([v for v, on_semantic_path in zip(query_vectors, semantic) if on_semantic_path]),
        )
    )
    answers = []
    for labelled, on_semantic_path in zip(queries, semantic):
        if on_semantic_path:
            answers.append([records[i][:2] for i in next(nearest)])
        else:
            matches = search_provider_methods(holding(conn), lambda: candidate, labelled.query)
            answers.append([(m["provider"], m["method"]) for m in matches])
    return scored(conn, queries, answers)


def nearest_three(record_vectors: np.ndarray, keys: Sequence, query_vectors: np.ndarray) -> list[list[int]]:
    """The semantic path's order in NumPy, for each query the indexes of its 3 nearest records:
    cosine distance, ties by keys (the normalized provider and method, as payrail._search breaks them)."""
    if not len(record_vectors) or not len(query_vectors):
        return [[] for _ in query_vectors]
    units = record_vectors / np.linalg.norm(record_vectors, axis=1, keepdims=True)
    rankings = []
    for query in np.asarray(query_vectors, np.float64):
        distance = 1.0 - units @ (query / np.linalg.norm(query))
        # Everything within float noise of the 3rd distance is a candidate; the key order decides ties.
        cut = np.partition(distance, min(2, len(distance) - 1))[min(2, len(distance) - 1)] + 1e-6
        candidates = sorted(np.flatnonzero(distance <= cut), key=lambda i: (distance[i], keys[i]))
        rankings.append([int(i) for i in candidates[:3]])
    return rankings


def scored(conn: psycopg.Connection, queries: Sequence[LabelledQuery], answers: Sequence[Sequence[Pair]]) -> EvaluationReport:
    """The report of each query's answer, names compared as the registry compares them."""
    names = NormalizedNames(conn, sorted({name for pairs in [*(q.relevant for q in queries), *answers] for pair in pairs for name in pair}))
    totals = dict.fromkeys(METRICS, 0.0)
    misses, per_query = [], []
    for labelled, returned in zip(queries, answers):
        scores = query_metrics([names.pair(*p) for p in labelled.relevant], [names.pair(*p) for p in returned])
        per_query.append(scores)
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
    metrics = {name: totals[name] / len(queries) for name in METRICS}
    return EvaluationReport(len(queries), metrics, misses, label_warnings(conn, queries, names), per_query)
