"""Golden queries: the registry's own labelled queries (payrail.golden_queries; DESIGN.md, "Retrieval quality").

A golden query is a question an agent might ask and the records it should find, kept by operators
beside the records: evaluation and training data for `eval` and `model tune`, never ranking input
(search reads none, agents cannot). Its records are kept by id, so renames keep them; the
database holds every rule (db/functions/160-golden_queries.sql) and says what it refuses in words.

The file format is eval's (labelled_queries.parse_labelled_lines reads it): one JSON object a line,
{"query": "...", "relevant": [[provider, method], ...], "language": "de"}, the language optional
and other fields ignored. `golden export` writes each golden query in the order they were added,
its keys in that order (language only where it has one), its records in the order they were given,
each by the names it has now, as safe_text.json_text writes JSON (non-ASCII characters as they are,
U+0085, U+2028 and U+2029 escaped), each line ended by "\\n". So an export imported into a
registry holding the same records exports the same bytes again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np
import psycopg

from ..base.errors import CodedError, database_reason
from ..base.reports import Report
from ..base.safe_text import json_text
from ..embedders import Embedder, batched, checked_vectors
from ..postgres.connection import SelfPinned, naming_pgvector, one_row, one_value
from . import stored
from .embedding_model import EmbeddingModel, embedder_for, refuse_another_model, refuse_other_dimensions, registry_model, require_embedder_model
from .labelled_queries import LabelledQuery, NormalizedNames, language_tag
from .records import Refusal
from .search import Query, check_query, embed_queries

# When two queries are the same (golden_queries_query_key), in the database's words.
SAME_QUERY = "queries compare ignoring case, compatibility forms, invisible characters and runs of white space"

# Every golden query with its records in their order, each record as it is named now. A golden
# query always has one record or more (golden_queries_relevant_check). Its records and theirs are
# lookups by key ("offset 0"), whatever the statistics say (docs/operations.md, "Plans that do not
# depend on statistics").
GOLDEN_QUERIES = """
select g.id, g.query, g.language, g.added_by, g.added_at,
       pg_catalog.array_agg(r.record_id order by r.ordinal),
       pg_catalog.array_agg(r.provider order by r.ordinal),
       pg_catalog.array_agg(r.method order by r.ordinal),
       pg_catalog.array_agg(r.enabled order by r.ordinal)
