"""Every golden query's top three at once, exactly as search ranks them: now (the Quality page, a
record's golden queries) and as an edit would leave them before it is saved (effect_of).

eval puts each golden query through search, one search each (about 10 ms at 10,000 records) after
embedding them all. Here they are ranked together from the vectors kept with them
(golden.QueryVectors; a golden query without one is embedded now), in the two passes of
payrail._search (db/SEARCH.md, "Golden queries in one pass"):

- the name path: payrail._name_path_matches for every golden query, in one statement;
- a first pass in NumPy: every enabled record's half-precision unit vector
  (payrail.provider_method_half_vectors) times every golden query's unit vector, one matrix
  product. Its distance d' is within E = payrail._half_precision_error_bound of pgvector's exact
  one, as the first pass of search is, so each query keeps every record within 2E of its 3rd
  smallest d': the records that can be in its top three;
- a second pass in SQL: those records ordered by pgvector's exact distance, then normalized
  provider and method (the database's collation), the first three kept.

An edit changes one record: its vector, its names, whether it is enabled. effect_of saves it in a
transaction it rolls back (write.tentatively_saved) to read the record as it would be stored and
every golden query's name-path answer after it, then ranks only the golden queries whose top three
can change: a query on the semantic path before and after keeps its top three when three other
records are nearer than the record was and would be. Three records of a sample of the registry
(SAMPLE_ROWS) prove that for most queries at a fraction of the matrix product's cost; the rest
are ranked in full, before and after.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import psycopg

from ..base.reports import Report
from ..base.safe_text import json_text
from ..embedders import Embedder, EmbeddingUnavailable
from ..postgres.connection import naming_pgvector, one_row, one_value
from ..registry import golden
from ..registry.embedding_model import EmbeddingModel, registry_model
from ..registry.golden import GoldenQuery
from ..registry.search import SearchUnavailable
from ..registry.write import Conflict, Prepared, Refused, tentatively_saved
from .evaluation import query_metrics

# Records read from the database per statement: each chunk is one bytea value of about 3 kB a record
# at 1,536 dimensions, well under PostgreSQL's 1 GB for a value.
READ_CHUNK = 20_000
# Records converted to float32 at a time for the matrix product: 24 MB at 1,536 dimensions.
ROW_BLOCK = 4_096
# At most this many similarities (records x queries) in memory at once: 64 MB of float32.
MAX_DISTANCES = 16_000_000
# Records whose distances decide which golden queries an edit leaves alone (effect_of).
SAMPLE_ROWS = 1_024
TOP = 3


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


class _Queries:
    """The golden queries to rank, with the vectors of those at positions only (all by default) by
    the model: as the model made them (what search is sent) and scaled to unit length in float32
    (the first pass), each at its golden query's position."""

    def __init__(
        self,
        conn: psycopg.Connection,
        embedder_factory: Callable[[], Embedder],
        goldens: Sequence[GoldenQuery],
        model: EmbeddingModel | None,
        only: Sequence[int] | None = None,
    ):
        self.goldens = list(goldens)
        self.embedded_now = 0
        # The vectors of the golden queries at positions, by position.
        self.raw: dict[int, np.ndarray] = {}
        positions = range(len(self.goldens)) if only is None else only
        if model is None or not positions:
            self.units = np.zeros((len(self.goldens), 0), np.float32)
            return
        ids = [self.goldens[p].golden_query_id for p in positions]
        stored = {
            golden_id: embedding.to_numpy()
            for golden_id, embedding in conn.execute(
                naming_pgvector(
                    conn,
                    """select e.golden_query_id, e.embedding from payrail.golden_query_embeddings as e
                   join payrail.golden_queries as g on g.id = e.golden_query_id
                   where e.golden_query_id = any(%s) and e.model = %s and e.query = g.query and {pgvector}.vector_dims(e.embedding) = %s""",
                ),
                (ids, model.name, model.dimensions),
                binary=True,
            ).fetchall()
        }
        for position, golden_id in zip(positions, ids):
            if golden_id in stored:
                self.raw[position] = stored[golden_id]
        missing = [position for position in positions if position not in self.raw]
        if missing:
            try:
                made = golden.embedded_by(embedder_factory, model, [self.goldens[p].query for p in missing])
            except EmbeddingUnavailable as error:
                raise SearchUnavailable(
                    f"{len(missing)} golden {'query has' if len(missing) == 1 else 'queries have'} no vector by {model.name} kept, "
                    f"and embedding {'it' if len(missing) == 1 else 'them'} failed: {error} "
                    "(`payrail-embedder sync` keeps them once the service is back)",
                    "embedding_service",
                ) from error
            for position, vector in zip(missing, made):
                self.raw[position] = vector
            self.embedded_now = len(missing)
        self.units = np.zeros((len(self.goldens), model.dimensions), np.float32)
        self.units[list(positions)] = _unit(np.array([self.raw[p] for p in positions]))


