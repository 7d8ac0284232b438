"""The backoffice's sessions: each holds its role's own connection (opened by sign_in.py) and
keeps its password sealed: encrypted with a key only the browser's cookie carries, so the
session's connection can be opened again (after the database restarted, and every
SessionLimits.recheck seconds, to check that PostgreSQL still accepts the password) while what
the backoffice holds gives no password back by itself.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

import psycopg
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from ..base import logs
from ..base.safe_text import one_line
from .sign_in import DatabaseUnreachable, SessionsFull, SignInRefused

# Previewed forms a session keeps (each holds one vector: 6 kB at 1,536 dimensions).
MAX_PREVIEWS = 4
MAX_MESSAGES = 10  # kept for the next page of a session; a client that never reads them grows nothing
# Of the browser's User-Agent header a session keeps this many characters (before escaping): it
# names the browser on the Sessions page, and it is the outsider's text, so it is kept bounded.
MAX_USER_AGENT = 160


class SessionEnded(Exception):
    """The session ended while a request waited for it (signed out in another tab, expired)."""


class SessionLost(SessionEnded):
    """PostgreSQL no longer accepts the password the session was opened with (changed, the role
    dropped, its grant revoked or its login taken away): the operator signs in again."""


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
    # seconds without a request after which a session gives way to a new sign-in of its role that
    # max_per_role would refuse (the browser was closed without signing out)
    give_way_after: float


def browser_of(user_agent: str) -> str:
    """The User-Agent header as the Sessions page shows it: MAX_USER_AGENT characters at most, on
    one line, control characters escaped (the page escapes HTML)."""
    cut = user_agent[:MAX_USER_AGENT] + ("…" if len(user_agent) > MAX_USER_AGENT else "")
    return one_line(cut) or "not said"


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
    browser: str  # browser_of(its User-Agent)
    started_at: datetime  # opened, on the wall clock
    # What the Sessions page's forms name it by: never its id, which finds it by its cookie's token.
    handle: str = field(default_factory=lambda: secrets.token_urlsafe(16))
    # One request at a time uses the connection (two tabs of one operator take turns).
    lock: threading.Lock = field(default_factory=threading.Lock)
    # Messages shown on the next page (after a save and its redirect).
    messages: deque = field(default_factory=lambda: deque(maxlen=MAX_MESSAGES))
    # The last forms previewed (views.form_digest -> actions.Preview, oldest first): a Save of one
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

    def sign_in(self, role: str, password: str, replacing: Session | None = None, user_agent: str = "") -> tuple[Session, str]:
        """A new session of role, once PostgreSQL accepted the password, and the token its cookie
        carries. replacing: the browser's earlier session, which it ends. When role holds
        limits.max_per_role sessions, the one idle longest gives way if it has been idle for
        limits.give_way_after. Raises SignInRefused."""
        limits = self.limits
        with self._lock:
            held = len(self._sessions) + self._signing_in - (replacing is not None and replacing.id in self._sessions)
            if held >= limits.max_sessions:
                raise SessionsFull(
                    f"The backoffice holds as many sessions as it may ({limits.max_sessions}): try again when someone "
                    f"signs out, or when a session has been idle for {duration(limits.idle_timeout)}."
                )
            self._signing_in += 1
        try:
            conn = self._connect(role, password)
        except BaseException:
            with self._lock:
                self._signing_in -= 1
            raise
        token = secrets.token_urlsafe(32)
        sealed, browser, started_at = _seal(token, password), browser_of(user_agent), datetime.now(UTC)
        with self._lock:
            self._signing_in -= 1
            now = self._clock()
            session = Session(_session_id(token), role, conn, secrets.token_urlsafe(32), sealed, now, now, now, browser, started_at)
            # Counted once the password was right: nobody learns anything of a role they cannot sign in as.
            held_by_role = [s for s in self._sessions.values() if s.role == role and s is not replacing]
            gives_way = self._idlest(held_by_role, now) if len(held_by_role) >= limits.max_per_role else None
            admitted = len(held_by_role) < limits.max_per_role or gives_way is not None
            if gives_way is not None:
                del self._sessions[gives_way.id]
            if admitted:
                self._sessions[session.id] = session
        if gives_way is not None:
            self._close(gives_way, "gave_way")
        if not admitted:
            conn.close()
            raise SessionsFull(
                f'"{role}" has {limits.max_per_role} sessions open, the most one role may hold, each used in the last '
                f"{duration(limits.give_way_after)}: sign out of one in another browser (its Sessions page lists them), "
                f"or try again once one has been idle for {duration(limits.give_way_after)}."
            )
        if replacing is not None:
            self.end(replacing, "replaced")
        return session, token

    def _idlest(self, sessions: list[Session], now: float) -> Session | None:
        """Of sessions, the one idle longest if it has been idle for limits.give_way_after and
        serves no request now, else None."""
        idle = [s for s in sessions if now - s.last_seen >= self.limits.give_way_after and not s.lock.locked()]
        return min(idle, key=lambda s: s.last_seen, default=None)

    def of_role(self, role: str) -> list[tuple[Session, float]]:
        """role's sessions, each with how many seconds it has been idle, the most recently used first."""
        with self._lock:
            now = self._clock()
            held = [(s, now - s.last_seen) for s in self._sessions.values() if s.role == role]
        return sorted(held, key=lambda listed: listed[1])

    def end_others(self, session: Session, handle: str | None = None) -> int:
        """Ends the other sessions of session's role (only the one named by handle, when given),
        saying so in the log; returns how many ended. A handle of another role's session, of
        session itself or of none ends nothing."""
        with self._lock:
            # The role is what makes a session the operator's: another role's handle ends nothing.
            ended = [s for s in self._sessions.values() if s.role == session.role and s is not session and handle in (None, s.handle)]
            for other in ended:
                del self._sessions[other.id]
        for other in ended:
            self._close(other, "signed_out_elsewhere")
        return len(ended)

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
        """Ends session, saying why in the log: signed_out or replaced (signed in again). The log's
        other reasons: idle, lifetime, password_refused, gave_way (to a new sign-in of its role),
        signed_out_elsewhere (from another session's Sessions page), shutdown."""
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


def duration(seconds: float) -> str:
    """2 minutes, 30 seconds: a limit in words, in seconds when under a minute."""
    if seconds < 60:
        count, unit = round(seconds), "second"
    else:
        count, unit = max(1, round(seconds / 60)), "minute"
    return f"{count} {unit}{'s' if count != 1 else ''}"
