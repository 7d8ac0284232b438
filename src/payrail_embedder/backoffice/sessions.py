"""Sign-in with a PostgreSQL role, and the sessions that hold each role's own connection.

The backoffice keeps no users and no passwords: PostgreSQL checks the password when the session's
connection is opened, and everything the operator does then runs as that role, so privileges,
constraints, triggers and the history's `changed_by` are the database's own.
"""

from __future__ import annotations

import re
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import psycopg
from psycopg.conninfo import make_conninfo

from .. import database

# The roles the backoffice needs, and why: it saves the public fields and their vectors together.
REQUIRED_ROLES = {
    "payrail_operator": "to edit records",
    "payrail_embedder": "to save their vectors",
}


class SignInRefused(Exception):
    """Why a sign-in was refused, in words the operator can act on."""


@dataclass(eq=False)
class Session:
    id: str
    role: str
    conn: psycopg.Connection
    csrf_token: str
    last_seen: float
    # One request at a time uses the connection (two tabs of one operator take turns).
    lock: threading.Lock = field(default_factory=threading.Lock)
    # Messages shown on the next page (after a save and its redirect).
    messages: list[str] = field(default_factory=list)


def open_connection(database_url: str, role: str, password: str) -> psycopg.Connection:
    """An autocommit connection as role, to the server and database of database_url.

    Raises SignInRefused when PostgreSQL refuses the role or its password, or the role lacks one
    of REQUIRED_ROLES (naming it).
    """
    if not role:
        raise SignInRefused("Type the name of your PostgreSQL role as Username.")
    if "\x00" in role + password:
        # libpq reads the connection string up to a NUL: what follows (the host, the database)
        # would be dropped, and libpq's defaults would pick the server.
        raise SignInRefused("Username and Password cannot contain the NUL character.")
    try:
        conninfo = make_conninfo(database_url, user=role, password=password, connect_timeout=10)
        conn = database.connect(conninfo, autocommit=True)
    except psycopg.Error as error:
        # libpq's message names the role and the server's reason; it never contains the password.
        refused = re.search(r"FATAL:\s*(.+)", str(error))
        if refused is None:
            raise SignInRefused(f"Cannot reach the database: {str(error).strip()}") from None
        raise SignInRefused(f"PostgreSQL refused the sign-in: {refused.group(1).strip()}") from None
    try:
        _check_roles(conn, role)
    except BaseException:
        conn.close()
        raise
    return conn


def _check_roles(conn: psycopg.Connection, role: str) -> None:
    held = dict(
        conn.execute(
            "select rolname, pg_catalog.pg_has_role(current_user, oid, 'USAGE') from pg_catalog.pg_roles"
            " where rolname = any(%s)",
            (list(REQUIRED_ROLES),),
        ).fetchall()
    )
    if len(held) < len(REQUIRED_ROLES):
        raise SignInRefused(
            "This database holds no registry yet (its roles are missing): run `payrail-embedder db apply` first."
        )
    missing = [name for name in REQUIRED_ROLES if not held[name]]
    if missing:
        why = " and ".join(f"{name} ({REQUIRED_ROLES[name]})" for name in missing)
        grants = ", ".join(missing)
        raise SignInRefused(
            f'The role "{role}" lacks the grant of {why}. The backoffice needs both payrail_operator and '
            f'payrail_embedder; an administrator can run: grant {grants} to "{role}";'
        )


class Sessions:
    """Sessions by their random id; a session idle for longer than idle_timeout seconds ends."""

    def __init__(self, idle_timeout: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.idle_timeout = idle_timeout
        self._clock = clock
        self._sessions: dict[str, Session] = {}
        self._lock = threading.Lock()

    def open(self, role: str, conn: psycopg.Connection) -> Session:
        session = Session(secrets.token_urlsafe(32), role, conn, secrets.token_urlsafe(32), self._clock())
        with self._lock:
            self._sessions[session.id] = session
        return session

    def get(self, session_id: str | None) -> Session | None:
        """The live session with this id, now marked as used; None when there is none (never was,
        signed out, idle too long, or its connection was lost)."""
        with self._lock:
            session = self._sessions.get(session_id or "")
            if session is None:
                return None
            if self._clock() - session.last_seen > self.idle_timeout or session.conn.closed:
                del self._sessions[session.id]
            else:
                session.last_seen = self._clock()
                return session
        self._close(session)
        return None

    def end(self, session: Session) -> None:
        with self._lock:
            self._sessions.pop(session.id, None)
        self._close(session)

    def end_idle(self) -> None:
        """Ends every session idle for too long, closing its connection; busy ones are not idle."""
        with self._lock:
            now = self._clock()
            idle = [
                s for s in self._sessions.values() if now - s.last_seen > self.idle_timeout and not s.lock.locked()
            ]
            for session in idle:
                del self._sessions[session.id]
        for session in idle:
            self._close(session)

    def end_all(self) -> None:
        with self._lock:
            sessions, self._sessions = list(self._sessions.values()), {}
        for session in sessions:
            self._close(session)

    @staticmethod
    def _close(session: Session) -> None:
        # Waits for a request still using the connection.
        with session.lock:
            session.conn.close()


class SignInThrottle:
    """Slows down guessing: after FREE_FAILURES failed sign-ins for one role name, each further
    failure locks that name out for twice as long as the last (up to MAX_LOCK seconds), and one
    attempt per name runs at a time. A success, or FORGET_AFTER seconds without a failure, clears it."""

    FREE_FAILURES = 3
    MAX_LOCK = 300.0
    FORGET_AFTER = 900.0
    MAX_NAMES = 10_000

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._failures: dict[str, tuple[int, float]] = {}  # name -> (failures, time of the last)
        self._trying: set[str] = set()
        self._lock = threading.Lock()

    def begin(self, name: str) -> float:
        """Starts an attempt for name and returns 0, or returns how many seconds it must wait."""
        with self._lock:
            now = self._clock()
            self._forget_old(now)
            if name in self._trying:
                return 1.0
            failures, last = self._failures.get(name, (0, now))
            wait = last + self._lock_seconds(failures) - now
            if wait > 0:
                return wait
            self._trying.add(name)
            return 0.0

    def end(self, name: str, *, failed: bool) -> None:
        with self._lock:
            self._trying.discard(name)
            if not failed:
                self._failures.pop(name, None)
                return
            failures, _ = self._failures.pop(name, (0, 0.0))
            self._failures[name] = (failures + 1, self._clock())

    def _lock_seconds(self, failures: int) -> float:
        if failures < self.FREE_FAILURES:
            return 0.0
        return min(self.MAX_LOCK, 2.0 ** (failures - self.FREE_FAILURES + 1))

    def _forget_old(self, now: float) -> None:
        # Dicts keep insertion order and end() re-inserts, so the oldest failures come first.
        for name, (_, last) in list(self._failures.items()):
            if now - last <= self.FORGET_AFTER and len(self._failures) <= self.MAX_NAMES:
                break
            del self._failures[name]
