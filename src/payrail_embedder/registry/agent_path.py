"""The agent path held open: a Registry keeps one connection pool (postgres/pool.py) and one
embedder for its lifetime and answers agents' searches with them (the Python API's and the MCP
server's), logging an outage and the recovery after it."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict, TypeVar

from ..base import logs
from ..embedders import Embedder, LocalEmbedder, made_once
from ..postgres import local_server
from ..postgres.connection import DatabaseUnavailable
from ..postgres.pool import AgentPool
from ..settings import Settings
from . import search
from .search import Match, NeedsEmbedding, Query, SearchUnavailable, check_query

if TYPE_CHECKING:
    from psycopg_pool import ConnectionPool

    from ..postgres.connection import PinnedConnection

T = TypeVar("T")


class SearchResult(TypedDict):
    """At most three matches, in the registry's order; no scores."""

    matches: list[Match]


class Registry:
    """A long-lived handle on the registry for the agent path: one pool, one embedder.

    `settings` defaults to Settings.from_env(), the CLI's configuration; every other argument
    left as None keeps that setting. `embedder` overrides the backend settings with a ready
    Embedder. Nothing is opened until the first search: the pool then, and the embedder only for
    the first query that is not an exact provider or method name. Safe to share between threads.
    """

    def __init__(
        self,
        database_url: str | None = None,
        *,
        settings: Settings | None = None,
        data_dir: Path | str | None = None,
        embedder: Embedder | None = None,
        backend: str | None = None,
        model: str | None = None,
        openai_base_url: str | None = None,
        embedding_timeout: float | None = None,
        embedding_retries: int | None = None,
        prepared_statements: bool | None = None,
        pool_size: int = 4,
        connect_timeout: float = 5.0,
    ) -> None:
        self._settings = (settings or Settings.from_env()).with_overrides(
            database_url=database_url,
            data_dir=Path(data_dir) if data_dir else None,
            backend=backend,
            model=model,
            openai_base_url=openai_base_url,
            embedding_timeout=embedding_timeout,
            embedding_retries=embedding_retries,
            prepared_statements=prepared_statements,
        )
        self._connections = AgentPool(
            lambda: self._settings.resolved_database_url,
            size=pool_size,
            connect_timeout=connect_timeout,
            prepared_statements=self._settings.prepared_statements,
            stopped=lambda: local_server.embedded_stopped(self._settings.database_url, self._settings.data_dir),
        )
        self._get_embedder = (lambda: embedder) if embedder is not None else made_once(self._settings.embedder)
        self._outage = _Outage()

    def search_provider_methods(self, query: str) -> SearchResult:
        """At most three provider methods for `query`, a need in plain words or an exact name.

        Raises InvalidQuery (empty, over 2,000 characters, not a string) or SearchUnavailable
        (the database or the embedding service failed); never an empty or partial answer instead.
        Logs each search_unavailable with its cause, and the first answer after them (logs.py).
        Warm, one statement for an exact name; two for a need in plain words (search.py).
        """
        checked = check_query(query)
        answer = self.answer_by_name(checked)
        return self.search_by_embedding(checked, answer) if isinstance(answer, NeedsEmbedding) else answer

    def answer_by_name(self, query: Query) -> SearchResult | NeedsEmbedding:
        """search_provider_methods' answer when `query` (check_query's) is an exact provider or
        method name (one statement, never the embedder); else NeedsEmbedding, naming the
        registry's model, for search_by_embedding. Raises and logs as search_provider_methods
        does. The MCP server asks this on threads of their own, so exact names never wait for
        threads that wait on the embedding service."""
        found = self._guarded(lambda: search.answer_by_name(self._connections.run, query))
        return found if isinstance(found, NeedsEmbedding) else self._answered(found)

    def search_by_embedding(self, query: Query, needed: NeedsEmbedding) -> SearchResult:
        """The answer to a query answer_by_name could not give (needed: what it returned): the
        query embedded with no connection held, then one statement. Raises and logs as
        search_provider_methods does."""
        # The pool lends a connection for the database step alone, none while the query is embedded.
        return self._answered(self._guarded(lambda: search.search_by_embedding(self._connections.run, self._get_embedder, query, needed)))

    def _guarded(self, call: Callable[[], T]) -> T:
        """call()'s result; its failure logged as search_unavailable, with its cause."""
        try:
            try:
                return call()
            except DatabaseUnavailable as error:
                raise SearchUnavailable(str(error), "database_unreachable") from error
        except SearchUnavailable as error:
            self._outage.failed(error)
            raise

    def _answered(self, matches: list[Match]) -> SearchResult:
        self._outage.answered()
        return {"matches": matches}

    def warm_up(self) -> None:
        """Opens the pool and, for the local backend, runs one semantic search (loading the model),
        so the first search is as fast as the next.

        Never raises: a failure here is reported by the search that meets it.
        """
        try:
            self._connections.open()
            if isinstance(self._get_embedder(), LocalEmbedder):  # a remote backend would bill a request
                # A whole semantic search, so the first real one finds every part warm: the model's
                # first run, the search's statements, the pool's connection.
                self.search_provider_methods("warm up the registry's search path")
        except Exception:
            pass

    def close(self) -> None:
        self._connections.close()

    def __enter__(self) -> Registry:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    @property
    def pool(self) -> ConnectionPool[PinnedConnection] | None:
        """The connection pool, once the first search opened it (for its get_stats())."""
        return self._connections.pool


class _Outage:
    """What operators read of an outage: every search_unavailable with its cause, then one line
    when a search is answered again, saying how long and how many searches it lasted."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._since: float | None = None
        self._failed = 0

    def failed(self, error: SearchUnavailable) -> None:
        with self._lock:
            self._since = self._since or time.monotonic()
            self._failed += 1
        logs.log("search_unavailable", logging.WARNING, cause=error.cause, detail=error.detail)

    def answered(self) -> None:
        with self._lock:
            if self._since is None:
                return
            since, failed, self._since, self._failed = self._since, self._failed, None, 0
        logs.log("search_recovered", failed_searches=failed, unavailable_seconds=round(time.monotonic() - since, 1))
