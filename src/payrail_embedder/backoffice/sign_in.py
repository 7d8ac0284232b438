"""Sign-in with a PostgreSQL role: the credential checks, the throttle, and the refusals in words.

The backoffice keeps no users: PostgreSQL checks the password when the session's connection is
opened, and everything the operator does then runs as that role, so privileges, constraints,
triggers and the history's `changed_by` are the database's own. A sign-in counts only when the
server asked for the password typed and checked it: never a password the backoffice's host
holds (a password file, PGPASSWORD, a service file), never a server that lets the role in
without one (trust, peer, a client certificate).
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable

import psycopg
from psycopg.conninfo import make_conninfo

from ..base.safe_text import one_line
from ..postgres import connection
from ..postgres.logins import MAX_ROLE_NAME_BYTES, OPERATOR_GRANTS

# What a server may do to check a password (libpq 16's require_auth refuses anything else, e.g. a
# `trust`, `peer` or `cert` line); connections are also refused when libpq says it sent none.
PASSWORD_METHODS = "scram-sha-256,md5,password"
REQUIRE_PASSWORD = {"require_auth": PASSWORD_METHODS} if psycopg.pq.version() >= 160000 else {}

# One message for every refused credential, whatever PostgreSQL said (wrong password, unknown
# role, no pg_hba.conf line, no password asked): a sign-in never tells whether a role exists.
CREDENTIALS_REFUSED = (
    "Not signed in: the username or password is wrong, or PostgreSQL lets this role in without checking a password, which the backoffice never accepts."
)
# libpq's and the server's words for a refused credential (before the role was known to be right).
CREDENTIAL_FAILURE = re.compile(r"authentication|pg_hba\.conf|role \"[^\n]*\" does not exist|no password supplied")
# The server's words for "not now": out of connection slots, starting up or shutting down.
BUSY = re.compile(r"too many|connection slots|the database system is|does not exist")
EMBEDDED_STOPPED = (
    "The embedded PostgreSQL is not running (`payrail-embedder db stop` stops it, and so does a restart of "
    "this machine). Start it again with `payrail-embedder db start` (every payrail-embedder command that uses "
    "the database starts it too), then sign in."
)


class SignInRefused(Exception):
    """Why a sign-in was refused, in words the operator can act on. failed: a wrong username or
    password as far as anyone outside can tell, which the throttle counts. reason, for the log:
    what libpq or the server said, which the page keeps to itself (it would tell whether a role
    exists); libpq's words never hold the password. The message is made safe to show
    (safe_text.one_line): it may quote the server, a role name or the database URL."""

    status = 403

    def __init__(self, message: str, *, failed: bool = False, reason: str | None = None) -> None:
        super().__init__(one_line(message))
        self.failed = failed
        self.reason = reason or message


class SessionsFull(SignInRefused):
    """The backoffice holds as many sessions as it may (in all, or for this role)."""

    status = 503


def typed_problem(role: str, password: str) -> str | None:
    """Why a sign-in cannot even be tried, judged before any connection, the same for every name."""
    if not role:
        return "Type the name of your PostgreSQL role as Username."
    if len(role.encode("utf-8")) > MAX_ROLE_NAME_BYTES:
        # PostgreSQL would cut it short and sign in another role.
        return f"A PostgreSQL role name has at most {MAX_ROLE_NAME_BYTES} bytes: check the Username."
    if "\x00" in role + password:
        # libpq reads the connection string up to a NUL: what follows (the host, the database)
        # would be dropped, and libpq's defaults would pick the server.
        return "Username and Password cannot contain the NUL character."
    if not password:
        # libpq would look for one on this host (a password file, PGPASSWORD).
        return "Type your password: the backoffice signs in only with a password PostgreSQL checks."
    return None


def open_connection(database_url: str, role: str, password: str, *, embedded: bool = False, prepared_statements: bool = True) -> psycopg.Connection:
    """An autocommit connection as role, to the server and database of database_url, opened only
    when PostgreSQL asked for password and accepted it.

    Raises SignInRefused when PostgreSQL refuses the role or its password, or the role lacks one
    of OPERATOR_GRANTS (naming it); DatabaseUnavailable when the database cannot take it now.
    embedded: database_url is the embedded default's (its refusals name the command that starts it).
    prepared_statements: off behind a pooler that cannot carry them (settings.py).
    """
    problem = typed_problem(role, password)
    if problem:
        raise SignInRefused(problem)
    # The password typed is the only one: an explicit one wins over PGPASSWORD and a service
    # file's, and passfile points at nothing.
    conninfo = make_conninfo(database_url, user=role, password=password, passfile=os.devnull, connect_timeout=10, **REQUIRE_PASSWORD)
    try:
        conn = connection.connect(conninfo, autocommit=True, prepared_statements=prepared_statements)
    except psycopg.OperationalError as error:
        raise _refusal(str(error).strip(), embedded) from None
    try:
        if not conn.pgconn.used_password:  # a libpq older than 16, which has no require_auth
            raise SignInRefused(CREDENTIALS_REFUSED, failed=True, reason="the server did not ask for the password")
        _check_roles(conn, role)
    except BaseException:
        conn.close()
        raise
    return conn


def _refusal(text: str, embedded: bool) -> SignInRefused | connection.DatabaseUnavailable:
    """What a failed connection attempt means for the operator; libpq's text never holds the password."""
    if CREDENTIAL_FAILURE.search(text):
        return SignInRefused(CREDENTIALS_REFUSED, failed=True, reason=" ".join(text.split()))
    fatal = re.search(r"FATAL:\s*(.+)", text, flags=re.S)
    if fatal is None:  # the server was not reached
        reason = text.splitlines()[0] if text else "no reason given"
        return connection.DatabaseUnavailable(one_line(EMBEDDED_STOPPED if embedded else f"The database cannot be reached now ({reason})."))
    reason = fatal.group(1).strip()
    if BUSY.search(reason):
        return connection.DatabaseUnavailable(one_line(f"The database cannot take a connection now ({reason})."))
    # Said only once the password was right (e.g. the role may not log in): safe to show.
    return SignInRefused(f"PostgreSQL refused the sign-in: {reason}")


