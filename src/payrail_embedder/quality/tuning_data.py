"""What `model tune` learns from: the labelled queries with the records they name, the split by
provider that decides, queries made from the records, and negatives mined from the registry.

Each query is paired with the record text of each relevant record the registry holds enabled
(record_text: exactly what the registry embeds). With mined negatives (--negatives mined), each pair
also carries one record that the registry's model ranks near the query but the query does not
name: its nearest such records by the vectors the registry holds, in the order search ranks them,
the first pair of a query taking the nearest, the next the second, cycling through the first
NEGATIVES_PER_QUERY. The training learns to place the query nearer its record than that negative
and than every other record of its batch.
"""

from __future__ import annotations

import random
import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import psycopg

from ..base.errors import CodedError
from ..embedders import Embedder, EmbeddingUnavailable, batched, record_text
from ..postgres.connection import naming_pgvector
from ..registry.labelled_queries import LabelledQuery, NormalizedNames, label_warnings
from ..registry.search import QUERY_MAX_CHARACTERS, InvalidQuery, Query, SearchUnavailable, check_query, embed_queries

# --record-pairs: auto (only when there are no golden queries), on (beside them too), off.
RECORD_PAIRS = ("auto", "on", "off")
# --negatives: mined from the registry, or the other records of a batch only (the default: mined
# was not shown to beat it on held-out queries, docs/benchmarks.md "Retrieval quality").
NEGATIVES = ("mined", "in-batch")
# A query's pairs take its nearest records it does not name, in turn, from this many.
NEGATIVES_PER_QUERY = 5
# Queries ranked per statement when negatives are mined.
MINED_PER_STATEMENT = 256
# A record's Purpose line: the guidance template's (DESIGN.md), its text after the label.
PURPOSE_LINE = re.compile(r"^Purpose:[^\S\n]*(.*?)\s*$", re.MULTILINE)


