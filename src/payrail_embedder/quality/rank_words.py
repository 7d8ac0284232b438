"""How operators read a wanted record's exact rank (wanted_ranks), in one place: eval, the Quality
page, a record's golden queries and every preview (an edit's, a restore's) say it with these.
Agents never see a rank: search gives them three records and no score.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

# What agents get: the first three of search's order.
TOP = 3
# eval's hit@10: the first record a query should find within this rank.
NEAR = 10


def places_from_top(rank: int | None) -> int | None:
    """How many places a rank is below the third (0 within the top three; None without a rank)."""
    return None if rank is None else max(0, rank - TOP)


def rank_in_words(rank: int | None, enabled: bool | None = True) -> str:
    """A wanted record's exact rank: "rank 2", "rank 41: 38 places from the top three"; without
    one, why search never returns it for the query (enabled: whether the record is; None: no
    record goes by its names)."""
    if rank is None:
        if enabled is None:
            return "not ranked: no record goes by this name"
        return "not ranked: a draft, which search never returns" if not enabled else "not ranked: the name path answers this query with other records"
    places = places_from_top(rank)
    if not places:
        return f"rank {rank}"
    return f"rank {rank}: {places} {'place' if places == 1 else 'places'} from the top three"


def move_in_words(before: int | None, after: int | None) -> str:
    """A wanted record's rank before and after a change: "rank 41 -> 4; still not in the top three"."""
    # "rank 41 -> 4", as an operator writes it; "not ranked -> rank 1" when there was none before.
    then = "not ranked" if before is None else f"rank {before}"
    now = "not ranked" if after is None else f"rank {after}" if before is None else str(after)
    words = f"{then} -> {now}"
    was, will = (rank is not None and rank <= TOP for rank in (before, after))
    return words + (
        "; in the top three" if was and will else "; now in the top three" if will else "; leaves the top three" if was else "; still not in the top three"
    )


def closeness(rank: int | None) -> tuple[bool, int]:
    """A sort key: the nearest ranks first, none last (the Quality page's misses)."""
    return (rank is None, rank or 0)


def rank_figures(first_ranks: Sequence[int | None]) -> dict:
    """eval's figures of the rank of the first record each query should find: mean and median over
    the queries with one, hit@10 over all, and how many have none (only drafts wanted, or the name
    path answers with other records)."""
    ranked = [rank for rank in first_ranks if rank is not None]
    return {
        "meanRank": statistics.fmean(ranked) if ranked else None,
        "medianRank": statistics.median(ranked) if ranked else None,
        f"hit@{NEAR}": sum(rank <= NEAR for rank in ranked) / len(first_ranks) if first_ranks else 0.0,
        "unranked": len(first_ranks) - len(ranked),
    }


def figures_in_words(figures: dict) -> str:
    """rank_figures as eval's text says them."""
    if figures["meanRank"] is None:
        return f"rank of the first record to find: none ranked; hit@{NEAR} {figures[f'hit@{NEAR}']:.3f}"
    unranked = f"; {figures['unranked']} not ranked" if figures["unranked"] else ""
    return (
        f"rank of the first record to find: mean {figures['meanRank']:.1f}, median {figures['medianRank']:g}; hit@{NEAR} {figures[f'hit@{NEAR}']:.3f}{unranked}"
    )
