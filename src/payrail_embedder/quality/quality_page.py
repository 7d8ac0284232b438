"""The registry's retrieval quality as the backoffice's Quality page shows it: eval's figures for
the registry's model, the misses, the enabled records no golden query finds, and the records the
golden queries confuse. Computed from every golden query's top three (golden_rankings), which is
what eval gets through search, so the figures are eval's.

Definitions (docs/operators.md, "The Quality page"):
- a miss: a golden query with none of its relevant records in its top three (eval's hit@3 = 0);
- never found: an enabled record in no golden query's top three, so no golden query finds it
  (those golden queries name come first: they should find it and do not);
- confused: records a and b where a golden query labelled with a (an enabled record) and not
  with b gets b above a (a lower in its top three, or not in it). Counted per pair, both ways;
- by source: each source's places in the top threes, wanted or not, and its records missed
  (sources.SourcePlaces), eval's figures by source.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import psycopg

from ..embedders import Embedder
from ..registry.embedding_model import EmbeddingModel, registry_model
from ..registry.sources import SourcePlaces, places_by_source
from .evaluation import METRICS
from .golden_rankings import Ranked, Ranking, rank_golden_queries
from .rank_words import closeness, rank_figures

# The longest lists the page shows; it says how many more there are.
SHOWN = 100
# The records of a provider the page names among those never found; it counts the rest.
METHODS_SHOWN = 3

# Every enabled record, with how many golden queries name it: the records no golden query finds
# are those left when the found ones are taken out, in Python, where the found ids already are
# (rather than sending thousands of them back to the server as an array).
ENABLED_RECORDS = """
select p.id, p.provider, p.method, coalesce(n.named, 0)
from payrail.provider_methods as p
left join (select r.record_id, pg_catalog.count(*) as named from payrail.golden_query_records as r group by r.record_id) as n
  on n.record_id = p.id
where p.enabled
"""


@dataclass(frozen=True)
class NeverFound:
    record: Ranked
    # How many golden queries name it as a record they should find.
    named_by: int


@dataclass(frozen=True)
class NeverFoundOfProvider:
    """A provider's enabled records that no golden query names nor finds: at 2,500 records, a
    list of them one by one would be thousands of lines, grouped they say which catalogs no
    golden query covers."""

    provider: str
    count: int
    # Its first records by method (at most METHODS_SHOWN).
    first: list[Ranked]


@dataclass
class Confusion:
    """Two records golden queries confuse: each query labelled with one gets the other above it."""

    first: Ranked
    second: Ranked
    # (the golden query's ranking, the record it should find, the record it got above it)
    cases: list[tuple[Ranking, Ranked, Ranked]] = field(default_factory=list)


@dataclass
class QualityReport:
    model: EmbeddingModel | None
    rankings: list[Ranking]
    # eval's metrics (evaluation.METRICS), averaged over the golden queries.
    metrics: dict[str, float]
    # The golden queries that miss, the closest first (by the exact rank of the first record each should find).
    misses: list[Ranking]
    # The enabled records in no golden query's top three: those golden queries name (they should
    # find them), the most named first; the others by provider, the providers with most first.
    never_found_named: list[NeverFound]
    never_found_by_provider: list[NeverFoundOfProvider]
    never_found_total: int
    never_found_named_total: int
    never_found_providers_total: int
    confusions: list[Confusion]
    # Golden queries without a vector kept, embedded for this report.
    embedded_now: int
    # The figures of each source of the records in the top threes (sources.places_by_source).
    by_source: list[SourcePlaces] = field(default_factory=list)
    # The exact rank of each golden query's first record to find: eval's figures (rank_words.rank_figures).
    ranks: dict = field(default_factory=lambda: rank_figures([]))


def quality_report(conn: psycopg.Connection, embedder_factory: Callable[[], Embedder]) -> QualityReport:
    rankings, embedded_now = rank_golden_queries(conn, embedder_factory)
    metrics = {name: sum(r.metrics[name] for r in rankings) / len(rankings) for name in METRICS} if rankings else {}
    found = {ranked.record_id for ranking in rankings for ranked in ranking.top}
    never = [NeverFound(Ranked(*row[:3]), row[3]) for row in conn.execute(ENABLED_RECORDS) if row[0] not in found]
    never.sort(key=lambda n: (-n.named_by, n.record.provider.casefold(), n.record.method.casefold(), n.record.record_id))
    named = [n for n in never if n.named_by]
    by_provider = _by_provider([n.record for n in never if not n.named_by])
    return QualityReport(
        registry_model(conn),
        rankings,
        metrics,
        sorted((r for r in rankings if not r.metrics["hit@3"]), key=lambda r: closeness(r.first_rank)),
        named[:SHOWN],
        by_provider[:SHOWN],
        len(never),
        len(named),
        len(by_provider),
        confusions(rankings),
        embedded_now,
        places_by_source(conn, [([r.record_id for r in ranking.golden.relevant], [r.record_id for r in ranking.top]) for ranking in rankings]),
        rank_figures([r.first_rank for r in rankings]),
    )


def _by_provider(records: list[Ranked]) -> list[NeverFoundOfProvider]:
    """records (in provider, then method order) grouped by provider, the providers with most first."""
    groups: dict[str, list[Ranked]] = {}
    for record in records:
        groups.setdefault(record.provider, []).append(record)
    grouped = [NeverFoundOfProvider(provider, len(found), found[:METHODS_SHOWN]) for provider, found in groups.items()]
    return sorted(grouped, key=lambda g: (-g.count, g.provider.casefold(), g.provider))


def confusions(rankings: list[Ranking]) -> list[Confusion]:
    """The pairs of records golden queries confuse, the most confused first."""
    pairs: dict[frozenset[int], Confusion] = {}
    for ranking in rankings:
        relevant = {r.record_id for r in ranking.golden.relevant}
        for expected in (r for r in ranking.golden.relevant if r.enabled):
            rank = ranking.rank_of(expected.record_id)
            for above in ranking.top[: (rank or len(ranking.top) + 1) - 1]:
                if above.record_id in relevant:
                    continue
                wanted = Ranked(expected.record_id, expected.provider, expected.method)
                key = frozenset((wanted.record_id, above.record_id))
                first, second = sorted((wanted, above), key=lambda r: r.record_id)
                confusion = pairs.setdefault(key, Confusion(first, second))
                confusion.cases.append((ranking, wanted, above))
    return sorted(pairs.values(), key=lambda c: (-len(c.cases), c.first.name, c.second.name))