from payrail.golden_queries as g
cross join lateral (
  select n.record_id, n.ordinal, pm.provider, pm.method, pm.enabled
  from payrail.golden_query_records as n
  cross join lateral (select p.provider, p.method, p.enabled from payrail.provider_methods as p where p.id = n.record_id offset 0) as pm
  where n.golden_query_id = g.id
  offset 0
) as r
{where}
group by g.id
order by g.id
"""


class GoldenRefused(CodedError):
    """The registry refused a change of its golden queries; nothing was changed."""

    code = "invalid_input"


@dataclass(frozen=True)
class RelevantRecord:
    record_id: int
    provider: str
    method: str
    enabled: bool

    def to_json(self) -> dict:
        return {"recordId": self.record_id, "provider": self.provider, "method": self.method, "enabled": self.enabled}


@dataclass(frozen=True)
class GoldenQuery:
    golden_query_id: int
    # The table's golden_queries_query_check is the search query's rule: what it holds, search takes.
    query: Query
    # The records it should find, in the order they were given, as they are named now.
    relevant: tuple[RelevantRecord, ...]
    # The language it is in (a tag, lower-cased as eval compares them), or None.
    language: str | None
    added_by: str
    added_at: datetime

    def labelled(self) -> LabelledQuery:
        """The query as eval runs it."""
        return LabelledQuery(None, self.query, tuple((r.provider, r.method) for r in self.relevant), self.golden_query_id, self.language)

    def line(self) -> str:
        """The query as a line of the file format, without its newline (the module's doc)."""
        return self.labelled().file_line()

    def to_json(self) -> dict:
        return {
            "goldenQueryId": self.golden_query_id,
            "query": self.query,
            "relevant": [record.to_json() for record in self.relevant],
            "language": self.language,
            "addedBy": self.added_by,
            "addedAt": self.added_at.isoformat(),
        }

    def describe(self, verb: str = "golden query") -> list[str]:
        return [
            f"{verb} {self.golden_query_id}: {self.query}",
            "   relevant: " + "; ".join(f"{r.provider} / {r.method}" + ("" if r.enabled else " (draft)") for r in self.relevant),
            *([f"   language: {self.language}"] if self.language else []),
            f"   added {self.added_at.isoformat()} by {self.added_by}",
        ]


@dataclass(frozen=True)
class GoldenQueries(Report):
    """Golden queries as a command answers with them: `golden list` (listed, counted), `golden
    add` (one added) or `golden remove` (those removed)."""

    queries: list[GoldenQuery]
    # What the command did to them: None (listed), "added" or "removed".
    done: str | None = None

    def to_json(self) -> dict:
        if self.done == "added":  # `golden add` answers with the one query it added
            return self.queries[0].to_json()
        return {"removed" if self.done else "goldenQueries": [query.to_json() for query in self.queries]}

    def describe(self) -> list[str]:
        verb = f"{self.done} golden query" if self.done else "golden query"
        lines = [line for query in self.queries for line in query.describe(verb)]
        if self.done is None:
            lines.append(f"{len(self.queries)} golden quer{'y' if len(self.queries) == 1 else 'ies'}")
        return lines


# Whether the registry holds any golden query: one statement on its own (no search path to pin).
ANY_GOLDEN_QUERY = SelfPinned("select exists (select from payrail.golden_queries)")


def any_golden_queries(conn: psycopg.Connection) -> bool:
    """Whether the registry holds a golden query (an edit's effect has none to measure when not)."""
    return bool(one_value(conn.execute(ANY_GOLDEN_QUERY)))


def golden_queries(conn: psycopg.Connection, *, record_id: int | None = None) -> list[GoldenQuery]:
    """Every golden query in the order they were added, or those naming the record record_id."""
    if record_id is None:
        return _golden_queries(conn, "", ())
    return _golden_queries(conn, "where g.id in (select n.golden_query_id from payrail.golden_query_records as n where n.record_id = %s)", (record_id,))


def _golden_queries(conn: psycopg.Connection, where: str, params: tuple) -> list[GoldenQuery]:
    return [
        GoldenQuery(golden_id, Query(query), tuple(map(RelevantRecord, *records)), language and language.lower(), added_by, added_at)
        for golden_id, query, language, added_by, added_at, *records in conn.execute(GOLDEN_QUERIES.format(where=where), params)
    ]


def labelled_queries(conn: psycopg.Connection) -> list[LabelledQuery]:
    """The registry's golden queries as eval runs them."""
    return [golden.labelled() for golden in golden_queries(conn)]


def export_lines(conn: psycopg.Connection) -> list[str]:
    """Every golden query as a line of the file format (without its newline), in the order they were added."""
    return [golden.line() for golden in golden_queries(conn)]


def add_golden_query(
    conn: psycopg.Connection,
    embedder_factory: Callable[[], Embedder],
    query: str,
    names: Sequence[str],
    record_ids: Sequence[int] = (),
    language: str | None = None,
) -> GoldenQuery:
    """Adds a golden query: query, and the records it should find: those of record_ids, then each
    of names as a user names a record ("Provider / Method", or "Provider Method":
    stored.find_by_name); language: the tag of the language it is in (labelled_queries.language_tag
    checks it), or None. The query is embedded with the registry's model first and its vector
    kept with it (embedded_now). InvalidQuery for a query search would refuse, UnknownRecord for a
    name no record (or several) goes by, GoldenRefused for what the registry refuses (the same
    query, a record twice, ...), EmbeddingUnavailable when the query cannot be embedded: nothing
    is added then."""
    check_query(query)
    if language is not None:
        try:
            language = language_tag(language)
        except ValueError as error:
            raise GoldenRefused(str(error)) from None
    record_ids = [*record_ids, *(stored.find_by_name(conn, [name])["id"] for name in names)]
    vectors = QueryVectors.made(conn, embedder_factory, [query])
    with conn.transaction():
        try:
            (golden_id,) = one_row(conn.execute("select payrail.add_golden_query(%s, %s, %s)", (query, record_ids, language)))
        except (psycopg.errors.IntegrityError, psycopg.errors.DataError) as error:
            if error.diag.constraint_name == "golden_queries_query_key":
                # The database's hint names its SQL function, for psql; these are the faces' ways.
                raise GoldenRefused(
                    f"{error.diag.message_primary} ({SAME_QUERY}). To label it anew, remove it first "
                    f"(`payrail-embedder golden remove {json_text(query)}`, or the Remove button beside it on its record's page in the backoffice), "
                    "then add it again"
                ) from None
            raise GoldenRefused(database_reason(error)) from None
        vectors.store(conn, [(golden_id, query)])
        (added,) = _golden_queries(conn, "where g.id = %s", (golden_id,))
    return added


def remove_golden_queries(conn: psycopg.Connection, queries: Sequence[str]) -> list[GoldenQuery]:
    """Removes the golden queries that are the same as queries (compared as the registry compares
    them), all or none: GoldenRefused naming those the registry does not have. Returns them as they were."""
    with conn.transaction():
        found = conn.execute(
            """select u.i, g.id from unnest(%s::text[]) with ordinality as u(query, i)
               left join lateral payrail._golden_query_named(u.query) as g on true order by u.i""",
            (list(queries),),
        ).fetchall()
        unknown = [query for query, (_, golden_id) in zip(queries, found) if golden_id is None]
        if unknown:
            raise GoldenRefused(
                "nothing removed: there is no golden query "
                + ", ".join(json_text(q) for q in unknown)
                + f" ({SAME_QUERY}; `payrail-embedder golden list` lists them)"
            )
        removed = _golden_queries(conn, "where g.id = any(%s)", ([golden_id for _, golden_id in found],))
        conn.execute("delete from payrail.golden_queries where id = any(%s)", ([g.golden_query_id for g in removed],))
    return removed


@dataclass
class ImportReport(Report):
    added: int = 0
    # Lines whose query the registry holds already, with the same records.
    unchanged: int = 0
    refused: list[Refusal] = field(default_factory=list)
    # Whether the file's queries were saved: all of them, or none (a refusal).
    saved: bool = False
    # The fields of the file's lines that a golden query does not keep (the benchmark's
    # "source"), each with how many lines carry it: ignored, and named once.
    ignored: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict:
        return {
            "added": self.added,
            "unchanged": self.unchanged,
            "refused": [{"line": r.line, "reason": r.reason} for r in self.refused],
            "saved": self.saved,
            "ignoredFields": [{"field": name, "lines": count} for name, count in self.ignored.items()],
        }

    def summary(self) -> str:
        if not self.saved:
            return f"nothing imported: {len(self.refused)} line{'' if len(self.refused) == 1 else 's'} refused"
        return f"{self.added} golden quer{'y' if self.added == 1 else 'ies'} added, {self.unchanged} unchanged"

    def ignored_in_words(self) -> str | None:
        """ "ignored fields: source (in 296 lines)", or None when the lines carry no other field."""
        if not self.ignored:
            return None
        return "ignored fields: " + ", ".join(f"{name} (in {count:,} line{'' if count == 1 else 's'})" for name, count in self.ignored.items())

    def describe(self) -> list[str]:
        return [self.summary(), *filter(None, [self.ignored_in_words()])]

    def warnings(self) -> list[str]:
        return [f"refused {refusal}" for refusal in self.refused]


def ignored_fields(queries: Sequence[LabelledQuery]) -> dict[str, int]:
    """The fields the queries' lines carry beside those of a labelled query, each with how many lines carry it, in the order first met."""
    counted: dict[str, int] = {}
    for labelled in queries:
        for name in labelled.ignored:
            counted[name] = counted.get(name, 0) + 1
    return counted


def import_golden_queries(conn: psycopg.Connection, embedder_factory: Callable[[], Embedder], queries: Sequence[LabelledQuery], source: str) -> ImportReport:
    """Adds the labelled queries of a file (labelled_queries.read_labelled_queries) as golden queries, all or none.

    Every line is checked first and every problem reported, naming its line: a record no record
    goes by, one named twice, a query the file has on an earlier line, or one the registry holds
    with other records or in another language (the reader refused more than
    labelled_queries.MAX_RELEVANT already). A query the registry holds with the same records (in
    any order) and language is left as it is, so importing a file again changes nothing. Fields a
    golden query does not keep are ignored and counted (ImportReport.ignored). The rest are added
    in one transaction, with their vectors by the registry's model (embedded first, in batches: a
    failing embedding service adds none); a refusal of the database (another session added the
    same query meanwhile) saves none of them either.
    """
    names = NormalizedNames(conn, [pair for q in queries for pair in q.relevant])
    existing = _existing(conn, queries)
    refused: list[Refusal] = []
    to_add: list[tuple[LabelledQuery, list[int]]] = []
    unchanged = 0
    first_line: dict[str, int] = {}
    for labelled, (key, golden_id, stored_query, stored_ids, stored_language) in zip(queries, existing, strict=True):
        line = _file_line(labelled)
        problems = []
        unknown = [pair for pair in labelled.relevant if names.record(*pair) is None]
        problems += [f'no provider method is named "{provider} / {method}"' for provider, method in unknown]
        known = [(record[0], pair) for pair in labelled.relevant if (record := names.record(*pair)) is not None]
        named = {record_id: pair for record_id, pair in reversed(known)}  # the first spelling
        ids = [record_id for record_id, _ in known]
        problems += [f'names "{" / ".join(named[i])}" more than once' for i in dict.fromkeys(ids) if ids.count(i) > 1]
        if key in first_line:
            problems.append(f"the same query as line {first_line[key]} ({SAME_QUERY})")
        first_line.setdefault(key, line)
        if golden_id is not None and not problems and sorted(stored_ids) != sorted(ids):
            problems.append(
                f"the registry holds the golden query {json_text(stored_query)} with other relevant records; "
                "remove it first (`payrail-embedder golden remove`) to label it anew"
            )
        elif golden_id is not None and not problems and stored_language != labelled.language:
            problems.append(
                f"the registry holds the golden query {json_text(stored_query)} "
                + (f'in language "{stored_language}"' if stored_language else "without a language")
                + (f', this line says "{labelled.language}"' if labelled.language else ", this line has none")
                + "; remove it first (`payrail-embedder golden remove`) to label it anew"
            )
        if problems:
            refused.append(Refusal(source, line, "; ".join(problems)))
        elif golden_id is not None:
            unchanged += 1
        else:
            to_add.append((labelled, ids))
    ignored = ignored_fields(queries)
    if refused:
        return ImportReport(refused=refused, ignored=ignored)
    vectors = QueryVectors.made(conn, embedder_factory, [labelled.query for labelled, _ in to_add])
    refusal = None
    with conn.transaction() as transaction:
        added = []
        for labelled, ids in to_add:
            try:
                (golden_id,) = one_row(conn.execute("select payrail.add_golden_query(%s, %s, %s)", (labelled.query, ids, labelled.language)))
            except (psycopg.errors.IntegrityError, psycopg.errors.DataError) as error:
                refusal = Refusal(source, _file_line(labelled), database_reason(error))
                raise psycopg.Rollback(transaction) from None
            added.append((golden_id, labelled.query))
        vectors.store(conn, added)
    if refusal is not None:
        return ImportReport(refused=[refusal], ignored=ignored)
    return ImportReport(len(to_add), unchanged, saved=True, ignored=ignored)


def _file_line(labelled: LabelledQuery) -> int:
    """The file's line a labelled query was read from: what a golden import's refusals name."""
    if labelled.line is None:
        raise ValueError(f"a golden import takes a file's labelled queries, each with its line; {labelled.describe_origin()} has none")
    return labelled.line


def _existing(conn: psycopg.Connection, queries: Sequence[LabelledQuery]) -> list[tuple[str, int | None, str | None, list[int], str | None]]:
    """For each query: its comparison key, and the golden query the registry holds that is the same
    (id, query, record ids, language lower-cased; None, None, [], None when there is none)."""
    return [
        (key, golden_id, query, list(record_ids or []), language and language.lower())
        for key, golden_id, query, record_ids, language in conn.execute(
            """
            select payrail._normalize_name(u.query), g.id, g.query,
                   (select pg_catalog.array_agg(r.record_id) from payrail.golden_query_records as r where r.golden_query_id = g.id),
                   g.language
            from unnest(%s::text[]) with ordinality as u(query, i)
            left join lateral payrail._golden_query_named(u.query) as g on true
            order by u.i
            """,
            ([q.query for q in queries],),
        )
    ]


# The vectors of the golden queries' texts by a model, in payrail.golden_query_embeddings (each
# golden query's vector is used while its text is the query's), and the golden queries lacking
# one: those a registry without a model added, those written in psql, those of a switch's next
# model not staged yet.
MISSING_VECTORS = """
select g.id, g.query from payrail.golden_queries as g
where not exists (
  select from payrail.golden_query_embeddings as e
  where e.golden_query_id = g.id and e.model = %(model)s and e.query = g.query and {pgvector}.vector_dims(e.embedding) = %(dimensions)s
  offset 0)
order by g.id
"""
STORE_VECTORS = """
insert into payrail.golden_query_embeddings as e (golden_query_id, model, query, embedding)
select u.id, %s, u.query, u.embedding from unnest(%s::bigint[], %s::text[], %b::{pgvector}.vector[]) as u(id, query, embedding)
on conflict (golden_query_id, model) do update
  set query = excluded.query, embedding = excluded.embedding, embedded_at = pg_catalog.now()
"""


@dataclass
class QueryVectors:
    """Vectors of golden queries' texts made by one embedder, to keep with them."""

    embedder: Embedder | None
    by_text: dict[str, np.ndarray] = field(default_factory=dict)

    @classmethod
    def made(cls, conn: psycopg.Connection, embedder_factory: Callable[[], Embedder], queries: Sequence[str]) -> QueryVectors:
        """queries embedded by the registry's model, in batches, before any transaction; none
        while the registry has no model (its first vector chooses one; sync embeds them then).
        Raises EmbeddingUnavailable, or RegistryModelMismatch for an embedder of another model."""
        model = registry_model(conn)
        if model is None or not queries:
            return cls(None)
        embedder = require_embedder_model(conn, embedder_factory())
        return cls(embedder, dict(zip(queries, embedded(embedder, list(queries), model))))

    def store(self, conn: psycopg.Connection, golden: Sequence[tuple[int, str]]) -> None:
        """Keeps the vector of each (golden query id, query) made, in the caller's transaction.
        A login that may not write them (payrail_operator alone) leaves them to sync."""
        golden = [(golden_id, query) for golden_id, query in golden if query in self.by_text]
        if self.embedder is None or not golden or not may_store_vectors(conn):
            return
        store_vectors(conn, self.embedder.model_name, [(i, q, self.by_text[q]) for i, q in golden])


def may_store_vectors(conn: psycopg.Connection) -> bool:
    """Whether this login may keep golden queries' vectors (payrail_embedder's privilege)."""
    return one_value(conn.execute("select pg_catalog.has_table_privilege('payrail.golden_query_embeddings', 'insert')"))


def store_vectors(conn: psycopg.Connection, model_name: str, rows: Sequence[tuple[int, str, np.ndarray]]) -> None:
    """Keeps each (golden query id, its text, the text's vector by model_name)."""
    ids, queries, vectors = zip(*rows) if rows else ((), (), ())
    conn.execute(naming_pgvector(conn, STORE_VECTORS), (model_name, list(ids), list(queries), list(vectors)))


def embedded_by(embedder_factory: Callable[[], Embedder], model: EmbeddingModel, queries: Sequence[str]) -> list[np.ndarray]:
    """queries embedded by model (the registry's, or the one a save is about to make it), with
    embedder_factory's embedder; RegistryModelMismatch when that embeds with another model."""
    embedder = embedder_for(model, embedder_factory())
    refuse_another_model(model, embedder)
    return embedded(embedder, list(queries), model)


def embedded(embedder: Embedder, queries: list[str], model: EmbeddingModel | None) -> list[np.ndarray]:
    """queries embedded as search embeds a query (embed_queries), a request per backend batch."""
    vectors = []
    for batch in batched(queries, embedder.batch_size):
        vectors += checked_vectors(embed_queries(embedder, list(batch)), len(batch), embedder.model_name)
    if vectors:
        refuse_other_dimensions(model, embedder, vectors[0].size)
    return vectors


def missing_vectors(conn: psycopg.Connection, model: EmbeddingModel) -> list[tuple[int, str]]:
    """(id, query) of every golden query without a vector of its text by model."""
    return conn.execute(naming_pgvector(conn, MISSING_VECTORS), {"model": model.name, "dimensions": model.dimensions}).fetchall()


def embed_missing(conn: psycopg.Connection, embedder: Embedder, model: EmbeddingModel, *, batch_size: int | None = None) -> int:
    """Embeds every golden query lacking a vector by model with embedder (of that model), a
    transaction per batch; returns how many. What sync and model switch do for golden queries."""
    missing = missing_vectors(conn, model)
    for batch in batched(missing, batch_size or embedder.batch_size):
        vectors = embedded(embedder, [query for _, query in batch], model)
        with conn.transaction():
            store_vectors(conn, model.name, [(golden_id, query, vector) for (golden_id, query), vector in zip(batch, vectors)])
    return len(missing)