class _Records:
    """Enabled records' unit vectors as the first pass reads them: the half-precision rows of
    payrail.provider_method_half_vectors (or, on a pgvector without halfvec, the exact vectors
    scaled to unit length in float32), with their ids. Every enabled record; or, with a sample
    size, about that many of them (ids spread by a modulo: which ones changes no answer, only how
    many queries the sample proves unchanged), without the record excluded; or the record only."""

    def __init__(self, conn: psycopg.Connection, dimensions: int, *, sample: int | None = None, excluded: int | None = None, only: int | None = None) -> None:
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
                    and (%(only)s::bigint is null or t.{id_column} = %(only)s)
                  order by t.{id_column} limit %(limit)s) as r(id, v)""",
        )
        # Each row: the id (int8), then the vector's binary form: dimensions and a reserved int16, the components big-endian.
        row = np.dtype([("id", ">i8"), ("dimensions", ">i2"), ("unused", ">i2"), ("x", ">f2" if half else ">f4", (dimensions,))])
        ids, vectors, after = [], [], 0
        while True:
            parameters = {"after": after, "stride": stride, "excluded": excluded, "only": only, "limit": READ_CHUNK}
            count, last, data = one_row(conn.execute(statement, parameters, binary=True))
            if not count:
                break
            rows = np.frombuffer(data, dtype=row)
            if len(rows) != count or np.any(rows["dimensions"] != dimensions):
                raise SearchUnavailable(f"the enabled records' vectors are not all of the registry's {dimensions} dimensions")
            ids.append(rows["id"].astype(np.int64))
            vectors.append(rows["x"].astype(np.float16) if half else _unit(rows["x"]))
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


def _unit(vectors: np.ndarray) -> np.ndarray:
    """Each row scaled to unit length in float64, then rounded to float32."""
    vectors = np.asarray(vectors, np.float64)
    return (vectors / np.linalg.norm(vectors, axis=-1, keepdims=True)).astype(np.float32)


def _error_bound(conn: psycopg.Connection, dimensions: int) -> float:
    """E, the bound of |d' - d| (db/SEARCH.md, "The error bound"): the database's own formula."""
    return one_value(conn.execute("select payrail._half_precision_error_bound(%s)", (dimensions,)))


def _at_least(threshold: np.ndarray) -> np.ndarray:
    """The smallest float32 at or above each float64 threshold: for a float32 s, s >= it exactly
    when s >= the threshold."""
    rounded = threshold.astype(np.float32)
    return np.where(rounded < threshold, np.nextafter(rounded, np.float32(np.inf)), rounded)


def _floor(similarities: np.ndarray, bound: float, excluded_row: int | None = None, extra: np.ndarray | None = None) -> np.ndarray:
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
    return np.where(np.isfinite(third), _at_least(third - 2 * bound), np.float32(-np.inf))


def _candidate_rows(similarities: np.ndarray, floor: np.ndarray, excluded_row: int | None = None) -> list[np.ndarray]:
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
class _Extra:
    """The edited record as the save would leave it, ranked beside the stored records."""

    record: Ranked
    vector: np.ndarray  # as stored (search scales the query, not the record)

    @cached_property
    def unit(self) -> np.ndarray:
        """vector scaled to unit length in float32, as the first pass compares it."""
        return _unit(self.vector[None, :])[0]


def _exact_top(
    conn: psycopg.Connection,
    vectors: Mapping[int, np.ndarray],
    pairs: dict[int, Sequence[int]],
    extra: _Extra | None = None,
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


NAME_ANSWERS = """
select u.p, m.id, m.provider, m.method
from unnest(%s::text[]) with ordinality as u(query, p)
cross join lateral rows from (payrail._name_path_matches(u.query)) with ordinality as m
order by u.p, m.ordinality
"""


def _name_answers(conn: psycopg.Connection, goldens: Sequence[GoldenQuery]) -> list[tuple[Ranked, ...]]:
    """Each golden query's name-path answer (empty: it takes the semantic path), one statement."""
    answers: list[list[Ranked]] = [[] for _ in goldens]
    for p, record_id, provider, method in conn.execute(NAME_ANSWERS, ([g.query for g in goldens],)):
        answers[p - 1].append(Ranked(record_id, provider, method))
    return [tuple(answer) for answer in answers]


