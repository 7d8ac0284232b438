"""The door of the package's HTTP servers: uvicorn's HTTP/1.1 protocol with the bounds it lacks.

uvicorn bounds the size of a request's head (h11), idle keep-alive (timeout_keep_alive) and the
requests served at once (limit_concurrency, judged only once a request's head has come), but not
how long a client may take to send that head, nor how many connections it may hold meanwhile: a
connection that never finishes its headers is kept for ever, and past the process's limit of open
files every accept fails and asyncio logs a traceback for it. A Door adds:

- a cap on open connections: past it, a new connection takes the place of the one that has waited
  longest for a request (a half-sent head, or an idle keep-alive), which is closed; when every
  connection is in a request, the newcomer is answered 503 and closed. Clients that hold
  connections without asking anything can never keep one that asks out.
- a deadline for a request's head, HEAD_TIMEOUT seconds from the connection's start or its last
  answer, however slowly the bytes come (uvicorn's keep-alive timer starts again at each byte);
- a tally of what it refused or closed (and what the servers' own gates refuse, through
  Door.count): one log line at the first, then one a minute at most while it goes on, however many.

Its connections need open files: Door.open_files says how many, base.network.allow_open_files
makes sure the process may have them.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter, OrderedDict
from typing import Any

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from .logs import log

# Seconds a client has for a request line and its headers: a person's slow link sends a few KB in far less.
HEAD_TIMEOUT = 10
# Seconds an idle kept-alive connection stays open between requests (uvicorn's timeout_keep_alive).
KEEP_ALIVE_TIMEOUT = 5
# Connections the kernel queues before they are accepted, and accepts at one time (asyncio accepts up
# to this many in a row, each an open file before the Door sees it).
BACKLOG = 256
# Open files a server needs beside its connections: database and embedding connections, the
# listening socket, the event loop's, log and model files.
OTHER_OPEN_FILES = 256
# How often, at most, the tally of refusals is logged while they go on.
TALLY_SECONDS = 60


def http_response(status: int, reason: str, content_type: str, content: bytes) -> bytes:
    """A whole HTTP/1.1 response that closes its connection: for a client the application never sees."""
    head = f"HTTP/1.1 {status} {reason}\r\ncontent-type: {content_type}\r\ncontent-length: {len(content)}\r\nconnection: close\r\n\r\n"
    return head.encode("ascii") + content


class Door:
    """What one server's connections share: the cap, those that wait for a request (longest first),
    and the tally of refusals. busy_response: what a connection past the cap is answered when
    none waits; bad_request_response: what a request h11 cannot read is answered, instead of
    uvicorn's plain text (whole responses, see http_response)."""

    def __init__(self, max_connections: int, busy_response: bytes, bad_request_response: bytes | None = None) -> None:
        self.max_connections = max_connections
        self.busy_response = busy_response
        self.bad_request_response = bad_request_response
        self.open: set[BoundedH11Protocol] = set()
        self.waiting: OrderedDict[BoundedH11Protocol, None] = OrderedDict()
        self.refusals: Counter[str] = Counter()
        self._tally: asyncio.TimerHandle | None = None

    @property
    def open_files(self) -> int:
        """The open files the server may need: its connections, those being accepted, and the rest."""
        return self.max_connections + BACKLOG + OTHER_OPEN_FILES

    def config(self, app: Any, **settings: Any) -> uvicorn.Config:
        """uvicorn's configuration of a server behind this door: its protocol, keep-alive, no
        WebSocket (an upgrade is answered as plain HTTP), the log through the package's handler."""
        protocol = type("BoundedH11Protocol", (BoundedH11Protocol,), {"door": self})
        return uvicorn.Config(app, http=protocol, ws="none", backlog=BACKLOG, timeout_keep_alive=KEEP_ALIVE_TIMEOUT, log_config=None, **settings)

    def count(self, refusal: str) -> None:
        """One refusal of this kind: logged at once when none was in the last TALLY_SECONDS, else
        counted and logged with the others of its window when it ends."""
        if self._tally is None:
            log("http_refused", logging.WARNING, **{refusal: 1})
            self._tally = asyncio.get_running_loop().call_later(TALLY_SECONDS, self._log_tally)
        else:
            self.refusals[refusal] += 1

    def _log_tally(self) -> None:
        counted, self.refusals = self.refusals, Counter()
        if counted:
            log("http_refused", logging.WARNING, seconds=TALLY_SECONDS, **counted)
            self._tally = asyncio.get_running_loop().call_later(TALLY_SECONDS, self._log_tally)
        else:
            self._tally = None

    def make_room(self) -> bool:
        """Closes the connection that has waited longest for a request; False when none waits."""
        if not self.waiting:
            return False
        oldest = next(iter(self.waiting))
        self.count("displaced")
        oldest.close()
        return True


class BoundedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol behind a Door (set on the subclass Door.config makes)."""

    door: Door
    _head_deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)  # a TCP connection's
        door = self.door
        if len(door.open) >= door.max_connections and not door.make_room():
            self.transport = transport  # uvicorn's connection_lost closes it again
            door.count("over_capacity")
            transport.write(door.busy_response)
            transport.close()
            return
        door.open.add(self)
        super().connection_made(transport)
        self._wait_for_request()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_waiting()
        self.door.open.discard(self)
        super().connection_lost(exc)

    def handle_events(self) -> None:
        cycle = self.cycle
        super().handle_events()
        if self.cycle is not cycle:  # a request's head came in
            self._stop_waiting()

    def on_response_complete(self) -> None:
        super().on_response_complete()  # may start a pipelined request (handle_events)
        if not self.transport.is_closing() and self.cycle.response_complete:
            self._wait_for_request()

    def send_400_response(self, msg: str) -> None:
        """A request h11 cannot read (uvicorn has logged msg): the door's answer, and the connection closed."""
        if self.door.bad_request_response is None:
            return super().send_400_response(msg)
        self.transport.write(self.door.bad_request_response)
        self.transport.close()
        return None

    def close(self) -> None:
        """Closes the connection now, and stops counting it."""
        self._stop_waiting()
        self.door.open.discard(self)
        self.transport.close()

    def _wait_for_request(self) -> None:
        self.door.waiting[self] = None
        self._head_deadline = self.loop.call_later(HEAD_TIMEOUT, self._head_too_slow)

    def _stop_waiting(self) -> None:
        self.door.waiting.pop(self, None)
        if self._head_deadline is not None:
            self._head_deadline.cancel()
            self._head_deadline = None

    def _head_too_slow(self) -> None:
        self._head_deadline = None
        self.door.count("head_too_slow")
        self.close()
