"""The exact rank of a record a query should find, among every enabled record, in search's order:
1 + the enabled records search puts before it, so ranks 1 to 3 are what agents get. For
operators only (eval, the Quality page, a record's golden queries, an edit's preview); agents get
three records and no rank.

- On the name path (the query is exactly a name), search answers the name path's matches in its
  order (payrail._name_path_matches, every match): a wanted record among them has its place there;
  one that is not has no rank (None), since search never returns it for that query, however near
  its vector; nor does a draft.
- On the semantic path, in one pass for many queries (db/SEARCH.md, "Exact ranks in one pass"):
  with s' = 1 - d' the first pass's similarity of a record (first_pass.Records), every record
  whose s' is more than 2E above the wanted record's comes before it, every one more than 2E below
  comes after it, and the few in between are ordered in SQL exactly as payrail._search orders
  them (pgvector's distance to the query scaled to unit length, then normalized provider and
  method, in the database's collation).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import psycopg

from ..postgres.connection import naming_pgvector
from . import first_pass

NAME_MATCHES = """
select u.p, m.id, m.provider, m.method
from unnest(%s::text[]) with ordinality as u(query, p)
cross join lateral rows from (payrail._name_path_matches(u.query)) with ordinality as m
order by u.p, m.ordinality
"""


def name_path_matches(conn: psycopg.Connection, queries: Sequence[str]) -> list[tuple[first_pass.Ranked, ...]]:
    """Each query's name-path matches, every one in the name path's order (search answers the
    first three; none: the query takes the semantic path), one statement."""
    answers: list[list[first_pass.Ranked]] = [[] for _ in queries]
    for p, record_id, provider, method in conn.execute(NAME_MATCHES, (list(queries),)):
        answers[p - 1].append(first_pass.Ranked(record_id, provider, method))
    return [tuple(answer) for answer in answers]


def name_ranks(matches: Sequence[first_pass.Ranked], wanted: Sequence[int]) -> dict[int, int | None]:
    """The rank of each wanted record on the name path: its place among the matches, or None."""
    place = {ranked.record_id: rank for rank, ranked in enumerate(matches, start=1)}
    return {record_id: place.get(record_id) for record_id in wanted}


def exact_ranks(
    conn: psycopg.Connection, queries: Sequence[str], vectors: Sequence[np.ndarray], wanted: Sequence[Sequence[int]], dimensions: int | None
) -> list[dict[int, int | None]]:
    """Each query's wanted records (ids) with their exact ranks, as search would order them now:
    on the name path their places among its matches, else among every enabled record (one pass);
    None for a record search never returns for it. vectors: each query's vector as search is sent
    it (a name-path query's is not read); dimensions: the registry model's (None: no record has a
    vector, so none is ranked on the semantic path)."""
    names = name_path_matches(conn, queries)
    ranks = [name_ranks(matches, ids) for matches, ids in zip(names, wanted, strict=True)]
    semantic = {p: list(ids) for p, ids in enumerate(wanted) if ids and not names[p]}
    if dimensions is None or not semantic:
        return ranks
    raw = {p: np.asarray(vectors[p]) for p in semantic}
    units = np.zeros((len(queries), dimensions), np.float32)
    units[list(semantic)] = first_pass.unit_vectors(np.array(list(raw.values())))
    records = first_pass.Records(conn, dimensions)
    for (p, record_id), rank in semantic_ranks(conn, records, first_pass.error_bound(conn, dimensions), units, raw, semantic).items():
        ranks[p][record_id] = rank
    return ranks


# The second pass of a rank: for each key (a wanted record of one query), how many of its
# candidates come before its target in payrail._search's order. A record in no table (the edited
# record as it was, before its save) comes as rows of its own: its vector and names given.
EXACT_AHEAD = """
with q as (select * from unnest(%(vectors)b::{pgvector}.vector[]) with ordinality as q(embedding, n))
select w.k, w.ahead
from (
  select m.k, m.target,
         pg_catalog.count(*) filter (where not m.target)
           over (partition by m.k order by m.distance, m.provider_key, m.method_key rows between unbounded preceding and current row) as ahead
  from (
    select u.k, u.target, pm.embedding operator({pgvector}.<=>) {pgvector}.l2_normalize(q.embedding) as distance,
           payrail._normalize_name(pm.provider) as provider_key, payrail._normalize_name(pm.method) as method_key
    from rows from (unnest(%(keys)s::int[]), unnest(%(numbers)s::int[]), unnest(%(ids)s::bigint[]), unnest(%(targets)s::boolean[])) as u(k, n, id, target)
    join q on q.n = u.n
    cross join lateral (select p.provider, p.method, p.embedding from payrail.provider_methods as p where p.id = u.id offset 0) as pm
    union all
    select e.k, e.target, %(extra_vector)b::{pgvector}.vector operator({pgvector}.<=>) {pgvector}.l2_normalize(q.embedding),
           payrail._normalize_name(%(extra_provider)s::text), payrail._normalize_name(%(extra_method)s::text)
    from rows from (unnest(%(extra_keys)s::int[]), unnest(%(extra_numbers)s::int[]), unnest(%(extra_targets)s::boolean[])) as e(k, n, target)
    join q on q.n = e.n
  ) as m
) as w
where w.target
"""


@dataclass
class _Undecided:
    """The records the first pass could not place against targets, sent to SQL: one key per
    (query position, target), its candidates by id, and whether the extra record is one."""

    positions: list[int] = field(default_factory=list)
    rows: list[tuple[int, int, bool]] = field(default_factory=list)  # (key, record id, is the target)
    extra_rows: list[tuple[int, bool]] = field(default_factory=list)  # (key, is the target)

    def key(self, position: int) -> int:
        self.positions.append(position)
        return len(self.positions) - 1


def semantic_ranks(
    conn: psycopg.Connection,
    records: first_pass.Records,
    bound: float,
    units: np.ndarray,
    vectors: Mapping[int, np.ndarray],
    wanted: Mapping[int, Sequence[int]],
    *,
    excluded: int | None = None,
    extra: first_pass.Extra | None = None,
) -> dict[tuple[int, int], int | None]:
    """(query position, record id) -> the record's exact rank on the semantic path among records
    (every enabled one, as first_pass.Records reads them), for each record wanted at each position;
    None for a record search does not find (not enabled, or without a vector). units: the queries'
    unit vectors by position (first_pass.unit_vectors); vectors: each position's query vector as
    the model made it. excluded: a record whose row is left out, and extra the edited record ranked
    in its stead (as it was before a save read after it), which can be wanted too."""
    ranks: dict[tuple[int, int], int | None] = {}
    keys: dict[tuple[int, int], int] = {}  # (position, record id) -> its key in the second pass
    ahead: dict[int, int] = {}  # key -> the records certainly before its target
    undecided = _Undecided()
    excluded_row = records.row_of.get(excluded) if excluded is not None else None
    extra_id = extra.record.record_id if extra is not None else None
    positions = [p for p in wanted if wanted[p]]
    for block in first_pass.position_blocks(positions, len(records)):
        similarities = records.similarities(units[block])
        if excluded_row is not None:
            similarities[excluded_row] = -np.inf
        extra_similarities = units[block] @ extra.unit if extra is not None else None
        for column, p in enumerate(block):
            s = similarities[:, column]
            for record_id in wanted[p]:
                row = records.row_of.get(record_id)
                if extra_similarities is not None and record_id == extra_id:
                    target = extra_similarities[column]
                elif row is not None and row != excluded_row:
                    target = s[row]
                else:
                    ranks[(p, record_id)] = None
                    continue
                # Above high: more than 2E nearer by d', so nearer by d; below low: farther.
                high = first_pass.at_least(np.asarray(np.float64(target) + 2 * bound))
                low = first_pass.at_most(np.asarray(np.float64(target) - 2 * bound))
                key = keys[(p, record_id)] = undecided.key(p)
                ahead[key] = int(np.count_nonzero(s > high))
                band = records.ids[np.flatnonzero((s >= low) & (s <= high))]
                undecided.rows += [(key, int(i), int(i) == record_id and record_id != extra_id) for i in band]
                if record_id == extra_id:
                    undecided.extra_rows.append((key, True))
                elif extra_similarities is not None:
                    if extra_similarities[column] > high:
                        ahead[key] += 1
                    elif extra_similarities[column] >= low:
                        undecided.extra_rows.append((key, False))
    before = _exact_ahead(conn, vectors, undecided, extra)
    return ranks | {pair: 1 + ahead[key] + before[key] for pair, key in keys.items()}


def _exact_ahead(conn: psycopg.Connection, vectors: Mapping[int, np.ndarray], undecided: _Undecided, extra: first_pass.Extra | None) -> dict[int, int]:
    """key -> how many of its candidates come before its target in search's exact order."""
    if not undecided.positions:
        return {}
    positions = sorted(set(undecided.positions))
    number = {p: n for n, p in enumerate(positions, start=1)}
    numbers = [number[p] for p in undecided.positions]
    rows = conn.execute(
        naming_pgvector(conn, EXACT_AHEAD),
        {
            "vectors": [vectors[p] for p in positions],
            "keys": [key for key, _, _ in undecided.rows],
            "numbers": [numbers[key] for key, _, _ in undecided.rows],
            "ids": [record_id for _, record_id, _ in undecided.rows],
            "targets": [target for _, _, target in undecided.rows],
            "extra_vector": extra.vector if extra is not None else None,
            "extra_provider": extra.record.provider if extra is not None else None,
            "extra_method": extra.record.method if extra is not None else None,
            "extra_keys": [key for key, _ in undecided.extra_rows],
            "extra_numbers": [numbers[key] for key, _ in undecided.extra_rows],
            "extra_targets": [target for _, target in undecided.extra_rows],
        },
    ).fetchall()
    return {key: count for key, count in rows}


def passed(
    conn: psycopg.Connection,
    dimensions: int,
    bound: float,
    units: np.ndarray,
    vectors: Mapping[int, np.ndarray],
    pairs: Sequence[tuple[int, int]],
    old: first_pass.Extra | None,
    old_unit: np.ndarray | None,
    new: first_pass.Extra | None,
    new_unit: np.ndarray | None,
) -> set[int]:
    """The positions of the (query position, wanted record) pairs where an edited record stands on
    different sides of the wanted record before and after its save, in search's order: where the
    wanted record's rank moves, though no other record moved. old: the record as search found it
    before (None: it did not), old_unit its first-pass vector; new: as it is saved and stored now,
    new_unit the same. Decided by d' where the record and the wanted one are more than 2E apart,
    else exactly in SQL (one statement); the wanted records' rows alone are read."""
    wanted = first_pass.Records(conn, dimensions, only=sorted({record_id for _, record_id in pairs}))
    pairs = [(p, record_id) for p, record_id in pairs if record_id in wanted.row_of]
    if not pairs:
        return set()
    positions = np.array([p for p, _ in pairs])
    rows = np.array([wanted.row_of[record_id] for _, record_id in pairs])
    wanted_s = np.einsum("ij,ij->i", units[positions], wanted.vectors[rows].astype(np.float32)).astype(np.float64)
    high, low = first_pass.at_least(wanted_s + 2 * bound), first_pass.at_most(wanted_s - 2 * bound)
    sides: list[list[bool | None]] = []  # for old, then new: ahead of the wanted record (True, False), or undecided (None)
    for unit in (old_unit, new_unit):
        if unit is None:
            sides.append([False] * len(pairs))
            continue
        s = units[positions] @ unit
        sides.append([True if a else False if b else None for a, b in zip(s > high, s < low, strict=True)])
    undecided = _Undecided()
    keys: dict[tuple[int, int], int] = {}  # (pair, 0 for old or 1 for new) -> key
    for i, (p, record_id) in enumerate(pairs):
        for side, edited in enumerate((old, new)):
            if sides[side][i] is None and edited is not None:
                key = keys[(i, side)] = undecided.key(p)
                undecided.rows.append((key, record_id, True))
                if side == 0:
                    undecided.extra_rows.append((key, False))
                else:
                    undecided.rows.append((key, edited.record.record_id, False))
    ahead = _exact_ahead(conn, vectors, undecided, old)
    for (i, side), key in keys.items():
        sides[side][i] = bool(ahead[key])
    return {p for i, (p, _) in enumerate(pairs) if sides[0][i] != sides[1][i]}