# Golden queries ranked by search itself, one statement each, when at most this many need it: at
# 10,000 records of 1,536 dimensions a search takes about 10 ms, reading every record's vector for
# the matrix product about 200 ms (docs/benchmarks.md, "Golden queries and an edit's effect").
SEARCH_AT_MOST = 24

# What search answers a golden query, each record with its id (found by its unique normalized names).
SEARCHED = """
select pm.id, pm.provider, pm.method
from rows from (payrail.search_provider_methods(%s, %b::{pgvector}.vector, %s)) with ordinality as s
cross join lateral (
  select p.id, p.provider, p.method from payrail.provider_methods as p
  where payrail._normalize_name(p.provider) = payrail._normalize_name(s.provider)
    and payrail._normalize_name(p.method) = payrail._normalize_name(s.method)
  offset 0
) as pm
order by s.ordinality
"""


def _searched(conn: psycopg.Connection, queries: _Queries, positions: Sequence[int], model: EmbeddingModel) -> dict[int, tuple[Ranked, ...]]:
    """What search answers the golden queries at positions, one search each, with their vectors."""
    return {
        p: tuple(Ranked(*row) for row in conn.execute(naming_pgvector(conn, SEARCHED), (queries.goldens[p].query, queries.raw[p], model.name)).fetchall())
        for p in positions
    }


def _semantic_tops(conn: psycopg.Connection, queries: _Queries, records: _Records, positions: Sequence[int], bound: float) -> dict[int, tuple[Ranked, ...]]:
    """The semantic path's top three of the queries at positions, over the enabled records (one pass)."""
    pairs = {}
    for block in _position_blocks(positions, len(records)):
        similarities = records.similarities(queries.units[block])
        for p, rows in zip(block, _candidate_rows(similarities, _floor(similarities, bound))):
            pairs[p] = records.ids[rows]
    return _exact_top(conn, queries.raw, pairs)


