"""Sign-in with a PostgreSQL role, and the sessions that hold each role's own connection.

The backoffice keeps no users: PostgreSQL checks the password when the session's connection is
opened, and everything the operator does then runs as that role, so privileges, constraints,
triggers and the history's `changed_by` are the database's own. A sign-in counts only when the
server asked for the password typed and checked it: never a password the backoffice's host
holds (a password file, PGPASSWORD, a service file), never a server that lets the role in
without one (trust, peer, a client certificate).

A session keeps its password sealed: encrypted with a key only the browser's cookie carries, so
the session's connection can be opened again (after the database restarted, and every
SessionLimits.recheck seconds, to check that PostgreSQL still accepts the password) while what
the backoffice holds gives no password back by itself.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import psycopg
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from psycopg.conninfo import make_conninfo

from .. import database, logs
from ..logins import MAX_ROLE_NAME_BYTES, OPERATOR_GRANTS
from ..safe_text import one_line

# What a server may do to check a password (libpq 16's require_auth refuses anything else, e.g. a
# `trust`, `peer` or `cert` line); connections are also refused when libpq says it sent none.
PASSWORD_METHODS = "scram-sha-256,md5,password"
REQUIRE_PASSWORD = {"require_auth": PASSWORD_METHODS} if psycopg.pq.version() >= 160000 else {}

# One message for every refused credential, whatever PostgreSQL said (wrong password, unknown
# role, no pg_hba.conf line, no password asked): a sign-in never tells whether a role exists.
CREDENTIALS_REFUSED = (
    "Not signed in: the username or password is wrong, or PostgreSQL lets this role in without checking "
    "a password, which the backoffice never accepts."
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
# Previewed forms a session keeps (each holds one vector: 6 kB at 1,536 dimensions).
MAX_PREVIEWS = 4
MAX_MESSAGES = 10  # kept for the next page of a session; a client that never reads them grows nothing


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


class DatabaseUnreachable(SignInRefused):
    """The database cannot take a connection now (down, restarting, out of slots); the role is fine."""

    status = 503


class SessionsFull(SignInRefused):
    """The backoffice holds as many sessions as it may (in all, or for this role)."""

    status = 503


class SessionEnded(Exception):
    """The session ended while a request waited for it (signed out in another tab, expired)."""


class SessionLost(SessionEnded):
    """PostgreSQL no longer accepts the password the session was opened with (changed, the role
    dropped, its grant revoked or its login taken away): the operator signs in again."""


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


def open_connection(
    database_url: str, role: str, password: str, *, embedded: bool = False, prepared_statements: bool = True
) -> psycopg.Connection:
    """An autocommit connection as role, to the server and database of database_url, opened only
    when PostgreSQL asked for password and accepted it.

    Raises SignInRefused when PostgreSQL refuses the role or its password, or the role lacks one
    of OPERATOR_GRANTS (naming it); DatabaseUnreachable when the database cannot take it now.
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
        conn = database.connect(conninfo, autocommit=True, prepared_statements=prepared_statements)
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


def _refusal(text: str, embedded: bool) -> SignInRefused:
    """What a failed connection attempt means for the operator; libpq's text never holds the password."""
    if CREDENTIAL_FAILURE.search(text):
        return SignInRefused(CREDENTIALS_REFUSED, failed=True, reason=" ".join(text.split()))
    fatal = re.search(r"FATAL:\s*(.+)", text, flags=re.S)
    if fatal is None:  # the server was not reached
        reason = text.splitlines()[0] if text else "no reason given"
        return DatabaseUnreachable(EMBEDDED_STOPPED if embedded else f"The database cannot be reached now ({reason}).")
    reason = fatal.group(1).strip()
    if BUSY.search(reason):
        return DatabaseUnreachable(f"The database cannot take a connection now ({reason}).")
    # Said only once the password was right (e.g. the role may not log in): safe to show.
    return SignInRefused(f"PostgreSQL refused the sign-in: {reason}")


