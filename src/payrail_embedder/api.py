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

A `Registry` keeps one connection pool and one embedder for its lifetime, so every call after
the first costs one database round trip (plus one query embedding off the name path). The
module-level function uses a default Registry configured like the CLI, from the environment
(settings.Settings.from_env: PAYRAIL_DATABASE_URL, unset for the embedded PostgreSQL, and the
rest of the CLI's variables). The ordering, the name path and the input rules stay in the
database (payrail.search_provider_methods); this module only pools what the CLI opens per call.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import TypedDict

import psycopg
from psycopg_pool import ConnectionPool, PoolTimeout

from . import connection, database, logs, search
from .embedders import Embedder, LocalEmbedder
from .search import InvalidQuery, Match, SearchUnavailable
from .settings import Settings

__all__ = ["InvalidQuery", "Match", "Registry", "SearchResult", "SearchUnavailable", "search_provider_methods"]

APPLICATION_NAME = "payrail-agent-search"
# How long a search waits for a pooled connection before it asks the server directly whether it is up.
FIRST_WAIT_SECONDS = 0.25


class _QuietReconnects(logging.Filter):
    """psycopg_pool logs each failed reconnection of our pool on standard error (agent hosts log
    it, line after line, during an outage); the search that meets the outage says so instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        return f"'{APPLICATION_NAME}'" not in record.getMessage()


logging.getLogger("psycopg.pool").addFilter(_QuietReconnects())


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
        self._pool_size = pool_size
        self._connect_timeout = connect_timeout
        self._libpq_connect_timeout = max(2, round(connect_timeout))  # libpq's shortest is 2 s
        self._embedder = embedder
        self._pool: ConnectionPool | None = None
        self._opening: Future | None = None
        self._pool_lock = threading.Lock()
        self._embedder_lock = threading.Lock()
        self._outage = _Outage()

    def search_provider_methods(self, query: str) -> SearchResult:
        """At most three provider methods for `query`, a need in plain words or an exact name.

        Raises InvalidQuery (empty, over 2,000 characters, not a string) or SearchUnavailable
        (the database or the embedding service failed); never an empty or partial answer instead.
        Logs each search_unavailable with its cause, and the first answer after them (logs.py).
        """
        search.check_query(query)  # a bad query is invalid_query even while the database is down
        try:
            answer = self._answer(query)
        except SearchUnavailable as error:
            self._outage.failed(error)
            raise
        self._outage.answered()
        return answer

    def _answer(self, query: str) -> SearchResult:
        pool = self._open_pool()
        try:
            return self._search(pool, query, FIRST_WAIT_SECONDS)
        except PoolTimeout:
            # No connection at once: a busy pool, or a server that went away (the pool then keeps
            # trying to reconnect). One direct attempt tells which, at once.
            self._probe(pool.conninfo)
        try:
            return self._search(pool, query, self._connect_timeout)
        except PoolTimeout as error:
            raise self._unreachable(pool.conninfo, error) from error

    def _search(self, pool: ConnectionPool, query: str, wait_seconds: float) -> SearchResult:
        with pool.connection(timeout=wait_seconds) as conn:
            return {"matches": search.search_provider_methods(conn, self._get_embedder, query)}

    def warm_up(self) -> None:
        """Opens the pool and, for the local backend, runs one semantic search (loading the model),
        so the first search is as fast as the next.

        Never raises: a failure here is reported by the search that meets it.
        """
        try:
            self._open_pool()
            if isinstance(self._get_embedder(), LocalEmbedder):  # a remote backend would bill a request
                # A whole semantic search, so the first real one finds every part warm: the model's
                # first run, the search's statements, the pool's connection.
                self.search_provider_methods("warm up the registry's search path")
        except Exception:  # noqa: BLE001 (best effort by design)
            pass

    def close(self) -> None:
        with self._pool_lock:
            if self._pool is not None:
                self._pool.close()
                self._pool = None

    def __enter__(self) -> Registry:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    @property
    def pool(self) -> ConnectionPool | None:
        """The connection pool, once the first search opened it (for its get_stats())."""
        return self._pool

    def _open_pool(self) -> ConnectionPool:
        """The pool, opened on first use. A caller that arrives while another thread (the warm-up,
        say) is opening it shares that attempt's outcome instead of waiting out a second timeout.
        """
        with self._pool_lock:
            if self._pool is not None:
                return self._pool
            attempt, owner = (self._opening, False) if self._opening is not None else (Future(), True)
            self._opening = attempt
        if not owner:
            return attempt.result()
        try:
            pool = self._new_pool()
        except BaseException as error:
            with self._pool_lock:
                self._opening = None
            attempt.set_exception(error)
            raise
        with self._pool_lock:
            self._pool, self._opening = pool, None
        attempt.set_result(pool)
        return pool

    def _new_pool(self) -> ConnectionPool:
        try:
            url = self._settings.resolved_database_url
        except Exception as error:  # the embedded server did not start: no answer either way
            raise SearchUnavailable(f"cannot start the embedded database: {error}", "database_unreachable") from error
        # The pool would retry a refused connection until its timeout; one direct attempt fails at
        # once, and says why.
        self._probe(url)
        pool = ConnectionPool(
            url,
            # Every statement on the registry's search path, with no session state (connection.py).
            connection_class=connection.PinnedConnection,
            min_size=1,
            max_size=self._pool_size,
            kwargs={
                # The search tries the name path first and continues after PYE01:
                # outside a transaction, so the refusal aborts nothing.
                "autocommit": True,
                "application_name": APPLICATION_NAME,
                "connect_timeout": self._libpq_connect_timeout,
                **connection.psycopg_options(self._settings.prepared_statements),
            },
            configure=connection.prepare,
            # A server restart leaves dead connections behind; replace them rather than fail a search.
            check=connection.check,
            # While the server is down the pool retries with a doubling backoff (up to 5 minutes by
            # default), so after a restart searches kept failing for as long as the last delay
            # (15 s after a 40 s outage). Giving an attempt up this soon makes the next search
            # start a fresh one at once: search answers as soon as the server is back.
            reconnect_timeout=self._connect_timeout,
            timeout=self._connect_timeout,
            name=APPLICATION_NAME,
            open=False,
        )
        try:
            pool.open(wait=True, timeout=self._connect_timeout)
        except PoolTimeout as error:
            pool.close()
            raise self._unreachable(url, error) from error
        return pool

    def _unreachable(self, url: str, timeout: PoolTimeout) -> SearchUnavailable:
        """The pool only says it timed out; one direct attempt tells why."""
        try:
            self._probe(url)
        except SearchUnavailable as reason:
            return reason
        return SearchUnavailable(f"no database connection within {self._connect_timeout:g} s: {timeout}", "database_unreachable")

    def _probe(self, url: str) -> None:
        """One direct connection attempt; SearchUnavailable with the server's reason when it fails
        (on the embedded default stopped since: that, and the command that starts it)."""
        try:
            psycopg.connect(url, connect_timeout=self._libpq_connect_timeout, application_name=APPLICATION_NAME).close()
        except psycopg.Error as error:
            reason = database.embedded_stopped(self._settings.database_url, self._settings.data_dir) or str(error).strip()
            raise SearchUnavailable(f"cannot reach the database: {reason}", "database_unreachable") from error

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
