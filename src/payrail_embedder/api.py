"""The Python API of the agent path: search_provider_methods(query=...) -> {"matches": [Match, ...]}.

    from payrail_embedder import search_provider_methods, SearchUnavailable, InvalidQuery

    try:
        answer = search_provider_methods(query="find live hotel availability through a paid API")
    except InvalidQuery as error:        # error.code == "invalid_query": fix the query
        ...
    except SearchUnavailable as error:   # error.code == "search_unavailable": try again later
        ...
    for match in answer["matches"]:
        print(match.provider, match.method, match.docsUrl)

A `Registry` keeps one connection pool (pool.py) and one embedder for its lifetime, so every
call after the first costs one database round trip (plus one query embedding off the name path). The
module-level function uses a default Registry configured like the CLI, from the environment
(settings.Settings.from_env: PAYRAIL_DATABASE_URL, unset for the embedded PostgreSQL, and the
rest of the CLI's variables). The ordering, the name path and the input rules stay in the
database (payrail.search_provider_methods); this module only keeps what the CLI opens per call.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from . import embedded, logs, search
from .database import DatabaseUnavailable
from .embedders import Embedder, LocalEmbedder
from .pool import AgentPool
from .search import InvalidQuery, Match, SearchUnavailable
from .settings import Settings

if TYPE_CHECKING:
    from psycopg_pool import ConnectionPool

__all__ = ["InvalidQuery", "Match", "Registry", "SearchResult", "SearchUnavailable", "search_provider_methods"]


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
            stopped=lambda: embedded.embedded_stopped(self._settings.database_url, self._settings.data_dir),
        )
        self._embedder = embedder
        self._embedder_lock = threading.Lock()
        self._outage = _Outage()

    def search_provider_methods(self, query: str) -> SearchResult:
        """At most three provider methods for `query`, a need in plain words or an exact name.

        Raises InvalidQuery (empty, over 2,000 characters, not a string) or SearchUnavailable
        (the database or the embedding service failed); never an empty or partial answer instead.
        Logs each search_unavailable with its cause, and the first answer after them (logs.py).
        """
        # The pool lends a connection for each database step, none while the query is embedded.
        return self._answer(query, lambda: search.search_provider_methods(self._connections.run, self._get_embedder, query))

    def answer_by_name(self, query: str) -> SearchResult | None:
        """search_provider_methods' answer when `query` is an exact provider or method name (one
        statement, never the embedder), or None when it needs an embedding. Raises and logs as
        search_provider_methods does. The MCP server asks this first, on threads of their own,
        so exact names never wait for threads that wait on the embedding service."""
        return self._answer(query, lambda: search.answer_by_name(self._connections.run, query))

    def _answer(self, query: str, matches: Callable[[], list[Match] | None]) -> SearchResult | None:
        search.check_query(query)  # a bad query is invalid_query even while the database is down
        try:
            try:
                found = matches()
            except DatabaseUnavailable as error:
                raise SearchUnavailable(str(error), "database_unreachable") from error
        except SearchUnavailable as error:
            self._outage.failed(error)
            raise
        if found is None:  # not answered yet: the search that embeds the query answers, or fails
            return None
        self._outage.answered()
        return {"matches": found}

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
        except Exception:  # noqa: BLE001 (best effort by design)
            pass

    def close(self) -> None:
        self._connections.close()

    def __enter__(self) -> Registry:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    @property
    def pool(self) -> ConnectionPool | None:
        """The connection pool, once the first search opened it (for its get_stats())."""
        return self._connections.pool

    def _get_embedder(self) -> Embedder:
        with self._embedder_lock:
            return self._get_embedder_locked()

    def _get_embedder_locked(self) -> Embedder:
        if self._embedder is None:
            self._embedder = self._settings.embedder()
        return self._embedder


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


_default_registry: Registry | None = None
_default_lock = threading.Lock()


def default_registry() -> Registry:
    """The Registry behind the module-level function, created on first use from the environment."""
    global _default_registry
    with _default_lock:
        if _default_registry is None:
            try:
                _default_registry = Registry()
            except ValueError as error:  # a setting in the environment the CLI would refuse too
                raise SearchUnavailable(f"configuration: {error}", "configuration") from error
        return _default_registry


def search_provider_methods(query: str) -> SearchResult:
    """At most three provider methods for `query`, from the default Registry (configured by the
    environment, like the CLI). Raises InvalidQuery or SearchUnavailable; see Registry.
    """
    return default_registry().search_provider_methods(query)