def _position_blocks(positions: Sequence[int], records: int) -> list[list[int]]:
    """positions in blocks whose similarities (records x queries) fit in MAX_DISTANCES."""
    size = max(1, MAX_DISTANCES // max(1, records))
    positions = list(positions)
    return [positions[start : start + size] for start in range(0, len(positions), size)]


def rank_golden_queries(
    conn: psycopg.Connection,
    embedder_factory: Callable[[], Embedder],
    goldens: Sequence[GoldenQuery] | None = None,
    *,
    search_at_most: int = SEARCH_AT_MOST,
) -> tuple[list[Ranking], int]:
    """What search answers each golden query now (all of them when goldens is None), in their
    order, and how many had no vector kept and were embedded for it. The same top three as eval's
    (a test checks it on both servers): search itself for at most search_at_most semantic queries,
    one pass over every record's vector for more. Raises SearchUnavailable when a golden query
    without a vector kept cannot be embedded."""
    goldens = golden.golden_queries(conn) if goldens is None else list(goldens)
    if not goldens:
        return [], 0
    model = registry_model(conn)
    names = _name_answers(conn, goldens)
    semantic = [p for p, answer in enumerate(names) if not answer]
    queries = _Queries(conn, embedder_factory, goldens, model, only=semantic)
    tops: dict[int, tuple[Ranked, ...]] = {}
    if semantic and model is not None:
        if len(semantic) <= search_at_most:
            tops = _searched(conn, queries, semantic, model)
        else:
            tops = _semantic_tops(conn, queries, _Records(conn, model.dimensions), semantic, _error_bound(conn, model.dimensions))
    rankings = [Ranking(g, names[p] or tops.get(p, ()), bool(names[p])) for p, g in enumerate(goldens)]
    return rankings, queries.embedded_now


def _name_forms(provider: str, method: str) -> list[str]:
    """The texts that name a record on the name path: its provider, its method, and the pair
    written both ways (payrail._name_path_matches compares each, normalized, with the query)."""
    return [provider, method, f"{provider} {method}", f"{provider} / {method}"]


def _named_like(conn: psycopg.Connection, goldens: Sequence[GoldenQuery], names: Sequence[tuple[str, str]]) -> list[int]:
    """Positions of the golden queries that are, compared as names are, a name form of one of
    names: the only ones whose name-path answer an edit of that record can change."""
    forms = [form for provider, method in names for form in _name_forms(provider, method)]
    found = {
        golden_id
        for (golden_id,) in conn.execute("select g.id from unnest(%s::text[]) as f(name) cross join lateral payrail._golden_query_named(f.name) as g", (forms,))
    }
    return [p for p, g in enumerate(goldens) if g.golden_query_id in found]


@dataclass(frozen=True)
class _Saved:
    """The edited record as the tentative save left it."""

    record: Ranked
    enabled: bool
    vector: np.ndarray | None


def _saved(conn: psycopg.Connection, record_id: int) -> _Saved:
    record_id, provider, method, enabled, embedding = one_row(
        conn.execute("select id, provider, method, enabled, embedding from payrail.provider_methods where id = %s", (record_id,), binary=True)
    )
    return _Saved(Ranked(record_id, provider, method), enabled, embedding.to_numpy() if embedding is not None else None)


def effect_of(conn: psycopg.Connection, embedder_factory: Callable[[], Embedder], prepared: Prepared, *, search_at_most: int = SEARCH_AT_MOST) -> Effect:
    """The golden queries whose top three the prepared change (write.prepare_change) would change,
    each with its top three before and after, as search ranks them once it is saved; nothing is
    saved. The effect's outcome says why when the change cannot be saved.

    The save is made in a transaction that rolls back (write.tentatively_saved), to read the
    record as it would be stored and the name-path answers after it. A golden query keeps its top
    three when it is named like the record neither before nor after (the name path answers it the
    same) and three records of a sample are each more than 2E nearer to it by d' than the record
    was and would be (its semantic top three is that of the other records both times:
    _left_alone). The others are ranked before and after: by search itself when at most
    search_at_most need it, else by one pass over every record's vector (_ranked_in_one_pass)."""
    if prepared.outcome is not None:
        return Effect(None, False, outcome=prepared.outcome)
    goldens = golden.golden_queries(conn)
    if not goldens:
        return Effect(None, bool(prepared.change.record.enabled))
    record_id = prepared.record_id
    stored_names = conn.execute("select provider, method from payrail.provider_methods where id = %s", (record_id,)).fetchone() if record_id else None
    model = registry_model(conn)
    if model is None and prepared.embedding is not None:  # its first vector makes the registry's model
        model = EmbeddingModel(prepared.embedding.embedder.model_name, prepared.embedding.vector.size)
    queries = _Queries(conn, embedder_factory, goldens, model)
    sample, old_unit, bound = None, None, 0.0
    if model is not None:
        sample = _Records(conn, model.dimensions, sample=SAMPLE_ROWS, excluded=record_id)
        edited = _Records(conn, model.dimensions, only=record_id) if record_id is not None else None
        old_unit = edited.vectors[0].astype(np.float32) if edited is not None and len(edited) else None
        bound = _error_bound(conn, model.dimensions)
    with tentatively_saved(conn, prepared) as outcome:
        if isinstance(outcome, (Refused, Conflict)):
            return Effect(None, False, outcome=outcome)
        saved = _saved(conn, outcome.record_id)
        effect = Effect(saved.record, saved.enabled, len(goldens), embedded_now=queries.embedded_now)
        if model is None:  # no record has a vector, nor will this one: search answers nothing, before and after
            return effect
        named = _named_like(conn, goldens, ([tuple(stored_names)] if stored_names else []) + [(saved.record.provider, saved.record.method)])
        after_named = dict(zip(named, _name_answers(conn, [goldens[p] for p in named])))
        # The record as search will find it; None when it will not.
        found = _Extra(saved.record, saved.vector) if saved.enabled and saved.vector is not None else None
        new_unit = found.unit if found is not None else None
        others = [p for p in range(len(goldens)) if p not in after_named]
        flagged = [p for p, alone in zip(others, _left_alone(sample, queries.units[others], old_unit, new_unit, bound)) if not alone]
        # Named like the record neither before nor after: the name path answers them the same both times.
        flagged_names = dict(zip(flagged, _name_answers(conn, [goldens[p] for p in flagged])))
        semantic = [p for p in flagged if not flagged_names[p]]
        after_semantic = semantic + [p for p in named if not after_named[p]]
        by_search = len(semantic) + len(named) <= search_at_most
        after = _searched(conn, queries, after_semantic, model) if by_search else {}
    now_named = dict(zip(named, _name_answers(conn, [goldens[p] for p in named])))
    before_semantic = semantic + [p for p in named if not now_named[p]]
    if by_search:
        before = _searched(conn, queries, before_semantic, model)
    else:
        before, after = _ranked_in_one_pass(conn, queries, model, bound, before_semantic, after_semantic, saved.record.record_id, found)
    for p in sorted({*named, *semantic}):
        then = Ranking(goldens[p], now_named.get(p) or before.get(p, ()), bool(now_named.get(p)))
        now = Ranking(goldens[p], after_named.get(p) or after.get(p, ()), bool(after_named.get(p)))
        if then.top != now.top:
            effect.changes.append(QueryChange(goldens[p], then, now, saved.record.record_id))
    effect.changes.sort(key=lambda change: VERDICT_ORDER[change.verdict])
    return effect


def _ranked_in_one_pass(
    conn: psycopg.Connection,
    queries: _Queries,
    model: EmbeddingModel,
    bound: float,
    before_positions: Sequence[int],
    after_positions: Sequence[int],
    edited_id: int,
    found: _Extra | None,
) -> tuple[dict[int, tuple[Ranked, ...]], dict[int, tuple[Ranked, ...]]]:
    """The semantic top three of the queries at before_positions now, and of those at
    after_positions after the save (the edited record's stored row left out, saved in: found,
    None when search will not find it), from one pass over every record's vector."""
    records = _Records(conn, model.dimensions)
    edited_row = records.row_of.get(edited_id)
    before_set, after_set = set(before_positions), set(after_positions)
    before_pairs, after_pairs, extra_positions = {}, {}, []
    for block in _position_blocks(sorted(before_set | after_set), len(records)):
        units = queries.units[block]
        similarities = records.similarities(units)
        for p, rows in zip(block, _candidate_rows(similarities, _floor(similarities, bound))):
            if p in before_set:
                before_pairs[p] = records.ids[rows]
        extra = units @ found.unit if found is not None else None
        floor = _floor(similarities, bound, edited_row, extra)
        extra_in = extra >= floor if extra is not None else np.zeros(len(block), bool)
        for p, rows, in_it in zip(block, _candidate_rows(similarities, floor, edited_row), extra_in):
            if p in after_set:
                after_pairs[p] = records.ids[rows]
                if in_it:
                    extra_positions.append(p)
    return _exact_top(conn, queries.raw, before_pairs), _exact_top(conn, queries.raw, after_pairs, found, extra_positions)


def _left_alone(sample: _Records | None, units: np.ndarray, old_unit: np.ndarray | None, new_unit: np.ndarray | None, bound: float) -> list[bool]:
    """For each query (units), whether the edited record is in its top three neither before nor
    after: three records of the sample (which leaves the edited one out) are each more than 2E
    nearer by d' than the record was (old_unit: its first-pass vector; None when search did not
    find it) and would be (new_unit; None when search will not). Their exact distances are then
    below the edited record's, so the top three is the other records' both times. None without a
    sample (no model): none is."""
    if sample is None or len(sample) < TOP:
        return [False] * len(units)
    # Strictly below the floor: more than 2E from the 3rd nearest of the sample.
    floor = _floor(sample.similarities(units), bound)
    alone = np.ones(len(units), bool)
    for unit in (old_unit, new_unit):
        if unit is not None:
            alone &= units @ unit < floor
    return alone.tolist()
