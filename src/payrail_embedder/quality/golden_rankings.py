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
the golden queries whose top three can change (and, with wanted_ranks, the exact rank of each
record they should find, before and after, where it moves): a query on the semantic path before and after
keeps its top three when three other records are nearer than the record was and would be. Three
records of a sample of the registry (SAMPLE_ROWS) prove that for most queries at a fraction of
the matrix product's cost; the rest are ranked in full, before and after.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import psycopg

from ..embedders import Embedder, EmbeddingUnavailable
from ..postgres.connection import naming_pgvector
from ..registry import golden
from ..registry.changes import Change, Conflict, Embedding, Outcome, Refused, Saved
from ..registry.embedding_model import EmbeddingModel, registry_model
from ..registry.golden import GoldenQuery
from ..registry.measured import save_measured
from ..registry.search import SearchUnavailable
from . import first_pass, wanted_ranks
from .golden_answers import VERDICT_ORDER, Effect, QueryChange, Ranked, Ranking

SAMPLE_ROWS = 1_024


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
        for position, golden_id in zip(positions, ids, strict=True):
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
            for position, vector in zip(missing, made, strict=True):
                self.raw[position] = vector
            self.embedded_now = len(missing)
        self.units = np.zeros((len(self.goldens), model.dimensions), np.float32)
        self.units[list(positions)] = first_pass.unit_vectors(np.array([self.raw[p] for p in positions]))


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


def _semantic_tops(
    conn: psycopg.Connection, queries: _Queries, records: first_pass.Records, positions: Sequence[int], bound: float
) -> dict[int, tuple[Ranked, ...]]:
    """The semantic path's top three of the queries at positions, over the enabled records (one pass)."""
    pairs = {}
    for block in first_pass.position_blocks(positions, len(records)):
        similarities = records.similarities(queries.units[block])
        for p, rows in zip(block, first_pass.candidate_rows(similarities, first_pass.candidate_floor(similarities, bound)), strict=True):
            pairs[p] = records.ids[rows]
    return first_pass.exact_top(conn, queries.raw, pairs)


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
    names = wanted_ranks.name_path_matches(conn, [g.query for g in goldens])
    semantic = [p for p, answer in enumerate(names) if not answer]
    queries = _Queries(conn, embedder_factory, goldens, model, only=semantic)
    tops: dict[int, tuple[Ranked, ...]] = {}
    records = _RecordsOnce(conn, model)
    if semantic and model is not None:
        if len(semantic) <= search_at_most:
            tops = _searched(conn, queries, semantic, model)
        else:
            tops = _semantic_tops(conn, queries, records.read(), semantic, records.bound)
    ranks = _ranks(conn, queries, records, names, tops, range(len(goldens)))
    rankings = [Ranking(g, names[p][: first_pass.TOP] or tops.get(p, ()), bool(names[p]), ranks[p]) for p, g in enumerate(goldens)]
    return rankings, queries.embedded_now


class _RecordsOnce:
    """Every enabled record's first-pass vector (first_pass.Records), read when first needed and
    then kept, with the error bound; none without a model."""

    def __init__(self, conn: psycopg.Connection, model: EmbeddingModel | None, bound: float | None = None) -> None:
        self.conn, self.model = conn, model
        self.records: first_pass.Records | None = None
        self.bound = bound if bound is not None else first_pass.error_bound(conn, model.dimensions) if model is not None else 0.0

    def read(self) -> first_pass.Records:
        if self.records is None:
            if self.model is None:
                raise AssertionError("no model, so no record has a vector to read")
            self.records = first_pass.Records(self.conn, self.model.dimensions)
        return self.records


