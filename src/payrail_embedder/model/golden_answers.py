"""What search answers a golden query, and what an edit changes in those answers: the reports of
golden_rankings (the Quality page's rankings, a record's golden queries, an edit's effect)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..base.reports import Report
from ..base.safe_text import json_text
from ..registry.changes import Conflict, Refused
from ..registry.golden import GoldenQuery
from .evaluation import query_metrics


@dataclass(frozen=True)
class Ranked:
    """A record in a golden query's top three."""

    record_id: int
    provider: str
    method: str

    @property
    def name(self) -> str:
        return f"{self.provider} / {self.method}"

    def to_json(self) -> dict:
        return {"recordId": self.record_id, "provider": self.provider, "method": self.method}


@dataclass(frozen=True)
class Ranking:
    """What search answers a golden query: its top three, and whether the name path answered."""

    golden: GoldenQuery
    top: tuple[Ranked, ...]
    by_name: bool

    def rank_of(self, record_id: int) -> int | None:
        """Where the record stands in the top three (1 to 3), or None."""
        return next((rank for rank, r in enumerate(self.top, start=1) if r.record_id == record_id), None)

    @property
    def metrics(self) -> dict[str, float]:
        """eval's metrics of this answer (evaluation.query_metrics), records compared by id."""
        return query_metrics([r.record_id for r in self.golden.relevant], [r.record_id for r in self.top])


@dataclass(frozen=True)
class QueryChange:
    """A golden query whose top three an edit would change."""

    golden: GoldenQuery
    before: Ranking
    after: Ranking
    # The record edited (its id once saved; a new record's id in the tentative save).
    record_id: int

    @property
    def gains(self) -> bool:
        """The edited record comes into the top three."""
        return self.before.rank_of(self.record_id) is None and self.after.rank_of(self.record_id) is not None

    @property
    def loses(self) -> bool:
        """The edited record leaves the top three."""
        return self.before.rank_of(self.record_id) is not None and self.after.rank_of(self.record_id) is None

    @property
    def displaced(self) -> tuple[Ranked, ...]:
        """Other records that leave the top three."""
        after = {r.record_id for r in self.after.top}
        return tuple(r for r in self.before.top if r.record_id != self.record_id and r.record_id not in after)

    @property
    def what(self) -> str:
        """What happens to the edited record in this query's top three, in words."""
        before, after = self.before.rank_of(self.record_id), self.after.rank_of(self.record_id)
        if before is None and after is None:
            return "the other records change places"
        if before is None:
            return f"gains this record at rank {after}"
        if after is None:
            return f"loses this record (rank {before} now)"
        return f"this record moves from rank {before} to {after}" if before != after else f"this record stays at rank {after}"

    @property
    def verdict(self) -> str:
        """ "better", "worse" or "same" for what it should find: MRR@3, then hit@3, then recall@3."""
        keys = ("mrr@3", "hit@3", "recall@3")
        before, after = ([ranking.metrics[k] for k in keys] for ranking in (self.before, self.after))
        return "better" if after > before else "worse" if after < before else "same"

    def to_json(self) -> dict:
        return {
            "goldenQueryId": self.golden.golden_query_id,
            "query": self.golden.query,
            "relevant": [r.to_json() for r in self.golden.relevant],
            "before": [r.to_json() for r in self.before.top],
            "after": [r.to_json() for r in self.after.top],
            "gains": self.gains,
            "loses": self.loses,
            "displaced": [r.to_json() for r in self.displaced],
            "what": self.what,
            "verdict": self.verdict,
        }


VERDICT_ORDER = {"worse": 0, "better": 1, "same": 2}


@dataclass
class Effect(Report):
    """What an edit would change in the golden queries' top threes, before it is saved."""

    # The record as the save would leave it: its id (a new record's only in the tentative save), names, state.
    record: Ranked | None
    enabled: bool
    # How many golden queries were considered.
    golden_queries: int = 0
    # The golden queries whose top three would change: worse first, then better, then the rest.
    changes: list[QueryChange] = field(default_factory=list)
    # Golden queries that had no vector kept by the model, embedded for this preview.
    embedded_now: int = 0
    # Why the edit cannot be saved (a refusal, a conflict): then nothing was compared.
    outcome: Refused | Conflict | None = None

    def counts(self) -> tuple[int, int, int]:
        """How many changed golden queries gain the record, lose it, and lose another record to it."""
        return (sum(c.gains for c in self.changes), sum(c.loses for c in self.changes), sum(bool(c.displaced) for c in self.changes))

    def describe(self) -> list[str]:
        """The effect for people, a line each: what `edit` and `preview --draft` print."""
        if not self.golden_queries:
            return ["No golden queries to compare (`payrail-embedder golden add` adds them)."]
        if not self.changes:
            return [f"No golden query's top three changes ({self.golden_queries} golden {'query' if self.golden_queries == 1 else 'queries'})."]
        gains, loses, displaced = self.counts()
        lines = [
            f"{len(self.changes)} of {self.golden_queries} golden {'query' if self.golden_queries == 1 else 'queries'}' top three "
            f"would change: {gains} gain this record, {loses} lose it, {displaced} lose another record to it."
        ]
        for change in self.changes:
            pushed = f"; loses {', '.join(r.name for r in change.displaced)} to it" if change.displaced else ""
            lines += [
                f"{change.verdict} for what it should find: {json_text(change.golden.query)} (golden query "
                f"{change.golden.golden_query_id}): {change.what}{pushed}",
                f"   should find: {'; '.join(r.provider + ' / ' + r.method for r in change.golden.relevant)}",
                *(
                    f"   {label}: {'; '.join(r.name for r in ranking.top) or '-'}{' (by name)' if ranking.by_name else ''}"
                    for label, ranking in (("now  ", change.before), ("after", change.after))
                ),
            ]
        if self.embedded_now:
            lines.append(f"({self.embedded_now} golden queries had no vector kept and were embedded now: `payrail-embedder sync` keeps them.)")
        return lines

    def to_json(self) -> dict:
        return {
            "record": self.record.to_json() if self.record else None,
            "enabled": self.enabled,
            "goldenQueries": self.golden_queries,
            "changes": [change.to_json() for change in self.changes],
            "embeddedNow": self.embedded_now,
        }
