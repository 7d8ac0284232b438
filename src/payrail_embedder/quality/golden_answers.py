"""What search answers a golden query, and what an edit changes in those answers: the reports of
golden_rankings (the Quality page's rankings, a record's golden queries, an edit's effect)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ..base.reports import Report
from ..base.safe_text import json_text
from ..registry.changes import Conflict, Refused
from ..registry.golden import GoldenQuery, RelevantRecord
from .evaluation import query_metrics
from .first_pass import Ranked
from .rank_words import move_in_words, rank_in_words


@dataclass(frozen=True)
class Ranking:
    """What search answers a golden query: its top three, whether the name path answered, and
    the exact rank of each record it should find (wanted_ranks)."""

    golden: GoldenQuery
    top: tuple[Ranked, ...]
    by_name: bool
    # Each record it should find, by id: its rank among every enabled record in search's order
    # (1 to 3: agents get it), or None when search never returns it for this query.
    ranks: Mapping[int, int | None] = field(default_factory=dict)

    def rank_of(self, record_id: int) -> int | None:
        """Where the record stands in the top three (1 to 3), or None."""
        return next((rank for rank, r in enumerate(self.top, start=1) if r.record_id == record_id), None)

    def rank(self, record_id: int) -> int | None:
        """A wanted record's exact rank (not only in the top three), or None (see ranks)."""
        return self.ranks.get(record_id)

    @property
    def first_rank(self) -> int | None:
        """The best rank of the records it should find: the first of them search returns."""
        return min((rank for rank in self.ranks.values() if rank is not None), default=None)

    def rank_words(self, record_id: int) -> str:
        """rank_in_words of a record it should find."""
        enabled = next((r.enabled for r in self.golden.relevant if r.record_id == record_id), True)
        return rank_in_words(self.rank(record_id), enabled)

    @property
    def metrics(self) -> dict[str, float]:
        """eval's metrics of this answer (evaluation.query_metrics), records compared by id."""
        return query_metrics([r.record_id for r in self.golden.relevant], [r.record_id for r in self.top])


@dataclass(frozen=True)
class QueryChange:
    """A golden query an edit changes: its top three (Effect.changes), or only the exact rank of a
    record it should find (Effect.moves)."""

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
    def rank_changes(self) -> list[tuple[RelevantRecord, int | None, int | None]]:
        """The records it should find whose exact rank the edit changes: (record, before, after)."""
        moved = ((r, self.before.rank(r.record_id), self.after.rank(r.record_id)) for r in self.golden.relevant)
        return [(r, before, after) for r, before, after in moved if before != after]

    @property
    def rank_words(self) -> str:
        """Each rank change in words, "Provider / Method: rank 41 -> 4; still not in the top three"."""
        return "; ".join(f"{r.provider} / {r.method}: {move_in_words(before, after)}" for r, before, after in self.rank_changes)

    @property
    def direction(self) -> str:
        """ "closer" when the first record it should find comes nearer the top, "further" when it
        goes down, else "same" (by the best rank of those records; none ranked is the farthest)."""
        before, after = (NOT_RANKED if ranking.first_rank is None else ranking.first_rank for ranking in (self.before, self.after))
        return "closer" if after < before else "further" if after > before else "same"

    @property
    def largest_move(self) -> int:
        """How many places the record that moves most moves (a record no longer or newly ranked: NOT_RANKED)."""
        return max((NOT_RANKED if None in (before, after) else abs((after or 0) - (before or 0)) for _, before, after in self.rank_changes), default=0)

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
            "ranks": [{**r.to_json(), "before": self.before.rank(r.record_id), "after": self.after.rank(r.record_id)} for r in self.golden.relevant],
            "direction": self.direction,
        }


VERDICT_ORDER = {"worse": 0, "better": 1, "same": 2}
# How a rank that comes or goes counts among moves: more than any number of places.
NOT_RANKED = 2**62
# The golden queries whose wanted records move (their top three staying) that describe() names, the largest moves first.
MOVES_SHOWN = 10


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
    # The golden queries whose top three stays, and a record they should find moves: the largest moves first.
    moves: list[QueryChange] = field(default_factory=list)
    # Golden queries that had no vector kept by the model, embedded for this preview.
    embedded_now: int = 0
    # Why the edit cannot be saved (a refusal, a conflict): then nothing was compared.
    outcome: Refused | Conflict | None = None

    def move_counts(self) -> tuple[int, int]:
        """How many moves bring the first record a golden query should find closer to the top three, and how many further."""
        return sum(m.direction == "closer" for m in self.moves), sum(m.direction == "further" for m in self.moves)

    def counts(self) -> tuple[int, int, int]:
        """How many changed golden queries gain the record, lose it, and lose another record to it."""
        return (sum(c.gains for c in self.changes), sum(c.loses for c in self.changes), sum(bool(c.displaced) for c in self.changes))

    def describe(self) -> list[str]:
        """The effect for people, a line each: what `edit` and `preview --draft` print."""
        if not self.golden_queries:
            return ["No golden queries to compare (`payrail-embedder golden add` adds them)."]
        if not self.changes:
            lines = [f"No golden query's top three changes ({self.golden_queries} golden {'query' if self.golden_queries == 1 else 'queries'})."]
        else:
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
                *([f"   ranks: {change.rank_words}"] if change.rank_changes else []),
            ]
        lines += self.moves_lines()
        if self.embedded_now:
            lines.append(f"({self.embedded_now} golden queries had no vector kept and were embedded now: `payrail-embedder sync` keeps them.)")
        return lines

    def moves_lines(self) -> list[str]:
        """The golden queries whose records move without a change to their top three, the largest
        moves first (at most MOVES_SHOWN), a line each."""
        if not self.moves:
            return []
        closer, further = self.move_counts()
        lines = [
            f"{len(self.moves)} more golden {'query' if len(self.moves) == 1 else 'queries'}' top three stays, and a record "
            f"{'it' if len(self.moves) == 1 else 'they'} should find moves: {closer} closer to the top three, {further} further"
            + (f" (the {MOVES_SHOWN} largest moves):" if len(self.moves) > MOVES_SHOWN else ":")
        ]
        lines += [
            f"{move.direction}: {json_text(move.golden.query)} (golden query {move.golden.golden_query_id}): {move.rank_words}"
            for move in self.moves[:MOVES_SHOWN]
        ]
        return lines

    def to_json(self) -> dict:
        return {
            "record": self.record.to_json() if self.record else None,
            "enabled": self.enabled,
            "goldenQueries": self.golden_queries,
            "changes": [change.to_json() for change in self.changes],
            "moves": [move.to_json() for move in self.moves],
            "embeddedNow": self.embedded_now,
        }