class CannotTune(CodedError):
    """model tune cannot run as asked, with the code its caller branches on."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(detail)
        self.code = code


@dataclass(frozen=True)
class TuneOptions:
    validation_fraction: float = 0.2
    seed: int = 0
    epochs: int = 2
    batch_size: int = 32
    learning_rate: float = 2e-5
    # CPU threads for torch; None: torch's default (one per core).
    threads: int | None = None
    force: bool = False
    # Train on queries made from the records too (record_queries): RECORD_PAIRS' choices.
    record_pairs: str = "auto"
    # NEGATIVES' choices: each pair with a record mined from the registry, or the batch's only.
    negatives: str = "in-batch"
    # Whether the validation queries decide the epochs (1 to `epochs`) as well as whether to keep the model.
    decide_epochs: bool = False

    def uses_record_pairs(self, golden_queries: int) -> bool:
        """Whether record pairs are trained on, given this many golden queries (usable or not):
        "auto" uses them only where there are none (docs/benchmarks.md, Retrieval quality)."""
        return self.record_pairs == "on" or (self.record_pairs == "auto" and not golden_queries)


@dataclass(frozen=True)
class GoldenQuery:
    labelled: LabelledQuery
    # (provider, method, guidance) of each relevant record the registry holds enabled.
    records: tuple[tuple[str, str, str], ...]
    # Their providers, normalized as the registry compares names.
    providers: frozenset[str]


@dataclass
class Split:
    training: list[GoldenQuery]
    validation: list[GoldenQuery]
    # Queries naming records of both sides: in neither, so no validation record is trained on.
    left_out: list[GoldenQuery]
    providers: int
    # The providers drawn for validation: no training query names one.
    validation_providers: frozenset[str]


def golden_queries(conn: psycopg.Connection, queries: Sequence[LabelledQuery]) -> tuple[list[GoldenQuery], list[dict]]:
    """Each labelled query with the enabled records its labels name; queries naming none are left
    out. Also the label warnings eval gives (labels the registry lacks, or holds as drafts)."""
    names = NormalizedNames(conn, [pair for q in queries for pair in q.relevant])
    labels = {names.pair(*pair) for q in queries for pair in q.relevant}
    rows = conn.execute(
        """
        select pm.provider, pm.method, pm.guidance, payrail._normalize_name(pm.provider), payrail._normalize_name(pm.method)
        from payrail.provider_methods as pm
        where pm.enabled
          and (payrail._normalize_name(pm.provider), payrail._normalize_name(pm.method)) in (select * from unnest(%s::text[], %s::text[]))
        """,
        ([p for p, _ in labels], [m for _, m in labels]),
    ).fetchall()
    records = {(key_provider, key_method): (provider, method, guidance) for provider, method, guidance, key_provider, key_method in rows}
    golden = []
    for labelled in queries:
        keys = [key for key in dict.fromkeys(names.pair(*pair) for pair in labelled.relevant) if key in records]
        if keys:
            golden.append(GoldenQuery(labelled, tuple(records[key] for key in keys), frozenset(provider for provider, _ in keys)))
    return golden, label_warnings(queries, names)


def split_by_provider(golden: Sequence[GoldenQuery], fraction: float, seed: int) -> Split:
    """Providers in a seeded random order go to validation until the queries naming only them reach
    `fraction` of all; training gets the queries naming none of them."""
    providers = sorted({provider for query in golden for provider in query.providers})
    random.Random(seed).shuffle(providers)
    queries_of = defaultdict(list)
    for index, query in enumerate(golden):
        for provider in query.providers:
            queries_of[provider].append(index)
    outside = [len(query.providers) for query in golden]  # each query's providers not in validation yet
    chosen: set[str] = set()
    inside = 0
    for provider in providers:
        if inside >= fraction * len(golden):
            break
        chosen.add(provider)
        for index in queries_of[provider]:
            outside[index] -= 1
            inside += outside[index] == 0
    split = Split([], [], [], len(providers), frozenset(chosen))
    for query, left in zip(golden, outside, strict=True):
        if left == 0:
            split.validation.append(query)
        elif query.providers & chosen:
            split.left_out.append(query)
        else:
            split.training.append(query)
    return split


def record_queries(conn: psycopg.Connection) -> list[GoldenQuery]:
    """Queries made from the registry's records alone: each enabled record's Purpose line (its
    guidance's first line starting "Purpose:", without the label, cut at a query's 2,000
    characters) with that record as its answer. Records with the same line make one query naming
    them all; a record without one, or whose line search would refuse, makes none."""
    rows = conn.execute(
        "select provider, method, guidance, payrail._normalize_name(provider) from payrail.provider_methods where enabled order by id"
    ).fetchall()
    answers: dict[Query, list[tuple[tuple[str, str, str], str]]] = {}
    for provider, method, guidance, provider_key in rows:
        purpose = PURPOSE_LINE.search(guidance)
        try:
            query = check_query(purpose.group(1)[:QUERY_MAX_CHARACTERS] if purpose else "")
        except InvalidQuery:
            continue
        answers.setdefault(query, []).append(((provider, method, guidance), provider_key))
    return [
        GoldenQuery(
            LabelledQuery(None, query, tuple((provider, method) for (provider, method, _), _ in records)),
            tuple(record for record, _ in records),
            frozenset(provider_key for _, provider_key in records),
        )
        for query, records in answers.items()
    ]


# Each query's nearest enabled records (not of an excluded provider) by the registry's vectors, as
# search orders them: exact cosine distance, then normalized provider and method; `depth` of them.
NEAREST_RECORDS = """
with candidates as materialized (
  select pm.provider, pm.method, pm.guidance, pm.embedding,
         payrail._normalize_name(pm.provider) as provider_key, payrail._normalize_name(pm.method) as method_key
  from payrail.provider_methods as pm
  where pm.enabled and payrail._normalize_name(pm.provider) <> all(%(excluded)s::text[])
)
select q.p, n.provider, n.method, n.guidance
from unnest(%(vectors)b::{pgvector}.vector[]) with ordinality as q(embedding, p)
cross join lateral (
  select c.provider, c.method, c.guidance from candidates as c
  order by c.embedding operator({pgvector}.<=>) q.embedding, c.provider_key, c.method_key
  limit %(depth)s
) as n
order by q.p
"""


def mined_negatives(
    conn: psycopg.Connection,
    embedder: Embedder,
    queries: Sequence[GoldenQuery],
    *,
    excluded_providers: frozenset[str] = frozenset(),
    count: int = NEGATIVES_PER_QUERY,
) -> dict[GoldenQuery, list[str]]:
    """For each query, the record texts of the `count` enabled records nearest to it that it does
    not name, by the vectors the registry holds (embedder: the registry's model, which embeds the
    queries), nearest first; none of a provider in excluded_providers (normalized names)."""
    texts = list(dict.fromkeys(query.labelled.query for query in queries))
    if not texts:
        return {}
    try:
        vectors = dict(zip(texts, embed_queries(embedder, texts), strict=True))
    except EmbeddingUnavailable as error:
        raise SearchUnavailable(f"embedding the queries to mine negatives with {embedder.model_name} failed: {error}", "embedding_service") from error
    statement = naming_pgvector(conn, NEAREST_RECORDS)
    mined: dict[GoldenQuery, list[str]] = {}
    for chunk in batched(list(dict.fromkeys(queries)), MINED_PER_STATEMENT):
        nearest: list[list[tuple[str, str, str]]] = [[] for _ in chunk]
        parameters = {
            "excluded": sorted(excluded_providers),
            "vectors": [np.asarray(vectors[query.labelled.query], np.float32) for query in chunk],
            "depth": count + max(len(query.records) for query in chunk),
        }
        for position, provider, method, guidance in conn.execute(statement, parameters):
            nearest[position - 1].append((provider, method, guidance))
        for query, records in zip(chunk, nearest, strict=True):
            relevant = {(provider, method) for provider, method, _ in query.records}
            mined[query] = [record_text(*record) for record in records if record[:2] not in relevant][:count]
    return mined


def training_pairs(queries: Sequence[GoldenQuery], negatives: Mapping[GoldenQuery, Sequence[str]] | None = None) -> list[tuple[str, ...]]:
    """(query, record text) for each relevant record of each query; with negatives (every query's
    own, at least one each), (query, record text, negative): a query's n-th pair takes its n-th
    negative, cycling."""
    if negatives is None:
        return [(query.labelled.query, record_text(*record)) for query in queries for record in query.records]
    return [
        (query.labelled.query, record_text(*record), negatives[query][n % len(negatives[query])]) for query in queries for n, record in enumerate(query.records)
    ]


@dataclass
class TuneData:
    """What model tune trains on: the usable golden queries and the queries made from the records
    (when record pairs are on), the split that decides, and the pairs of each training."""

    # Where the golden queries come from: "the registry's golden queries", or the file's name.
    source: str
    golden_queries: int
    usable: list[GoldenQuery]
    made: list[GoldenQuery]
    split: Split
    # The GOLDEN.jsonl file tune was given, as given; None for the registry's golden queries.
    path: Path | None = None
    # Each training's mined negatives by query (mine_negatives); None: the batch's records only.
    deciding_negatives: dict[GoldenQuery, list[str]] | None = field(default=None, repr=False)
    final_negatives: dict[GoldenQuery, list[str]] | None = field(default=None, repr=False)

    @property
    def decides_on_golden(self) -> bool:
        """Validation is on golden queries; otherwise (no golden queries) on queries made from the records."""
        return bool(self.usable)

    @property
    def validation(self) -> list[LabelledQuery]:
        return [query.labelled for query in self.split.validation]

    @property
    def all_queries(self) -> list[GoldenQuery]:
        """Every query the final training learns from and its figures are measured on: the golden
        queries, or the made ones when there are none."""
        return self.usable or self.made

    def deciding_queries(self) -> list[GoldenQuery]:
        """The first training's: the split's training queries, and with golden queries every made
        query (made from records, not labels: nothing of the validation queries' answers)."""
        return self.split.training + (self.made if self.decides_on_golden else [])

    def final_queries(self) -> list[GoldenQuery]:
        """The kept model's: every query, validation and left-out ones included."""
        return self.usable + self.made

    def mine_negatives(self, conn: psycopg.Connection, embedder: Embedder) -> None:
        """Mines each training's negatives with the registry's model: the first training's from
        records of providers no validation query names (validation still measures records it never
        saw), the final one's from every enabled record. A training keeps the batch's records
        only when some query of it has no record to take (a registry of its answers alone)."""
        deciding = mined_negatives(conn, embedder, self.deciding_queries(), excluded_providers=self.split.validation_providers)
        final = mined_negatives(conn, embedder, self.final_queries())
        self.deciding_negatives = deciding if all(deciding.values()) else None
        self.final_negatives = final if all(final.values()) else None

    def deciding_pairs(self) -> list[tuple[str, ...]]:
        return training_pairs(self.deciding_queries(), self.deciding_negatives)

    def final_pairs(self) -> list[tuple[str, ...]]:
        return training_pairs(self.final_queries(), self.final_negatives)
