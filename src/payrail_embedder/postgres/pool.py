"""The agent path's connection pool: opened on first use, shared by threads, and saying why no connection came.

api.Registry runs every search on it; a warm pool adds no statement of its own (a connection the
server dropped is found by using it, then replaced). A search that finds no connection learns at
once whether the server is busy or gone, and with the server's reason.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import TypeVar

import psycopg
from psycopg_pool import ConnectionPool, PoolTimeout

from ..base import errcodes, logs
from ..base.errors import database_reason
from . import connection
from .connection import DatabaseUnavailable

APPLICATION_NAME = "payrail-agent-search"
# How long a search waits for a pooled connection before it asks the server directly whether it is up.
FIRST_WAIT_SECONDS = 0.25

T = TypeVar("T")


class _QuietReconnects(logging.Filter):
    """psycopg_pool logs each failed reconnection of our pool on standard error (agent hosts log
    it, line after line, during an outage); the search that meets the outage says so instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        return f"'{APPLICATION_NAME}'" not in record.getMessage()


logging.getLogger("psycopg.pool").addFilter(_QuietReconnects())


class _CheckedWhenLost(ConnectionPool[connection.PinnedConnection]):
    """The pool's check() (AgentPool runs it once a connection turned out lost, never before a
    use) sends each idle connection one empty self-pinned statement, not one in a transaction."""

    check_connection = staticmethod(connection.check)


def _url(pool: ConnectionPool[connection.PinnedConnection]) -> str:
    """The URL pool connects to: its conninfo, which psycopg_pool also allows to be a function
    that returns one (AgentPool gives it the URL itself)."""
    return pool.conninfo if isinstance(pool.conninfo, str) else pool.conninfo()


