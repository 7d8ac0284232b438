"""Retrieval quality: labelled queries run through the product's own search path, and their metrics.

A labelled query (registry/labelled_queries.py) is a line of a file or a golden query of the
registry. run_queries puts each through search as an agent's question
and returns what came back for it (QueryResult: the rank of each relevant record, the records
that came instead); evaluate scores them. Metrics, per query and then averaged (the definitions
of the benchmark's SOURCE.md), with rel the relevant pairs and top_k the first k results:
recall@k = |rel ∩ top_k| / |rel|; capped recall@3 = |rel ∩ top_3| / min(|rel|, 3);
hit@k = 1 if rel ∩ top_k is not empty; MRR@3 = 1 / rank of the first relevant result, or 0.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np
import psycopg

from ..base.reports import Report
from ..embedders import Embedder, EmbeddingUnavailable, record_text
from ..postgres.connection import one_value
from ..registry.embedding_model import embedder_for, registry_model
from ..registry.labelled_queries import UNTAGGED, LabelledQuery, NormalizedNames, Pair, label_problem, origin_text
from ..registry.search import SearchError, SearchUnavailable, embed_queries, holding, search_provider_methods
from ..registry.sources import Answer, SourcePlaces, places_lines
from . import wanted_ranks
from .rank_words import figures_in_words, places_from_top, rank_figures, rank_in_words

METRICS = ("hit@1", "hit@3", "recall@1", "recall@3", "capped_recall@3", "mrr@3")
# How a query's relevant and returned records are compared: pairs normalized as the registry
# compares names (eval), or record ids (golden_rankings).
Compared = TypeVar("Compared", bound=Hashable)


def query_metrics(relevant: Sequence[Compared], returned: Sequence[Compared]) -> dict[str, float]:
    """The metrics of one query, from its relevant and returned records as compared."""
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


@dataclass(frozen=True)
class RankedRecord:
    """A record in one query's result: as a label names it or as search returned it."""

    provider: str
    method: str
    # The record these names are (payrail.provider_methods.id); None when no record goes by them.
    record_id: int | None
    # Whether that record is enabled (search may return it); None when there is none.
    enabled: bool | None
    # Where search placed it: 1 to 3; None when it was not among the (at most) three it returned.
    rank: int | None
    # A relevant record's place in search's whole order (wanted_ranks), past the third too; None
    # when search never returns it for the query (a draft, no such record, passed over by the name path).
    exact_rank: int | None = None

    def to_json(self) -> dict:
        return {"provider": self.provider, "method": self.method, "recordId": self.record_id, "enabled": self.enabled, "rank": self.rank}

    def rank_json(self) -> dict:
        """A relevant record with its exact rank and how many places it is from the top three."""
        return {**self.to_json(), "rank": self.exact_rank, "fromTopThree": places_from_top(self.exact_rank)}


@dataclass(frozen=True)
class QueryResult:
    """What search answered one labelled query, as an agent would have got it."""

    labelled: LabelledQuery
    # Each relevant record as labelled (a golden query's: as named now), with its rank.
    relevant: tuple[RankedRecord, ...]
    # The records search returned, in order (ranks 1 to 3): on a miss, the ones that came instead.
    returned: tuple[RankedRecord, ...]
    metrics: dict[str, float]

    @property
    def missed(self) -> bool:
        """No relevant record among the three search returned."""
        return not self.metrics["hit@3"]

    @property
    def first_rank(self) -> int | None:
        """The exact rank of the first relevant record in search's order, or None."""
        return min((r.exact_rank for r in self.relevant if r.exact_rank is not None), default=None)

    def to_json(self) -> dict:
        return {
            **self.labelled.origin(),
            "query": self.labelled.query,
            "relevant": [record.to_json() for record in self.relevant],
            "returned": [record.to_json() for record in self.returned],
            "metrics": self.metrics,
        }

    def miss_json(self) -> dict:
        """The miss as eval --json lists it: where it comes from, the query, the labels and what came instead."""
        return {
            **self.labelled.origin(),
            "query": self.labelled.query,
            "relevant": [[r.provider, r.method] for r in self.relevant],
            "returned": [[r.provider, r.method] for r in self.returned],
            "ranks": [r.rank_json() for r in self.relevant],
        }


