"""The first pass of search over every enabled record at once, in NumPy, for many queries: the
records' half-precision unit vectors (payrail.provider_method_half_vectors) times the queries'
unit vectors, whose distance d' is within E = payrail._half_precision_error_bound of pgvector's
exact one (db/SEARCH.md, "Golden queries in one pass"); and the second pass in SQL, which orders
the records the first could not tell apart exactly as payrail._search does. golden_rankings ranks
golden queries' top threes with it, wanted_ranks the exact rank of each record they should find.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import psycopg

from ..postgres.connection import naming_pgvector, one_row, one_value
from ..registry.search import SearchUnavailable
from . import rank_words

# Records read from the database per statement: each chunk is one bytea value of about 3 kB a record
# at 1,536 dimensions, well under PostgreSQL's 1 GB for a value.
READ_CHUNK = 20_000
# Records converted to float32 at a time for the matrix product: 24 MB at 1,536 dimensions.
ROW_BLOCK = 4_096
# At most this many similarities (records x queries) in memory at once: 64 MB of float32.
MAX_DISTANCES = 16_000_000
TOP = rank_words.TOP


@dataclass(frozen=True)
class Ranked:
    """A record as search ranks it for a query: its id and names."""

    record_id: int
    provider: str
    method: str

    @property
    def name(self) -> str:
        return f"{self.provider} / {self.method}"

    def to_json(self) -> dict:
        return {"recordId": self.record_id, "provider": self.provider, "method": self.method}


class Records:
    """Enabled records' unit vectors as the first pass reads them: the half-precision rows of
    payrail.provider_method_half_vectors (or, on a pgvector without halfvec, the exact vectors
    scaled to unit length in float32), with their ids. Every enabled record; or, with a sample
    size, about that many of them (ids spread by a modulo: which ones changes no answer, only how
    many queries the sample proves unchanged), without the record excluded; or those of only (ids)."""

    def __init__(
        self, conn: psycopg.Connection, dimensions: int, *, sample: int | None = None, excluded: int | None = None, only: Sequence[int] | None = None
    ) -> None:
        half = one_value(conn.execute("select pg_catalog.to_regclass('payrail.provider_method_half_vectors') is not null"))
        table, id_column, vector_column, send, enabled = (
            ("payrail.provider_method_half_vectors", "provider_method_id", "unit_embedding", "halfvec_send", "true")
            if half
            else ("payrail.provider_methods", "id", "embedding", "vector_send", "enabled")
        )
        stride = 1
        if sample is not None:
            low, high = one_row(conn.execute(f"select pg_catalog.min({id_column}), pg_catalog.max({id_column}) from {table} where {enabled}"))
            stride = max(1, (high - low + 1) // sample) if low is not None else 1
        statement = naming_pgvector(
            conn,
            f"""
            select pg_catalog.count(*), pg_catalog.max(r.id), pg_catalog.string_agg(pg_catalog.int8send(r.id) || {{pgvector}}.{send}(r.v), ''::bytea)
            from (select t.{id_column}, t.{vector_column} from {table} as t
                  where {enabled} and t.{id_column} > %(after)s and t.{id_column} %% %(stride)s = 0 and t.{id_column} is distinct from %(excluded)s
                    and (%(only)s::bigint[] is null or t.{id_column} = any(%(only)s::bigint[]))
                  order by t.{id_column} limit %(limit)s) as r(id, v)""",
        )
        # Each row: the id (int8), then the vector's binary form: dimensions and a reserved int16, the components big-endian.
        row = np.dtype([("id", ">i8"), ("dimensions", ">i2"), ("unused", ">i2"), ("x", ">f2" if half else ">f4", (dimensions,))])
        ids, vectors, after = [], [], 0
        while True:
            parameters = {"after": after, "stride": stride, "excluded": excluded, "only": None if only is None else list(only), "limit": READ_CHUNK}
            count, last, data = one_row(conn.execute(statement, parameters, binary=True))
            if not count:
                break
            rows = np.frombuffer(data, dtype=row)
            if len(rows) != count or np.any(rows["dimensions"] != dimensions):
                raise SearchUnavailable(f"the enabled records' vectors are not all of the registry's {dimensions} dimensions")
            ids.append(rows["id"].astype(np.int64))
            vectors.append(rows["x"].astype(np.float16) if half else unit_vectors(rows["x"]))
            after = last
            if count < READ_CHUNK:
                break
        self.ids = np.concatenate(ids) if ids else np.zeros(0, np.int64)
        self.vectors = np.concatenate(vectors) if vectors else np.zeros((0, dimensions), np.float16 if half else np.float32)
        self.row_of = {int(record_id): row for row, record_id in enumerate(self.ids)}

    def __len__(self) -> int:
        return len(self.ids)

    def similarities(self, queries: np.ndarray, rows: np.ndarray | slice = slice(None)) -> np.ndarray:
        """unit record . unit query, summed in float32, records by queries: 1 - d' (d' the first
        pass's distance). Compared as similarities, so no rounding comes between them and d'."""
        vectors = self.vectors[rows]
        out = np.empty((len(vectors), len(queries)), np.float32)
        for start in range(0, len(vectors), ROW_BLOCK):
            out[start : start + ROW_BLOCK] = vectors[start : start + ROW_BLOCK].astype(np.float32) @ queries.T
        return out


def unit_vectors(vectors: np.ndarray) -> np.ndarray:
    """Each row scaled to unit length in float64, then rounded to float32."""
    vectors = np.asarray(vectors, np.float64)
    return (vectors / np.linalg.norm(vectors, axis=-1, keepdims=True)).astype(np.float32)


def error_bound(conn: psycopg.Connection, dimensions: int) -> float:
    """E, the bound of |d' - d| (db/SEARCH.md, "The error bound"): the database's own formula."""
    return one_value(conn.execute("select payrail._half_precision_error_bound(%s)", (dimensions,)))


def at_least(threshold: np.ndarray) -> np.ndarray:
    """The smallest float32 at or above each float64 threshold: for a float32 s, s >= it exactly
    when s >= the threshold."""
    rounded = threshold.astype(np.float32)
    return np.where(rounded < threshold, np.nextafter(rounded, np.float32(np.inf)), rounded)


def at_most(threshold: np.ndarray) -> np.ndarray:
    """The largest float32 at or below each float64 threshold: for a float32 s, s <= it exactly
    when s <= the threshold."""
    rounded = threshold.astype(np.float32)
    return np.where(rounded > threshold, np.nextafter(rounded, np.float32(-np.inf)), rounded)


def candidate_floor(similarities: np.ndarray, bound: float, excluded_row: int | None = None, extra: np.ndarray | None = None) -> np.ndarray:
    """For each column (a query), the least similarity a record within 2E of the 3rd nearest has:
    s >= s3 - 2E, s3 the 3rd largest similarity (1 - d' of the 3rd smallest d'); among the rows but
    excluded_row, and extra (one more record's similarity to each query) when given. Any record
    in the top three is at or above it (db/SEARCH.md, "Second pass"); -inf when fewer than three."""
    if excluded_row is not None:
        kept = similarities[excluded_row].copy()
        similarities[excluded_row] = -np.inf
    try:
        rows = len(similarities)
        largest = np.partition(similarities, rows - TOP, axis=0)[rows - TOP :] if rows >= TOP else similarities.copy()
    finally:
        if excluded_row is not None:
            similarities[excluded_row] = kept
    if extra is not None:
        largest = np.vstack([largest, extra[None, :]])
    if len(largest) < TOP:
        return np.full(similarities.shape[1], -np.inf, np.float32)
    third = np.sort(largest, axis=0)[len(largest) - TOP].astype(np.float64)
    # A row at -inf (the excluded one, when fewer than three others are left) sets no floor.
    return np.where(np.isfinite(third), at_least(third - 2 * bound), np.float32(-np.inf))


def candidate_rows(similarities: np.ndarray, floor: np.ndarray, excluded_row: int | None = None) -> list[np.ndarray]:
    """For each column, the rows at or above its floor (but excluded_row), in order."""
    columns, rows = np.nonzero((similarities >= floor[None, :]).T)
    found = np.split(rows, np.searchsorted(columns, np.arange(1, similarities.shape[1])))
    return [r[r != excluded_row] for r in found] if excluded_row is not None else found


# The second pass: each (query position, record id) candidate's exact distance, as payrail._search
# orders them (pgvector's distance to the query scaled to unit length, then normalized provider
# and method, in the database's collation), the first three of each query. A record in no table
# (the edited record as a save would leave it) comes as one row more: its vector and names given.
EXACT_TOP = """
with q as (select * from unnest(%(vectors)b::{pgvector}.vector[]) with ordinality as q(embedding, p))
select c.p, c.id, c.provider, c.method
from (
  select n.p, n.id, n.provider, n.method,
         pg_catalog.row_number() over (partition by n.p order by n.distance, n.provider_key, n.method_key) as rank
  from (
    select u.p, pm.id, pm.provider, pm.method, pm.embedding operator({pgvector}.<=>) {pgvector}.l2_normalize(q.embedding) as distance,
           payrail._normalize_name(pm.provider) as provider_key, payrail._normalize_name(pm.method) as method_key
    from unnest(%(positions)s::int[], %(ids)s::bigint[]) as u(p, id)
    join q on q.p = u.p
    cross join lateral (select p.id, p.provider, p.method, p.embedding from payrail.provider_methods as p where p.id = u.id offset 0) as pm
    union all
    select q.p, %(extra_id)s::bigint, %(extra_provider)s::text, %(extra_method)s::text,
           %(extra_vector)b::{pgvector}.vector operator({pgvector}.<=>) {pgvector}.l2_normalize(q.embedding),
           payrail._normalize_name(%(extra_provider)s::text), payrail._normalize_name(%(extra_method)s::text)
    from q
    where q.p = any(%(extra_positions)s::int[])
  ) as n
) as c
where c.rank <= 3
order by c.p, c.rank
"""


@dataclass(frozen=True)
class Extra:
    """The edited record as the save would leave it, ranked beside the stored records."""

    record: Ranked
    vector: np.ndarray  # as stored (search scales the query, not the record)

    @cached_property
    def unit(self) -> np.ndarray:
        """vector scaled to unit length in float32, as the first pass compares it."""
        return unit_vectors(self.vector[None, :])[0]


def exact_top(
    conn: psycopg.Connection,
    vectors: Mapping[int, np.ndarray],
    pairs: dict[int, Sequence[int]],
    extra: Extra | None = None,
    extra_positions: Sequence[int] = (),
) -> dict[int, tuple[Ranked, ...]]:
    """Query position -> its top three among its candidate record ids (pairs) and, for
    extra_positions, extra: the second pass, one statement. vectors: each position's query vector."""
    positions = sorted(set(pairs) | set(extra_positions))
    if not positions:
        return {}
    # Only the vectors of these positions are sent, numbered from 1 as unnest's ordinality counts.
    number = {p: n for n, p in enumerate(positions, start=1)}
    flat = [(number[p], int(i)) for p, ids in pairs.items() for i in ids]
    rows = conn.execute(
        naming_pgvector(conn, EXACT_TOP),
        {
            "positions": [n for n, _ in flat],
            "ids": [i for _, i in flat],
            "vectors": [vectors[p] for p in positions],
            "extra_id": extra.record.record_id if extra else None,
            "extra_provider": extra.record.provider if extra else None,
            "extra_method": extra.record.method if extra else None,
            "extra_vector": extra.vector if extra else None,
            "extra_positions": [number[p] for p in extra_positions] if extra else [],
        },
    ).fetchall()
    top: dict[int, list[Ranked]] = {p: [] for p in positions}
    for n, record_id, provider, method in rows:
        top[positions[n - 1]].append(Ranked(record_id, provider, method))
    return {p: tuple(ranked) for p, ranked in top.items()}


def position_blocks(positions: Sequence[int], records: int) -> list[list[int]]:
    """positions in blocks whose similarities (records x queries) fit in MAX_DISTANCES."""
    size = max(1, MAX_DISTANCES // max(1, records))
    positions = list(positions)
    return [positions[start : start + size] for start in range(0, len(positions), size)]
