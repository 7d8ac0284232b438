"""Every golden query's top three at once, exactly as search ranks them: now (the Quality page, a
record's golden queries) and as an edit leaves them, measured around its save (measured_edit).

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

An edit changes one record: its vector, its names, whether it is enabled. measured_edit saves it
for real in a transaction (measured.save_measured) and measures around the save (EditEffect): the
answers before it, then the record as stored and the answers after it, before the transaction
commits (a save that changes no top three, when asked) or rolls back (a preview). It ranks only
the golden queries whose top three can change: a query on the semantic path before and after
keeps its top three when three other records are nearer than the record was and would be. Three
records of a sample of the registry (SAMPLE_ROWS) prove that for most queries at a fraction of
the matrix product's cost; the rest are ranked in full, before and after.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import psycopg

from ..embedders import Embedder, EmbeddingUnavailable
from ..postgres.connection import naming_pgvector, one_row, one_value
from ..registry import golden
from ..registry.changes import Change, Conflict, Embedding, Outcome, Refused, Saved
from ..registry.embedding_model import EmbeddingModel, registry_model
from ..registry.golden import GoldenQuery
from ..registry.measured import save_measured
from ..registry.search import SearchUnavailable
from .golden_answers import VERDICT_ORDER, Effect, QueryChange, Ranked, Ranking

# Records read from the database per statement: each chunk is one bytea value of about 3 kB a record
# at 1,536 dimensions, well under PostgreSQL's 1 GB for a value.
READ_CHUNK = 20_000
# Records converted to float32 at a time for the matrix product: 24 MB at 1,536 dimensions.
ROW_BLOCK = 4_096
# At most this many similarities (records x queries) in memory at once: 64 MB of float32.
MAX_DISTANCES = 16_000_000
# Records whose distances decide which golden queries an edit leaves alone (EditEffect).
SAMPLE_ROWS = 1_024
TOP = 3


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
class _State:
    """The edited record as stored: its names, whether search finds it, its exact vector."""

    record: Ranked
    enabled: bool
    vector: np.ndarray | None

    @property
    def found(self) -> _Extra | None:
        """The record as search finds it (enabled, with a vector); None when it does not."""
        return _Extra(self.record, self.vector) if self.enabled and self.vector is not None else None


def _state(conn: psycopg.Connection, record_id: int) -> _State | None:
    row = conn.execute("select id, provider, method, enabled, embedding from payrail.provider_methods where id = %s", (record_id,), binary=True).fetchone()
    if row is None:
        return None
    record_id, provider, method, enabled, embedding = row
    return _State(Ranked(record_id, provider, method), enabled, embedding.to_numpy() if embedding is not None else None)


class EditEffect:
    """What one edit changes in the golden queries' top threes, measured around its save in the
    save's transaction (measured.save_measured): the record and the golden queries' answers before
    it, the same after it. after() gives the Effect.

    A golden query keeps its top three when it is named like the record neither before nor after
    (the name path answers it the same) and three records of a sample are each more than 2E nearer
    to it by d' than the record was and would be (its semantic top three is that of the other
    records both times: _left_alone; what the record would be is the vector the save brings, or
    the one it keeps). The others are ranked before and after: by search itself when at most
    search_at_most need it, else by one pass over every record's vector after the save, the
    record as it was ranked in its stead for before (_ranked_in_one_pass)."""

    def __init__(self, conn: psycopg.Connection, embedder_factory: Callable[[], Embedder], change: Change, *, search_at_most: int = SEARCH_AT_MOST) -> None:
        self.embedder_factory, self.change, self.search_at_most = embedder_factory, change, search_at_most
        self.goldens = golden.golden_queries(conn) if golden.any_golden_queries(conn) else []
        self.registry_model = registry_model(conn)
        self.model: EmbeddingModel | None = None
        self.queries: _Queries | None = None
        self.new_vector: np.ndarray | None = None

    def prepare(self, conn: psycopg.Connection, embedding: Embedding | None) -> None:
        """The golden queries' vectors (those without one kept embedded now) and a sample of the
        records, read before the transaction; with the vector the save brings, if any."""
        self.new_vector = embedding.vector if embedding is not None else None
        model = self.registry_model
        if model is None and embedding is not None:  # its first vector makes the registry's model
            model = EmbeddingModel(embedding.model, embedding.vector.size)
        if self.queries is not None and model == self.model:
            return
        self.model, self.sample, self.bound = model, None, 0.0
        self.queries = _Queries(conn, self.embedder_factory, self.goldens, model if self.goldens else None)
        if model is not None and self.goldens:
            self.sample = _Records(conn, model.dimensions, sample=SAMPLE_ROWS, excluded=self.change.record_id)
            self.bound = _error_bound(conn, model.dimensions)

    def before(self, conn: psycopg.Connection) -> None:
        """The record as stored, and the answers now of every golden query the edit can change."""
        record_id = self.change.record_id
        self.old = _state(conn, record_id) if record_id is not None else None
        self.named, self.semantic, self.now_named, self.before_semantic, self.before_tops = [], [], {}, [], {}
        if self.model is None or self.queries is None or not self.goldens:
            return  # no golden query, or no record has a vector nor will this one: nothing to compare
        old_rows = _Records(conn, self.model.dimensions, only=record_id) if record_id is not None else None
        old_unit = old_rows.vectors[0].astype(np.float32) if old_rows is not None and len(old_rows) else None
        vector = self.new_vector if self.new_vector is not None else (self.old.vector if self.old is not None else None)
        enabled = self.change.record.enabled if self.change.record.enabled is not None else bool(self.old and self.old.enabled)
        new_unit = _unit(vector[None, :])[0] if enabled and vector is not None else None
        record = self.change.record
        names = ([(self.old.record.provider, self.old.record.method)] if self.old is not None else []) + [(record.provider, record.method)]
        self.named = _named_like(conn, self.goldens, names)
        self.now_named = dict(zip(self.named, _name_answers(conn, [self.goldens[p] for p in self.named])))
        others = [p for p in range(len(self.goldens)) if p not in self.now_named]
        flagged = [p for p, alone in zip(others, _left_alone(self.sample, self.queries.units[others], old_unit, new_unit, self.bound)) if not alone]
        # Named like the record neither before nor after: the name path answers them the same both times.
        flagged_names = dict(zip(flagged, _name_answers(conn, [self.goldens[p] for p in flagged])))
        self.semantic = [p for p in flagged if not flagged_names[p]]
        self.before_semantic = self.semantic + [p for p in self.named if not self.now_named[p]]
        self.by_search = len(self.semantic) + len(self.named) <= self.search_at_most
        if self.by_search:
            self.before_tops = _searched(conn, self.queries, self.before_semantic, self.model)

    def after(self, conn: psycopg.Connection, saved: Saved) -> Effect:
        """The answers after the save of the same golden queries, and those that changed."""
        state = _state(conn, saved.record_id)
        if state is None:
            raise AssertionError(f"record {saved.record_id} was saved, and is not there in the same transaction")
        queries = self.queries or _Queries(conn, self.embedder_factory, [], None)
        effect = Effect(state.record, state.enabled, len(self.goldens), embedded_now=queries.embedded_now)
        if self.model is None or not self.goldens:
            return effect
        after_named = dict(zip(self.named, _name_answers(conn, [self.goldens[p] for p in self.named])))
        after_semantic = self.semantic + [p for p in self.named if not after_named[p]]
        before = self.before_tops
        if self.by_search:
            after = _searched(conn, queries, after_semantic, self.model)
        else:
            old_found = self.old.found if self.old is not None else None
            after, before = _ranked_in_one_pass(conn, queries, self.model, self.bound, after_semantic, self.before_semantic, state.record.record_id, old_found)
        for p in sorted({*self.named, *self.semantic}):
            then = Ranking(self.goldens[p], self.now_named.get(p) or before.get(p, ()), bool(self.now_named.get(p)))
            now = Ranking(self.goldens[p], after_named.get(p) or after.get(p, ()), bool(after_named.get(p)))
            if then.top != now.top:
                effect.changes.append(QueryChange(self.goldens[p], then, now, state.record.record_id))
        effect.changes.sort(key=lambda change: VERDICT_ORDER[change.verdict])
        return effect


@dataclass(frozen=True)
class EditPreview:
    """An edit saved in a transaction with its effect measured: the effect (or why it cannot be
    saved, its outcome), the save's outcome, whether it was kept (committed), and the vector made
    for it, which saves it again without another embedding request."""

    effect: Effect
    outcome: Outcome
    kept: bool
    embedding: Embedding | None


def measured_edit(
    conn: psycopg.Connection,
    embedder_factory: Callable[[], Embedder],
    change: Change,
    *,
    keep: Callable[[Effect], bool] = lambda effect: False,
    embedding: Embedding | None = None,
    search_at_most: int = SEARCH_AT_MOST,
) -> EditPreview:
    """Saves change in a transaction, measures what it changes in the golden queries' top threes
    (EditEffect), then keeps it when keep(effect), else rolls it back (measured.save_measured): the
    preview of an edit by default, or the save of an edit that changes no top three with
    keep=lambda effect: not effect.changes. embedding: the vector a preview made for it."""
    measure = EditEffect(conn, embedder_factory, change, search_at_most=search_at_most)
    measured = save_measured(conn, embedder_factory, change, measure, keep, embedding)
    unsaved = measured.outcome if isinstance(measured.outcome, (Refused, Conflict)) else None
    effect = measured.measured if measured.measured is not None else Effect(None, False, outcome=unsaved)
    return EditPreview(effect, measured.outcome, measured.committed, measured.embedding)


def _ranked_in_one_pass(
    conn: psycopg.Connection,
    queries: _Queries,
    model: EmbeddingModel,
    bound: float,
    as_read: Sequence[int],
    instead: Sequence[int],
    edited_id: int,
    extra: _Extra | None,
) -> tuple[dict[int, tuple[Ranked, ...]], dict[int, tuple[Ranked, ...]]]:
    """The semantic top three of the queries at positions as_read among the records as they are
    read, and of those at positions instead with the edited record's row left out and extra ranked
    in its stead (None: search does not find it), from one pass over every record's vector. After
    a save, in its transaction: the top threes after it, and before it (extra: the record as it was)."""
    records = _Records(conn, model.dimensions)
    edited_row = records.row_of.get(edited_id)
    read_set, instead_set = set(as_read), set(instead)
    read_pairs, instead_pairs, extra_positions = {}, {}, []
    for block in _position_blocks(sorted(read_set | instead_set), len(records)):
        units = queries.units[block]
        similarities = records.similarities(units)
        for p, rows in zip(block, _candidate_rows(similarities, _floor(similarities, bound))):
            if p in read_set:
                read_pairs[p] = records.ids[rows]
        extra_similarities = units @ extra.unit if extra is not None else None
        floor = _floor(similarities, bound, edited_row, extra_similarities)
        extra_in = extra_similarities >= floor if extra_similarities is not None else np.zeros(len(block), bool)
        for p, rows, in_it in zip(block, _candidate_rows(similarities, floor, edited_row), extra_in):
            if p in instead_set:
                instead_pairs[p] = records.ids[rows]
                if in_it:
                    extra_positions.append(p)
    return _exact_top(conn, queries.raw, read_pairs), _exact_top(conn, queries.raw, instead_pairs, extra, extra_positions)


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