@dataclass
class EvaluationReport:
    queries: int
    metrics: dict[str, float]
    # Queries with no relevant pair in the top 3: where each comes from, query, relevant and returned pairs.
    misses: list[dict] = field(default_factory=list)
    # Labels that search can never return: {line or goldenQueryId, provider, method, problem}.
    label_warnings: list[dict] = field(default_factory=list)
    # Each query's result, in the queries' order (for paired comparisons and pages; not in the JSON).
    results: list[QueryResult] = field(default_factory=list, repr=False)
    # The exact rank of each query's first relevant record: mean, median, hit@10 (rank_words.rank_figures).
    ranks: dict = field(default_factory=lambda: rank_figures([]))

    @property
    def per_query(self) -> list[dict[str, float]]:
        """The metrics of each query, in the queries' order."""
        return [result.metrics for result in self.results]

    def by_language(self) -> dict[str, dict] | None:
        """{language: {"queries", "metrics"}} for a file whose queries carry language tags, the
        tags in order and the queries without one last, as "untagged"; None when none has a tag."""
        if all(result.labelled.language is None for result in self.results):
            return None
        groups: dict[str, list[QueryResult]] = {}
        for result in sorted(self.results, key=lambda r: (r.labelled.language is None, r.labelled.language or "")):
            groups.setdefault(result.labelled.language or UNTAGGED, []).append(result)
        return {language: {"queries": len(results), "metrics": average_metrics(results)} for language, results in groups.items()}

    def by_language_lines(self) -> list[str]:
        """The metrics of each language as a table; nothing when no query has a tag."""
        by_language = self.by_language()
        if by_language is None:
            return []
        width = max(len("language"), *(len(language) for language in by_language))
        lines = [f"{'language':<{width}} queries " + " ".join(METRICS)]
        for language, group in by_language.items():
            values = " ".join(f"{group['metrics'][name]:>{len(name)}.3f}" for name in METRICS)
            lines.append(f"{language:<{width}} {group['queries']:>7} {values}")
        return lines

    def below(self, floors: dict[str, float]) -> list[dict]:
        """The floors (metric: lowest acceptable value) a metric fell below: [{"metric", "floor", "value"}]."""
        return [{"metric": metric, "floor": floor, "value": self.metrics[metric]} for metric, floor in floors.items() if self.metrics[metric] < floor]

    def to_json(self) -> dict:
        return {"queries": self.queries, "metrics": self.metrics, "ranks": self.ranks, "misses": self.misses, "labelWarnings": self.label_warnings}

    def label_warning_lines(self) -> list[str]:
        return [f"warning: {origin_text(warning)}: {warning['provider']} / {warning['method']} is {warning['problem']}" for warning in self.label_warnings]

    def misses_lines(self, by: str = "") -> list[str]:
        """The queries with no relevant method in the top 3, each with what came instead (by: whose)."""
        lines = [f"{len(self.misses)} missed{by} (no relevant method in the top 3):"]
        for miss in self.misses:
            lines += [
                f"{origin_text(miss)}: {miss['query']}",
                "   relevant: " + "; ".join(f"{p} / {m}" for p, m in miss["relevant"]),
                "   returned: " + ("; ".join(f"{p} / {m}" for p, m in miss["returned"]) or "-"),
                "   ranks: " + "; ".join(f"{r['provider']} / {r['method']}: {rank_in_words(r['rank'], r['enabled'])}" for r in miss["ranks"]),
            ]
        return lines


def side_by_side(headers: list[str], metrics: list[dict[str, float]]) -> list[str]:
    """The metrics of two models in two columns, and the change."""
    width = max(len(h) for h in headers)
    lines = [f"{'metric':<16} " + " ".join(h.rjust(width) for h in headers) + "  change"]
    for name in METRICS:
        values = [m[name] for m in metrics]
        lines.append(f"{name:<16} " + " ".join(f"{v:{width}.3f}" for v in values) + f"  {values[-1] - values[0]:+.3f}")
    return lines


@dataclass
class Evaluation(Report):
    """`eval`'s answer: the report on the registry's model, the floors a metric fell below, and
    a candidate model's report beside it (`--compare`)."""

    report: EvaluationReport
    # The registry's model's name, or "no model".
    model: str
    below_floors: list[dict]
    # The candidate model's name and its report.
    compared: tuple[str, EvaluationReport] | None = None
    # The figures of each source of the records in the answers (sources.places_by_source): the
    # report's, and the candidate's beside it.
    by_source: list[SourcePlaces] = field(default_factory=list)
    compared_by_source: list[SourcePlaces] = field(default_factory=list)

    def to_json(self) -> dict:
        answer = {**self.report.to_json(), "belowFloors": self.below_floors, "bySource": [f.to_json() for f in self.by_source]}
        if (by_language := self.report.by_language()) is not None:
            answer["byLanguage"] = by_language
        if self.compared is not None:
            name, candidate = self.compared
            answer["compare"] = {
                "model": name,
                "metrics": candidate.metrics,
                "ranks": candidate.ranks,
                "misses": candidate.misses,
                "bySource": [f.to_json() for f in self.compared_by_source],
            }
            if (by_language := candidate.by_language()) is not None:
                answer["compare"]["byLanguage"] = by_language
        return answer

    def describe(self) -> list[str]:
        report, lines = self.report, [f"{self.report.queries} queries"]
        if self.compared is None:
            lines += [f"{metric:<16} {value:.3f}" for metric, value in report.metrics.items()] + [figures_in_words(report.ranks)]
            return lines + _titled("by language:", report.by_language_lines()) + places_lines(self.by_source, report.queries) + report.misses_lines()
        name, candidate = self.compared
        lines += side_by_side([f"{self.model} (registry)", name], [report.metrics, candidate.metrics])
        lines += [f"{self.model}: {figures_in_words(report.ranks)}", f"{name}: {figures_in_words(candidate.ranks)}"]
        by_language = [*_titled(f"by language, {self.model}:", report.by_language_lines()), *_titled(f"by language, {name}:", candidate.by_language_lines())]
        by_source = [*places_lines(self.by_source, report.queries, self.model), *places_lines(self.compared_by_source, candidate.queries, name)]
        return lines + by_language + by_source + report.misses_lines(f" by {self.model}") + candidate.misses_lines(f" by {name}")

    def warnings(self) -> list[str]:
        return self.report.label_warning_lines()