class AgentPool:
    """Autocommit connections to the database that database_url() names, at most `size` at once.

    Nothing is opened until the first run() or open(). Every failure to get a connection is
    DatabaseUnavailable with the reason: stopped()'s when it knows better than libpq (the
    embedded default, stopped since), else the server's. Safe to share between threads.
    """

    def __init__(
        self,
        database_url: Callable[[], str],
        *,
        size: int,
        connect_timeout: float,
        prepared_statements: bool,
        stopped: Callable[[], str | None],
    ) -> None:
        self._database_url = database_url
        self._size = size
        self._connect_timeout = connect_timeout
        self._libpq_connect_timeout = max(2, round(connect_timeout))  # libpq's shortest is 2 s
        self._prepared_statements = prepared_statements
        self._stopped = stopped
        self._pool: ConnectionPool[connection.PinnedConnection] | None = None
        self._opening: Future[ConnectionPool[connection.PinnedConnection]] | None = None
        self._lock = threading.Lock()

    @property
    def pool(self) -> ConnectionPool[connection.PinnedConnection] | None:
        """The connection pool, once opened (for its get_stats())."""
        return self._pool

    def run(self, work: Callable[[psycopg.Connection], T]) -> T:
        """work(connection) on a pooled connection. work only reads: it may be run twice, when the
        connection turned out lost (_ConnectionLost) or a transaction pooler lost the statements
        prepared for it (_stop_preparing)."""
        try:
            return self._run_pooled(work)
        except _ConnectionLost:
            # The server dropped connections the pool held (a restart, a failover, a pooler's or a
            # firewall's idle timeout): found by using one, which the pool now discards, instead
            # of a check before every use. The others dropped with it are checked now, at once.
            self.open().check()
        except psycopg.Error as error:
            # Also when another thread's search turned them off meanwhile: this one prepared before.
            if error.sqlstate not in errcodes.PREPARED_STATEMENT_LOST:
                raise
            self._stop_preparing(error)
        try:
            return self._run_pooled(work)
        except _ConnectionLost as lost:
            # Lost again on a connection just checked or made: the server is going away.
            raise self._unreachable(_url(self.open()), lost.error) from lost.error

    def _run_pooled(self, work: Callable[[psycopg.Connection], T]) -> T:
        pool = self.open()
        try:
            return self._run(pool, work, FIRST_WAIT_SECONDS)
        except PoolTimeout:
            # No connection at once: a busy pool, or a server that went away (the pool then keeps
            # trying to reconnect). One direct attempt tells which, at once.
            self._probe(_url(pool))
        try:
            return self._run(pool, work, self._connect_timeout)
        except PoolTimeout as error:
            raise self._unreachable(_url(pool), error) from error

    def _run(self, pool: ConnectionPool[connection.PinnedConnection], work: Callable[[psycopg.Connection], T], wait_seconds: float) -> T:
        with pool.connection(timeout=wait_seconds) as conn:
            if not self._prepared_statements:
                conn.prepare_threshold = None  # also on the connections opened before _stop_preparing
            try:
                return work(conn)
            except psycopg.OperationalError as error:
                if conn.broken:
                    raise _ConnectionLost(error) from error
                raise

    def _stop_preparing(self, error: psycopg.Error) -> None:
        """A transaction pooler (PgBouncer in transaction mode before 1.21, or without
        max_prepared_statements) gave one of the pool's connections a server connection that lacks
        a statement prepared on another, or has another client's of the same name: this pool
        prepares no statement from now on, and says once which setting spares it the first error."""
        with self._lock:
            if not self._prepared_statements:
                return
            self._prepared_statements = False
        # The reason ends with the fix: PAYRAIL_PREPARED_STATEMENTS=off (errors.database_reason).
        logs.log("prepared_statements_off", logging.WARNING, reason=database_reason(error, with_sqlstate=True))

    def close(self) -> None:
        with self._lock:
            if self._pool is not None:
                self._pool.close()
                self._pool = None

    def open(self) -> ConnectionPool[connection.PinnedConnection]:
        """The pool, opened on first use. A caller that arrives while another thread (the warm-up,
        say) is opening it shares that attempt's outcome instead of waiting out a second timeout.
        """
        with self._lock:
            if self._pool is not None:
                return self._pool
            attempt, owner = (self._opening, False) if self._opening is not None else (Future(), True)
            self._opening = attempt
        if not owner:
            return attempt.result()
        try:
            pool = self._new_pool()
        except BaseException as error:
            with self._lock:
                self._opening = None
            attempt.set_exception(error)
            raise
        with self._lock:
            self._pool, self._opening = pool, None
        attempt.set_result(pool)
        return pool

    def _new_pool(self) -> ConnectionPool[connection.PinnedConnection]:
        try:
            url = self._database_url()
        except Exception as error:  # the embedded server did not start: no answer either way
            raise DatabaseUnavailable(f"cannot start the embedded database: {error}") from error
        # The pool would retry a refused connection until its timeout; one direct attempt fails at
        # once, and says why.
        self._probe(url)
        pool = _CheckedWhenLost(
            url,
            # Every statement on the registry's search path, with no session state (connection.py).
            connection_class=connection.PinnedConnection,
            min_size=1,
            max_size=self._size,
            kwargs={
                # The search tries the name path first and continues after PYE01:
                # outside a transaction, so the refusal aborts nothing.
                "autocommit": True,
                "application_name": APPLICATION_NAME,
                "connect_timeout": self._libpq_connect_timeout,
                **connection.psycopg_options(self._prepared_statements),
            },
            configure=connection.prepare,
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

    def _unreachable(self, url: str, failure: Exception) -> DatabaseUnavailable:
        """The pool only says it timed out, a lost connection only that it is lost; one direct
        attempt tells why."""
        try:
            self._probe(url)
        except DatabaseUnavailable as reason:
            return reason
        return DatabaseUnavailable(f"no database connection within {self._connect_timeout:g} s: {failure}")

    def _probe(self, url: str) -> None:
        """One direct connection attempt; DatabaseUnavailable with the server's reason when it fails."""
        try:
            psycopg.connect(url, connect_timeout=self._libpq_connect_timeout, application_name=APPLICATION_NAME).close()
        except psycopg.Error as error:
            reason = self._stopped() or str(error).strip()
            raise DatabaseUnavailable(f"cannot reach the database: {reason}") from error


class _ConnectionLost(Exception):
    """A pooled connection the server had closed, found by using it."""

    def __init__(self, error: psycopg.OperationalError) -> None:
        super().__init__(str(error))
        self.error = error