def _check_roles(conn: psycopg.Connection, role: str) -> None:
    held: dict[str, bool] = dict(
        conn.execute(
            "select rolname, pg_catalog.pg_has_role(current_user, oid, 'USAGE') from pg_catalog.pg_roles where rolname = any(%s)",
            (list(OPERATOR_GRANTS),),
        ).fetchall()
    )
    if len(held) < len(OPERATOR_GRANTS):
        raise SignInRefused("This database holds no registry yet (its roles are missing): run `payrail-embedder db apply` first.")
    missing = [name for name in OPERATOR_GRANTS if not held[name]]
    if missing:
        why = " and ".join(f"{name} ({OPERATOR_GRANTS[name]})" for name in missing)
        grants = ", ".join(missing)
        raise SignInRefused(
            f'The role "{role}" lacks the grant of {why}. The backoffice needs both payrail_operator and '
            f'payrail_embedder; an administrator can run: grant {grants} to "{role}";'
        )


# The cookie carries a random token; the backoffice keeps neither it nor the password, only what
# each derives: the session's id (to find it) and the key that seals the password (to reconnect).
class SignInThrottle:
    """Slows down guessing: after FREE_FAILURES failed sign-ins for one role name, each further
    failure locks that name out for twice as long as the last (up to MAX_LOCK seconds), and one
    attempt per name runs at a time. A success, or FORGET_AFTER seconds without a failure, clears it.

    It keeps at most MAX_NAMES names, and a name is forgotten only by time or by its success, never
    to make room: failing under many other names cannot unlock one. While MAX_NAMES names are
    kept, every other name shares one more entry (OVERFLOW), so guessing under fresh names is
    slowed down as one name is.
    """

    FREE_FAILURES = 3
    MAX_LOCK = 300.0
    FORGET_AFTER = 900.0
    MAX_NAMES = 10_000
    OVERFLOW = ""  # never a name: an empty Username is refused before the throttle

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._failures: dict[str, tuple[int, float]] = {}  # name -> (failures, time of the last)
        self._trying: dict[str, str] = {}  # name -> its entry, while an attempt runs
        self._lock = threading.Lock()

    def begin(self, name: str) -> float:
        """Starts an attempt for name and returns 0, or returns how many seconds it must wait."""
        with self._lock:
            now = self._clock()
            self._forget_old(now)
            key = self._key(name)
            if key in self._trying.values():
                return 1.0
            failures, last = self._failures.get(key, (0, now))
            wait = last + self._lock_seconds(failures) - now
            if wait > 0:
                return wait
            self._trying[name] = key
            return 0.0

    def end(self, name: str, *, failed: bool) -> None:
        """Ends the attempt begin(name) started."""
        with self._lock:
            key = self._trying.pop(name)
            if not failed:
                if key != self.OVERFLOW:
                    self._failures.pop(key, None)
                return
            failures, _ = self._failures.pop(key, (0, 0.0))
            self._failures[key] = (failures + 1, self._clock())

    def tracked(self) -> int:
        """How many entries it holds (at most MAX_NAMES + 1)."""
        with self._lock:
            return len(self._failures)

    def _key(self, name: str) -> str:
        if name in self._failures or len(self._failures) - (self.OVERFLOW in self._failures) < self.MAX_NAMES:
            return name
        return self.OVERFLOW

    def _lock_seconds(self, failures: int) -> float:
        if failures < self.FREE_FAILURES:
            return 0.0
        return min(self.MAX_LOCK, 2.0 ** (failures - self.FREE_FAILURES + 1))

    def _forget_old(self, now: float) -> None:
        # Dicts keep insertion order and end() re-inserts, so the oldest failures come first: a
        # sign-in looks at the entries it forgets and one more, never copies all MAX_NAMES.
        while self._failures:
            name, (_, last) = next(iter(self._failures.items()))
            if now - last <= self.FORGET_AFTER:
                break
            del self._failures[name]