def _titled(title: str, lines: list[str]) -> list[str]:
    return [title, *lines] if lines else []


def run_queries(conn: psycopg.Connection, embedder_factory: Callable[[], Embedder], queries: Sequence[LabelledQuery]) -> list[QueryResult]:
    """Runs every query through search_provider_methods, as an agent's search would, and returns
    what came back for each: the rank of each relevant record, the records returned.

    The queries are embedded in one batch up front, with the registry's model (embedder_for; a
    query the name path answers simply does not use its vector). Golden queries change no
    answer: search reads none. conn should be in autocommit mode, as the search command's is.
    Raises the search's own error (InvalidQuery, SearchUnavailable), naming the query's origin.
    """
    answers, vectors = _answers(conn, embedder_factory, queries)
    model = registry_model(conn)
    texts = [q.query for q in queries]
    return results_of(conn, queries, answers, lambda wanted: wanted_ranks.exact_ranks(conn, texts, vectors, wanted, model.dimensions if model else None))


def evaluate(
    conn: psycopg.Connection,
    embedder_factory: Callable[[], Embedder],
    queries: Sequence[LabelledQuery],
) -> EvaluationReport:
    """run_queries' results as a report: the metrics averaged, the misses and the label warnings."""
    return report_of(run_queries(conn, embedder_factory, queries))


def _answers(conn: psycopg.Connection, embedder_factory: Callable[[], Embedder], queries: Sequence[LabelledQuery]) -> tuple[list[list[Pair]], list[np.ndarray]]:
    """What search answers each query, and the vectors it was sent."""
    embedder = embedder_for(registry_model(conn), embedder_factory())
    try:
        vectors = embed_queries(embedder, [q.query for q in queries])
    except EmbeddingUnavailable as error:
        raise SearchUnavailable(f"embedding the queries failed: {error}", "embedding_service") from error
    answers = []
    for labelled, vector in zip(queries, vectors, strict=True):
        try:
            matches = search_provider_methods(holding(conn), lambda: embedder, labelled.query, query_vector=vector)
        except SearchError as error:
            raise type(error)(f"{labelled.describe_origin()}: {error.detail}") from error
        answers.append([(m["provider"], m["method"]) for m in matches])
    return answers, vectors


def evaluate_candidate(conn: psycopg.Connection, candidate: Embedder, queries: Sequence[LabelledQuery]) -> EvaluationReport:
    """What evaluate would report if candidate were the registry's model, without switching or
    writing anything: every enabled record embedded by candidate in memory, the queries on the
    semantic path ranked as the database ranks them (nearest_three), those on the name path
    answered by the database, as search answers them whatever the model."""
    cursor = conn.execute(
        """
        select provider, method, guidance, payrail._normalize_name(provider), payrail._normalize_name(method), id
        from payrail.provider_methods where enabled order by id
        """
    )
    records = cursor.fetchall()
    try:
        vectors = candidate.embed([record_text(provider, method, guidance) for provider, method, guidance, *_ in records])
        query_vectors = embed_queries(candidate, [q.query for q in queries])
    except EmbeddingUnavailable as error:
        raise SearchUnavailable(f"embedding with {candidate.model_name} failed: {error}", "embedding_service") from error
    semantic = [not one_value(conn.execute("select payrail.query_takes_name_path(%s)", (labelled.query,))) for labelled in queries]
    keys = [(p, m) for _, _, _, p, m, _ in records]
    record_vectors = np.array(vectors) if vectors else np.empty((0, 0))
    nearest = iter(nearest_three(record_vectors, keys, np.array([v for v, on_semantic_path in zip(query_vectors, semantic, strict=True) if on_semantic_path])))
    answers = []
    for labelled, on_semantic_path in zip(queries, semantic, strict=True):
        if on_semantic_path:
            answers.append([records[i][:2] for i in next(nearest)])
        else:
            matches = search_provider_methods(holding(conn), lambda: candidate, labelled.query)
            answers.append([(m["provider"], m["method"]) for m in matches])

    def ranked_by(wanted: list[list[int]]) -> list[dict[int, int | None]]:
        """The wanted records' ranks in the candidate's order: the name path's, else nearest_three's."""
        ranks = wanted_ranks.exact_ranks(conn, [q.query for q in queries], query_vectors, wanted, None)
        row_of = {record[5]: row for row, record in enumerate(records)}
        order = CandidateOrder(record_vectors, keys)
        for p in (p for p, on_semantic_path in enumerate(semantic) if on_semantic_path):
            ranks[p] = dict(zip(wanted[p], order.ranks(query_vectors[p], [row_of.get(i) for i in wanted[p]]), strict=True))
        return ranks

    return report_of(results_of(conn, queries, answers, ranked_by))