def _check_roles(conn: psycopg.Connection, role: str) -> None:
    held = dict(
        conn.execute(
            "select rolname, pg_catalog.pg_has_role(current_user, oid, 'USAGE') from pg_catalog.pg_roles"
            " where rolname = any(%s)",
            (list(OPERATOR_GRANTS),),
        ).fetchall()
    )
    if len(held) < len(OPERATOR_GRANTS):
        raise SignInRefused(
            "This database holds no registry yet (its roles are missing): run `payrail-embedder db apply` first."
        )
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
def _session_id(token: str) -> str:
    return hashlib.sha256(b"payrail session id:" + token.encode("utf-8", "surrogateescape")).hexdigest()


def _sealing_key(token: str) -> AESGCM:
    return AESGCM(hashlib.sha256(b"payrail sealing key:" + token.encode("utf-8", "surrogateescape")).digest())


def _seal(token: str, password: str) -> bytes:
    nonce = os.urandom(12)
    return nonce + _sealing_key(token).encrypt(nonce, password.encode("utf-8"), None)


def _unseal(token: str, sealed: bytes) -> str:
    return _sealing_key(token).decrypt(sealed[:12], sealed[12:], None).decode("utf-8")


@dataclass(frozen=True)
class SessionLimits:
    """How long sessions live and how many the backoffice holds (each holds one connection); the
    defaults are the backoffice command's options'."""

    idle_timeout: float  # seconds without a request
    max_age: float  # seconds since sign-in, however busy
    recheck: float  # seconds a checked password is trusted before PostgreSQL checks it again
    max_sessions: int  # in all, sign-ins under way included: the most connections held
    max_per_role: int


@dataclass(eq=False)
class Session:
    id: str
    role: str
    conn: psycopg.Connection
    csrf_token: str
    sealed_password: bytes
    opened: float
    last_seen: float
    verified: float  # when PostgreSQL last accepted the password
    # One request at a time uses the connection (two tabs of one operator take turns).
    lock: threading.Lock = field(default_factory=threading.Lock)
    # Messages shown on the next page (after a save and its redirect).
    messages: deque = field(default_factory=lambda: deque(maxlen=MAX_MESSAGES))
    # The last forms previewed (views.form_digest -> write.Prepared, oldest first): a Save of one
    # saves what was previewed, with the vector made for it, without a second preview.
    previews: dict = field(default_factory=dict)

    def remember_preview(self, digest: str, prepared) -> None:
        self.previews.pop(digest, None)
        self.previews[digest] = prepared
        while len(self.previews) > MAX_PREVIEWS:
            del self.previews[next(iter(self.previews))]


