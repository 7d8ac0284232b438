"""The agent path: one question in, at most three provider methods out."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import NewType, TypeVar

import numpy as np
import psycopg

from ..base import errcodes
from ..base.errors import CodedError, database_reason
from ..base.reports import Report
from ..embedders import Embedder, EmbeddingUnavailable
from ..postgres.connection import SelfPinned
from .embedding_model import (
    EmbeddingModel,
    RegistryModelMismatch,
    embedder_for,
    model_of_embedding_required,
    refuse_another_model,
    refuse_other_dimensions,
)
from .match_schema import Match as MatchJSON

T = TypeVar("T")


class SearchError(CodedError):
    """A search that has no answer; `code` is what callers branch on."""

    code = "search_unavailable"


class SearchUnavailable(SearchError):
    """The embedding service or the database failed: no answer now, try again later.

    cause, for operators' logs: "database_unreachable", "database_error" (a statement failed),
    "embedding_service" (it failed), "model_mismatch" (the client embeds with another model than
    the registry's), "configuration" (a setting in the environment is refused) or "server_error"
    (a failure of the server's own, which the MCP server answers so).
    """

    code = "search_unavailable"

    def __init__(self, detail: str, cause: str = "database_error") -> None:
        super().__init__(detail)
        self.cause = cause


class InvalidQuery(SearchError):
    """The query itself is unusable (empty or too long): fix the query."""

    code = "invalid_query"


class DraftNotEmbedded(SearchError):
    """preview: the draft has no vector of its current content, so search could not place it: run sync."""

    code = "draft_not_embedded"


class UnknownDraft(SearchError):
    """preview: no record has the draft's provider and method (any more)."""

    code = "unknown_record"


class Match(dict):
    """One provider method the registry suggests: an advisory guide, not an approval or a callable
    capability. Read docsUrl before calling the provider; payment requirements go to Payrail Agent.

    A read-only dict of the contract's JSON fields (provider, method, urls, docsUrl, guidance), so
    json.dumps of an answer is the CLI's `--json`; the same fields read as attributes too
    (match.provider, match.docsUrl). urls is a tuple.
    """

    __slots__ = ()

    def __init__(self, provider: str, method: str, urls, docsUrl: str | None, guidance: str) -> None:
        super().__init__(provider=provider, method=method, urls=tuple(urls), docsUrl=docsUrl, guidance=guidance)

    @classmethod
    def from_json(cls, match: MatchJSON) -> Match:
        return cls(**match)

    def to_json(self) -> MatchJSON:
        """The match as the contract's JSON: what --json prints and the MCP tool returns."""
        return {"provider": self["provider"], "method": self["method"], "urls": list(self["urls"]), "docsUrl": self["docsUrl"], "guidance": self["guidance"]}

    def describe(self, number: int) -> list[str]:
        """The match for people, as the number-th of an answer."""
        return [
            f"{number}. {self['provider']} / {self['method']}",
            f"   docs: {self['docsUrl'] or '-'}",
            *(f"   url:  {url}" for url in self["urls"]),
            *(f"   {line}" for line in self["guidance"].split("\n")),
        ]

    def __getattr__(self, name: str):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"a Match has no field {name!r}") from None

    def __setattr__(self, name: str, value) -> None:
        raise AttributeError("a Match is read-only: an answer cannot be edited by accident")

    def _read_only(self, *args, **kwargs):
        raise TypeError("a Match is read-only: an answer cannot be edited by accident")

    __setitem__ = __delitem__ = __ior__ = clear = pop = popitem = setdefault = update = _read_only

    def __reduce__(self):
        return Match.from_json, (self.to_json(),)


# Each one call of a registry function that pins its own search path: they run as they are, on
# any session's path, in no transaction of their own (connection.SelfPinned).
SEARCH_SQL = SelfPinned("select provider, method, urls, docs_url, guidance from payrail.search_provider_methods(%s, %s, %s)")
PREVIEW_SQL = SelfPinned("select provider, method, urls, docs_url, guidance from payrail.preview_search(%s, %s, %s, %s, %s)")

# What a query's SQLSTATE means to a caller that branches on search's codes.
# Keyed by what psycopg says an error's SQLSTATE is: None for one raised on the client's side.
ERROR_OF_SQLSTATE: dict[str | None, type[SearchError]] = {
    errcodes.INVALID_PARAMETER_VALUE: InvalidQuery,
    errcodes.OBJECT_NOT_IN_PREREQUISITE_STATE: DraftNotEmbedded,
    errcodes.NO_DATA_FOUND: UnknownDraft,
}


@dataclass(frozen=True)
class Matches(Report):
    """An answer of search (or preview): at most three matches, best first."""

    matches: list[Match]

    def to_json(self) -> dict:
        return {"matches": [match.to_json() for match in self.matches]}

    def describe(self) -> list[str]:
        if not self.matches:
            return ["no enabled provider method matches"]
        return [line for number, match in enumerate(self.matches, start=1) for line in match.describe(number)]


def embed_queries(embedder: Embedder, queries: Sequence[str]) -> list[np.ndarray]:
    """The query embeddings search uses, in one batch: the single definition of how a query is embedded."""
    return embedder.embed(list(queries))


# What payrail._is_blank ignores: a query of these characters alone is empty. White space is
# payrail._white_space_characters, character for character (Unicode's White_Space but U+0085, and
# U+FEFF); invisible characters are Unicode's Default_Ignorable_Code_Point
# (payrail._invisible_characters). tests/test_text_rules.py compares this copy with the
# database's definitions and rule, character by character.
QUERY_WHITE_SPACE = "\t\n\x0b\x0c\r \xa0\u1680" + "".join(map(chr, range(0x2000, 0x200B))) + "\u2028\u2029\u202f\u205f\u3000\ufeff"
QUERY_INVISIBLE = "".join(
    chr(code)
    for first, last in (
        (0x00AD, 0x00AD),
        (0x034F, 0x034F),
        (0x061C, 0x061C),
        (0x115F, 0x1160),
        (0x17B4, 0x17B5),
        (0x180B, 0x180F),
        (0x200B, 0x200F),
        (0x202A, 0x202E),
        (0x2060, 0x206F),
        (0x3164, 0x3164),
        (0xFE00, 0xFE0F),
        (0xFEFF, 0xFEFF),
        (0xFFA0, 0xFFA0),
        (0xFFF0, 0xFFF8),
        (0x1BCA0, 0x1BCA3),
        (0x1D173, 0x1D17A),
        (0xE0000, 0xE0FFF),
    )
    for code in range(first, last + 1)
)
QUERY_BLANK = QUERY_WHITE_SPACE + QUERY_INVISIBLE
# payrail._check_query's limit (db/functions/200-search.sql), mirrored so a query is refused before
# any connection: with QUERY_BLANK, the package's one deliberate copy of a database rule. Every face
# (CLI, API, MCP) checks through check_query and names the limit from here.
QUERY_MAX_CHARACTERS = 2000


# A query check_query passed: the search functions take nothing else, so the type checker proves
# that each face checked what it was given, once, before the database or the embedder is asked.
# A golden query read back from the registry is one too (its table's constraint is the same rule).
Query = NewType("Query", str)


def check_query(query: object) -> Query:
    """Refuses what can never be a query before the database or the embedder is asked, so a bad
    query is invalid_query even while they are down: not a string, empty, over 2,000 characters
    (the database's own rules, mirrored), NUL (PostgreSQL text cannot hold it), lone surrogates
    (not Unicode: what undecodable bytes become in Python). Every face calls it where a query comes in."""
    if not isinstance(query, str):
        raise InvalidQuery(f"query must be a string, not {'null' if query is None else type(query).__name__}")
    if not query.strip(QUERY_BLANK):
        raise InvalidQuery("query is empty")
    if len(query) > QUERY_MAX_CHARACTERS:
        raise InvalidQuery(f"query is {len(query)} characters long; the limit is {QUERY_MAX_CHARACTERS:,}")
    if "\x00" in query:
        raise InvalidQuery("query contains a NUL character")
    try:
        query.encode("utf-8")
    except UnicodeEncodeError as error:
        raise InvalidQuery(
            f"query is not valid Unicode text (a lone surrogate, \\u{ord(query[error.start]):04x}, at character {error.start + 1}: bytes that are not UTF-8?)"
        ) from None
    return Query(query)


# How search gets a connection: connections(work) runs work(conn) on one and then lets it go. The
# agent path takes one for the name path, lets it go while the query is embedded, and takes one
# again for the vector search, so a slow or hanging embedding service never holds a connection (or
# a pool slot) that exact names need. The Registry's pool (AgentPool.run) and the CLI's
# one_connection_at_a_time give connections; holding(conn) keeps one the caller owns throughout.
Connections = Callable[[Callable[[psycopg.Connection], T]], T]


def holding(conn: psycopg.Connection) -> Connections:
    """Every step on conn, held throughout: for a caller whose one connection is its own (the
    backoffice's session, eval), which no agent waits for."""
    return lambda work: work(conn)


@dataclass(frozen=True)
class NeedsEmbedding:
    """The name path's answer to a query it does not take: embed it with the registry's model
    (None: the registry has none yet, so no record has a vector)."""

    model: EmbeddingModel | None


def answer_by_name(connections: Connections, query: Query, counted_draft: tuple[str, str] | None = None) -> list[Match] | NeedsEmbedding:
    """The name path's answer, or NeedsEmbedding when query is no provider or method name: one
    statement on one connection, never the embedder."""
    with _as_search_errors():
        return connections(lambda conn: _name_path(conn, query, counted_draft))


def search_by_embedding(
    connections: Connections,
    embedder_factory: Callable[[], Embedder],
    query: Query,
    needed: NeedsEmbedding,
    *,
    query_vector: np.ndarray | None = None,
    counted_draft: tuple[str, str] | None = None,
) -> list[Match]:
    """The answer to a query the name path did not take (needed: its answer): embedded with the
    registry's model, with no connection held (Connections), then one statement with the vector,
    which checks the model in SQL (PYE02)."""
    with _as_search_errors():
        embedder = embedder_for(needed.model, embedder_factory())
        refuse_another_model(needed.model, embedder)
        vector = query_vector if query_vector is not None else embed_queries(embedder, [query])[0]
        # The database would refuse it (PYE02), and the log blame the database.
        refuse_other_dimensions(needed.model, embedder, vector.size)
        return connections(lambda conn: _matches(conn, query, vector, embedder.model_name, counted_draft))


def search_provider_methods(
    connections: Connections,
    embedder_factory: Callable[[], Embedder],
    query: Query,
    *,
    query_vector: np.ndarray | None = None,
    counted_draft: tuple[str, str] | None = None,
) -> list[Match]:
    """Asks the database first without a vector: the name path answers at once and never needs
    the embedder. Only a query that needs one is embedded, with the registry's own model, which
    the name path's answer names, and with no connection held (Connections): then a connection is
    taken again for the vector search. Two statements at most; one for an exact name.

    query_vector: the query's embedding (embed_queries with embedder_factory's embedder) when the
    caller already has it, as eval does for all its queries in one batch; it is not embedded again.
    counted_draft: (provider, method) of a draft to count as enabled (payrail.preview_search).
    Connections must be in autocommit mode: the first attempt may fail with PYE01.
    """
    answer = answer_by_name(connections, query, counted_draft)
    if isinstance(answer, NeedsEmbedding):
        return search_by_embedding(connections, embedder_factory, query, answer, query_vector=query_vector, counted_draft=counted_draft)
    return answer


def _matches(conn: psycopg.Connection, query: str, vector, model: str | None, counted_draft: tuple[str, str] | None) -> list[Match]:
    if counted_draft is None:
        return [Match(*row) for row in conn.execute(SEARCH_SQL, (query, vector, model)).fetchall()]
    return [Match(*row) for row in conn.execute(PREVIEW_SQL, (*counted_draft, query, vector, model)).fetchall()]


def _name_path(conn: psycopg.Connection, query: str, counted_draft: tuple[str, str] | None) -> list[Match] | NeedsEmbedding:
    """The name path's matches; NeedsEmbedding, with the model the database named, when it says
    the query needs an embedding (PYE01)."""
    try:
        return _matches(conn, query, None, None, counted_draft)
    except psycopg.Error as error:
        if error.sqlstate != errcodes.QUERY_EMBEDDING_REQUIRED:
            raise
        return NeedsEmbedding(model_of_embedding_required(conn, error))


@contextmanager
def _as_search_errors() -> Iterator[None]:
    """A failure of the embedding service or of a statement as the search error callers branch on."""
    try:
        yield
    except EmbeddingUnavailable as error:
        raise SearchUnavailable(f"embedding service failed: {error}", "embedding_service") from error
    except RegistryModelMismatch as error:
        raise SearchUnavailable(str(error), "model_mismatch") from error
    except psycopg.Error as error:
        known = ERROR_OF_SQLSTATE.get(error.sqlstate)
        if known is not None:
            raise known(database_reason(error)) from error
        if error.sqlstate == errcodes.SESSION_LIMIT_LIFTED:
            # PGOPTIONS or the connection's options lifted a limit the DBA gave the login.
            raise SearchUnavailable(database_reason(error), "configuration") from error
        raise SearchUnavailable(f"database error: {database_reason(error, with_sqlstate=True)}") from error