class CandidateOrder:
    """nearest_three's whole order over a candidate's record vectors: cosine distance, ties by keys."""

    def __init__(self, record_vectors: np.ndarray, keys: Sequence) -> None:
        self.units = record_vectors / np.linalg.norm(record_vectors, axis=1, keepdims=True) if len(record_vectors) else record_vectors
        # Each record's place in the keys' order, which breaks ties of distance.
        self.key_place = np.empty(len(keys), np.int64)
        self.key_place[sorted(range(len(keys)), key=keys.__getitem__)] = np.arange(len(keys))

    def ranks(self, query_vector: np.ndarray, rows: Sequence[int | None]) -> list[int | None]:
        """The rank of each record (its row; None: not enabled, no rank) for one query."""
        if not len(self.units):
            return [None for _ in rows]
        query = np.asarray(query_vector, np.float64)
        distance = 1.0 - self.units @ (query / np.linalg.norm(query))
        return [
            None
            if row is None
            else 1 + int(np.count_nonzero((distance < distance[row]) | ((distance == distance[row]) & (self.key_place < self.key_place[row]))))
            for row in rows
        ]


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
        candidates = sorted((int(i) for i in np.flatnonzero(distance <= cut)), key=lambda i: (distance[i], keys[i]))
        rankings.append(candidates[:3])
    return rankings


def results_of(
    conn: psycopg.Connection,
    queries: Sequence[LabelledQuery],
    answers: Sequence[Sequence[Pair]],
    ranked_by: Callable[[list[list[int]]], list[dict[int, int | None]]],
) -> list[QueryResult]:
    """Each query's answer as a QueryResult, names compared as the registry compares them; ranked_by
    gives the exact ranks of each query's relevant records (by id)."""
    names = NormalizedNames(conn, [pair for pairs in [*(q.relevant for q in queries), *answers] for pair in pairs])

    def ranked(pair: Pair, rank: int | None, exact: Mapping[int, int | None] | None = None) -> RankedRecord:
        record_id, enabled = names.record(*pair) or (None, None)
        return RankedRecord(*pair, record_id, enabled, rank, exact.get(record_id) if exact is not None and record_id is not None else None)

    wanted = [[record[0] for pair in labelled.relevant if (record := names.record(*pair)) is not None] for labelled in queries]
    found = []
    for labelled, returned, exact in zip(queries, answers, ranked_by(wanted), strict=True):
        rank_of = {names.pair(*pair): rank for rank, pair in reversed(list(enumerate(returned[:3], start=1)))}
        found.append(
            QueryResult(
                labelled,
                tuple(ranked(pair, rank_of.get(names.pair(*pair)), exact) for pair in labelled.relevant),
                tuple(ranked(pair, rank) for rank, pair in enumerate(returned[:3], start=1)),
                query_metrics([names.pair(*p) for p in labelled.relevant], [names.pair(*p) for p in returned]),
            )
        )
    return found


def answers_by_id(report: EvaluationReport) -> list[Answer]:
    """Each query's answer by record id, for its figures by source (sources.places_by_source)."""
    return [(tuple(r.record_id for r in result.relevant), tuple(r.record_id for r in result.returned)) for result in report.results]


def average_metrics(results: Sequence[QueryResult]) -> dict[str, float]:
    return {name: sum(result.metrics[name] for result in results) / len(results) for name in METRICS}


def report_of(results: Sequence[QueryResult]) -> EvaluationReport:
    """The metrics of the results averaged, their misses and their label warnings."""
    metrics = average_metrics(results)
    warnings = [
        {**result.labelled.origin(), "provider": record.provider, "method": record.method, "problem": problem}
        for result in results
        for record in result.relevant
        if (problem := label_problem(record.enabled)) is not None
    ]
    misses = [r.miss_json() for r in results if r.missed]
    return EvaluationReport(len(results), metrics, misses, warnings, list(results), rank_figures([r.first_rank for r in results]))