class Sessions:
    """Sessions by the id their cookie's token derives; connect(role, password) opens a checked
    connection (open_connection with the registry's URL)."""

    def __init__(
        self,
        connect: Callable[[str, str], psycopg.Connection],
        limits: SessionLimits,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limits = limits
        self._connect = connect
        self._clock = clock
        self._sessions: dict[str, Session] = {}
        self._signing_in = 0
        self._lock = threading.Lock()

    def sign_in(self, role: str, password: str, replacing: Session | None = None) -> tuple[Session, str]:
        """A new session of role, once PostgreSQL accepted the password, and the token its cookie
        carries. replacing: the browser's earlier session, which it ends. Raises SignInRefused."""
        limits = self.limits
        with self._lock:
            held = len(self._sessions) + self._signing_in - (replacing is not None and replacing.id in self._sessions)
            if held >= limits.max_sessions:
                raise SessionsFull(
                    f"The backoffice holds as many sessions as it may ({limits.max_sessions}): try again when someone "
                    f"signs out, or when a session has been idle for {_minutes(limits.idle_timeout)}."
                )
            self._signing_in += 1
        try:
            conn = self._connect(role, password)
        except BaseException:
            with self._lock:
                self._signing_in -= 1
            raise
        token, now = secrets.token_urlsafe(32), self._clock()
        session = Session(_session_id(token), role, conn, secrets.token_urlsafe(32), _seal(token, password), now, now, now)
        with self._lock:
            self._signing_in -= 1
            # Counted once the password was right: nobody learns anything of a role they cannot sign in as.
            admitted = sum(s.role == role and s is not replacing for s in self._sessions.values()) < limits.max_per_role
            if admitted:
                self._sessions[session.id] = session
        if not admitted:
            conn.close()
            raise SessionsFull(
                f'"{role}" has {limits.max_per_role} sessions open, the most one role may hold: sign out in another '
                f"browser, or wait until one has been idle for {_minutes(limits.idle_timeout)}."
            )
        if replacing is not None:
            self.end(replacing, "replaced")
        return session, token

    def get(self, token: str | None) -> Session | None:
        """The live session of this cookie token, now marked as used; None when there is none
        (never was, signed out, idle or open for too long)."""
        with self._lock:
            session = self._sessions.get(_session_id(token)) if token else None
            if session is None:
                return None
            now = self._clock()
            expired = self._expired(session, now)
            if expired is None:
                session.last_seen = now
                return session
            del self._sessions[session.id]
        self._close(session, expired)
        return None

    def connection(self, session: Session, token: str) -> psycopg.Connection:
        """The session's connection, opened again first when it broke, or when PostgreSQL last
        accepted the password more than limits.recheck seconds ago. Call it holding session.lock.

        Raises SessionLost (the session ends) when PostgreSQL no longer accepts the password,
        DatabaseUnreachable (it stays) when the database cannot take a connection now, and
        SessionEnded when the session ended while the caller waited for its lock.
        """
        with self._lock:
            if self._sessions.get(session.id) is not session:
                raise SessionEnded()
        if session.conn.closed or self._clock() - session.verified >= self.limits.recheck:
            self.reconnect(session, token)
        return session.conn

    def reconnect(self, session: Session, token: str) -> None:
        """Replaces the session's connection with a new one, the password checked again; see connection()."""
        session.conn.close()  # first: the session never holds two connections
        try:
            conn = self._connect(session.role, _unseal(token, session.sealed_password))
        except DatabaseUnreachable:
            raise
        except (SignInRefused, InvalidTag) as refused:
            with self._lock:
                self._sessions.pop(session.id, None)
            _log_end(session, "password_refused")
            raise SessionLost(str(refused)) from None
        session.conn, session.verified = conn, self._clock()

    def end(self, session: Session, reason: str) -> None:
        """Ends session, saying why in the log: signed_out or replaced (signed in again)."""
        with self._lock:
            self._sessions.pop(session.id, None)
        self._close(session, reason)

    def end_expired(self) -> None:
        """Ends every session idle or open for too long, closing its connection; a session serving a
        request is left to end on its next one."""
        with self._lock:
            now = self._clock()
            expired = [(s, why) for s in self._sessions.values() if (why := self._expired(s, now)) and not s.lock.locked()]
            for session, _ in expired:
                del self._sessions[session.id]
        for session, why in expired:
            self._close(session, why)

    def end_all(self) -> None:
        with self._lock:
            sessions, self._sessions = list(self._sessions.values()), {}
        for session in sessions:
            self._close(session, "shutdown")

    def _expired(self, session: Session, now: float) -> str | None:
        """Why session is over by now ("idle", "lifetime"), or None."""
        if now - session.last_seen > self.limits.idle_timeout:
            return "idle"
        if now - session.opened > self.limits.max_age:
            return "lifetime"
        return None

    @staticmethod
    def _close(session: Session, reason: str) -> None:
        # Waits for a request still using the connection.
        with session.lock:
            session.conn.close()
        _log_end(session, reason)


def _log_end(session: Session, reason: str) -> None:
    logs.log("session_end", role=session.role, reason=reason)


def _minutes(seconds: float) -> str:
    minutes = max(1, round(seconds / 60))
    return f"{minutes} minute{'s' if minutes != 1 else ''}"


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
        # Dicts keep insertion order and end() re-inserts, so the oldest failures come first.
        for name, (_, last) in list(self._failures.items()):
            if now - last <= self.FORGET_AFTER:
                break
            del self._failures[name]
