"""The agent path: one question in, at most three provider methods out."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import psycopg

from . import errcodes
from .embedders import Embedder, EmbeddingUnavailable
from .registry_model import registry_model


class SearchError(Exception):
    """A search that has no answer; `code` is what callers branch on."""

    code = "search_unavailable"

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail

    def to_json(self) -> dict:
        return {"error": self.code, "detail": self.detail}


class SearchUnavailable(SearchError):
    """The embedding service or the database failed: no answer now, try again later."""

    code = "search_unavailable"


class InvalidQuery(SearchError):
    """The query itself is unusable (empty or too long): fix the query."""

    code = "invalid_query"


SEARCH_SQL = "select provider, method, urls, docs_url, guidance from payrail.search_provider_methods(%s, %s, %s)"


def _as_match(row: tuple) -> dict:
    provider, method, urls, docs_url, guidance = row
    return {"provider": provider, "method": method, "urls": list(urls), "docsUrl": docs_url, "guidance": guidance}


def embed_queries(embedder: Embedder, queries: Sequence[str]) -> list[np.ndarray]:
    """The query embeddings search uses, in one batch: the single definition of how a query is embedded."""
    return embedder.embed(list(queries))


def search_provider_methods(
    conn: psycopg.Connection,
    embedder_factory: Callable[[], Embedder],
    query: str,
    *,
    query_vector: np.ndarray | None = None,
) -> list[dict]:
    """Asks the database first without a vector: the name path answers at once and never needs
    the embedder. Only a query that needs one is embedded, with the registry's own model.

    query_vector: the query's embedding (embed_queries with embedder_factory's embedder) when the
    caller already has it, as eval does for all its queries in one batch; it is not embedded again.
    """
    if "\x00" in query:
        # PostgreSQL text cannot hold NUL, so the database never sees such a query.
        raise InvalidQuery("query contains a NUL character")
    try:
        try:
            return [_as_match(row) for row in conn.execute(SEARCH_SQL, (query, None, None)).fetchall()]
        except psycopg.Error as error:
            if error.sqlstate != errcodes.QUERY_EMBEDDING_REQUIRED:
                raise
        model = registry_model(conn)
        embedder = embedder_factory()
        if model is not None and model.name != embedder.model_name:
            raise SearchUnavailable(
                f"the registry's vectors come from model {model.name}, but this client embeds with "
                f"{embedder.model_name}; set PAYRAIL_EMBEDDER / PAYRAIL_EMBEDDING_MODEL to the registry's model"
            )
        vector = query_vector if query_vector is not None else embed_queries(embedder, [query])[0]
        return [_as_match(row) for row in conn.execute(SEARCH_SQL, (query, vector, embedder.model_name)).fetchall()]
    except EmbeddingUnavailable as error:
        raise SearchUnavailable(f"embedding service failed: {error}") from error
    except psycopg.Error as error:
        if error.sqlstate == errcodes.INVALID_PARAMETER_VALUE:
            raise InvalidQuery(error.diag.message_primary or str(error)) from error
        raise SearchUnavailable(f"database error: {_describe(error)}") from error


def _describe(error: psycopg.Error) -> str:
    message = error.diag.message_primary or str(error).strip()
    if error.sqlstate:
        message = f"{message} (SQLSTATE {error.sqlstate})"
    if error.diag.message_hint:
        message += f". Hint: {error.diag.message_hint}"
    return message