def _ranks(
    conn: psycopg.Connection,
    queries: _Queries,
    records: _RecordsOnce,
    names: Mapping[int, tuple[Ranked, ...]] | Sequence[tuple[Ranked, ...]],
    tops: Mapping[int, tuple[Ranked, ...]],
    positions: Sequence[int],
    *,
    excluded: int | None = None,
    extra: first_pass.Extra | None = None,
    enabled_only: bool = True,
) -> dict[int, dict[int, int | None]]:
    """Position -> each record the golden query there should find -> its exact rank: its place
    among the name path's matches (names[p]), or in its top three (tops[p]), or else from one pass
    over every enabled record (wanted_ranks.semantic_ranks, with excluded and extra). enabled_only:
    the golden queries' records are as read, so those not enabled then have no rank."""
    found: dict[int, dict[int, int | None]] = {}
    unfound: dict[int, list[int]] = {}
    for p in positions:
        relevant = queries.goldens[p].relevant
        wanted = [r.record_id for r in relevant]
        if names[p]:
            found[p] = wanted_ranks.name_ranks(names[p], wanted)
            continue
        found[p] = wanted_ranks.name_ranks(tops.get(p, ()), wanted)
        unfound[p] = [r.record_id for r in relevant if found[p][r.record_id] is None and (r.enabled or not enabled_only)]
    if records.model is not None and any(unfound.values()):
        ranked = wanted_ranks.semantic_ranks(conn, records.read(), records.bound, queries.units, queries.raw, unfound, excluded=excluded, extra=extra)
        for (p, record_id), rank in ranked.items():
            found[p][record_id] = rank
    return found


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
    def found(self) -> first_pass.Extra | None:
        """The record as search finds it (enabled, with a vector); None when it does not."""
        return first_pass.Extra(self.record, self.vector) if self.enabled and self.vector is not None else None


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
            self.sample = first_pass.Records(conn, model.dimensions, sample=SAMPLE_ROWS, excluded=self.change.record_id)
            self.bound = first_pass.error_bound(conn, model.dimensions)

    def before(self, conn: psycopg.Connection) -> None:
        """The record as stored, and the answers now of every golden query the edit can change."""
        record_id = self.change.record_id
        self.old = _state(conn, record_id) if record_id is not None else None
        self.named, self.semantic, self.now_named, self.before_semantic, self.before_tops = [], [], {}, [], {}
        self.names: list[tuple[Ranked, ...]] = []
        self.old_unit = self.new_unit = None
        if self.model is None or self.queries is None or not self.goldens:
            return  # no golden query, or no record has a vector nor will this one: nothing to compare
        old_rows = first_pass.Records(conn, self.model.dimensions, only=[record_id]) if record_id is not None else None
        self.old_unit = old_rows.vectors[0].astype(np.float32) if old_rows is not None and len(old_rows) else None
        vector = self.new_vector if self.new_vector is not None else (self.old.vector if self.old is not None else None)
        enabled = self.change.record.enabled if self.change.record.enabled is not None else bool(self.old and self.old.enabled)
        self.new_unit = first_pass.unit_vectors(vector[None, :])[0] if enabled and vector is not None else None
        record = self.change.record
        names = ([(self.old.record.provider, self.old.record.method)] if self.old is not None else []) + [(record.provider, record.method)]
        # Every golden query's name-path matches now; those of the queries not named like the
        # record are the same after the save.
        self.names = wanted_ranks.name_path_matches(conn, [g.query for g in self.goldens])
        self.named = _named_like(conn, self.goldens, names)
        self.now_named = {p: self.names[p] for p in self.named}
        others = [p for p in range(len(self.goldens)) if p not in self.now_named]
        alone = _left_alone(self.sample, self.queries.units[others], self.old_unit, self.new_unit, self.bound)
        self.semantic = [p for p, left_alone in zip(others, alone, strict=True) if not left_alone and not self.names[p]]
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
        after_named = dict(zip(self.named, wanted_ranks.name_path_matches(conn, [self.goldens[p].query for p in self.named]), strict=True))
        after_semantic = self.semantic + [p for p in self.named if not after_named[p]]
        before = self.before_tops
        records = _RecordsOnce(conn, self.model, self.bound)
        old_found = self.old.found if self.old is not None else None
        if self.by_search:
            after = _searched(conn, queries, after_semantic, self.model)
        else:
            after, before = _ranked_in_one_pass(
                conn, queries, records.read(), self.bound, after_semantic, self.before_semantic, state.record.record_id, old_found
            )
        names_before = {p: self.now_named.get(p, self.names[p]) for p in range(len(self.goldens))}
        names_after = {p: after_named.get(p, self.names[p]) for p in range(len(self.goldens))}
        tops_before = {p: names_before[p][: first_pass.TOP] or before.get(p, ()) for p in {*self.named, *self.semantic}}
        tops_after = {p: names_after[p][: first_pass.TOP] or after.get(p, ()) for p in {*self.named, *self.semantic}}
        topped = [p for p in sorted(tops_before) if tops_before[p] != tops_after[p]]
        # The golden queries whose wanted records' ranks can change: those whose top three does,
        # those named like the record, those that want it, and those where it passes a wanted record.
        moved = self._passed(conn, state, old_found)
        ranked = sorted(
            {*topped, *self.named, *moved, *(p for p, g in enumerate(self.goldens) if any(r.record_id == state.record.record_id for r in g.relevant))}
        )
        ranks_before = _ranks(conn, queries, records, names_before, tops_before, ranked, excluded=state.record.record_id, extra=old_found, enabled_only=False)
        ranks_after = _ranks(conn, queries, records, names_after, tops_after, ranked, enabled_only=False)
        for p in ranked:
            then = Ranking(self.goldens[p], tops_before.get(p, ()), bool(names_before[p]), ranks_before[p])
            now = Ranking(self.goldens[p], tops_after.get(p, ()), bool(names_after[p]), ranks_after[p])
            change = QueryChange(self.goldens[p], then, now, state.record.record_id)
            if p in topped:
                effect.changes.append(change)
            elif change.rank_changes:
                effect.moves.append(change)
        effect.changes.sort(key=lambda change: VERDICT_ORDER[change.verdict])
        effect.moves.sort(key=lambda move: (-move.largest_move, move.golden.golden_query_id))
        return effect

    def _passed(self, conn: psycopg.Connection, state: _State, old_found: first_pass.Extra | None) -> set[int]:
        """Positions of the golden queries on the semantic path where the record, as it was and as
        it is saved, stands on different sides of a record they should find (other than itself):
        the wanted record's rank moves by one (wanted_ranks.passed)."""
        new_found = state.found
        if self.queries is None or self.model is None or (old_found is None and new_found is None):
            return set()
        if old_found is not None and new_found is not None and old_found.record == new_found.record and np.array_equal(old_found.vector, new_found.vector):
            return set()  # the same vector and names: it passes no one
        pairs = [
            (p, r.record_id)
            for p, g in enumerate(self.goldens)
            if not self.names[p] and p not in self.now_named
            for r in g.relevant
            if r.record_id != state.record.record_id
        ]
        return wanted_ranks.passed(
            conn, self.model.dimensions, self.bound, self.queries.units, self.queries.raw, pairs, old_found, self.old_unit, new_found, self.new_unit
        )


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
    records: first_pass.Records,
    bound: float,
    as_read: Sequence[int],
    instead: Sequence[int],
    edited_id: int,
    extra: first_pass.Extra | None,
) -> tuple[dict[int, tuple[Ranked, ...]], dict[int, tuple[Ranked, ...]]]:
    """The semantic top three of the queries at positions as_read among the records as they are
    read, and of those at positions instead with the edited record's row left out and extra ranked
    in its stead (None: search does not find it), from one pass over every record's vector. After
    a save, in its transaction: the top threes after it, and before it (extra: the record as it was)."""
    edited_row = records.row_of.get(edited_id)
    read_set, instead_set = set(as_read), set(instead)
    read_pairs, instead_pairs, extra_positions = {}, {}, []
    for block in first_pass.position_blocks(sorted(read_set | instead_set), len(records)):
        units = queries.units[block]
        similarities = records.similarities(units)
        for p, rows in zip(block, first_pass.candidate_rows(similarities, first_pass.candidate_floor(similarities, bound)), strict=True):
            if p in read_set:
                read_pairs[p] = records.ids[rows]
        extra_similarities = units @ extra.unit if extra is not None else None
        floor = first_pass.candidate_floor(similarities, bound, edited_row, extra_similarities)
        extra_in = extra_similarities >= floor if extra_similarities is not None else np.zeros(len(block), bool)
        for p, rows, in_it in zip(block, first_pass.candidate_rows(similarities, floor, edited_row), extra_in, strict=True):
            if p in instead_set:
                instead_pairs[p] = records.ids[rows]
                if in_it:
                    extra_positions.append(p)
    return first_pass.exact_top(conn, queries.raw, read_pairs), first_pass.exact_top(conn, queries.raw, instead_pairs, extra, extra_positions)


def _left_alone(sample: first_pass.Records | None, units: np.ndarray, old_unit: np.ndarray | None, new_unit: np.ndarray | None, bound: float) -> list[bool]:
    """For each query (units), whether the edited record is in its top three neither before nor
    after: three records of the sample (which leaves the edited one out) are each more than 2E
    nearer by d' than the record was (old_unit: its first-pass vector; None when search did not
    find it) and would be (new_unit; None when search will not). Their exact distances are then
    below the edited record's, so the top three is the other records' both times. None without a
    sample (no model): none is."""
    if sample is None or len(sample) < first_pass.TOP:
        return [False] * len(units)
    # Strictly below the floor: more than 2E from the 3rd nearest of the sample.
    floor = first_pass.candidate_floor(sample.similarities(units), bound)
    alone = np.ones(len(units), bool)
    for unit in (old_unit, new_unit):
        if unit is not None:
            alone &= units @ unit < floor
    return alone.tolist()
