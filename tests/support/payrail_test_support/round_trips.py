"""Counts a client's round trips to PostgreSQL: a real TCP proxy in front of a test server's unix
socket (or a pooler's TCP port) that reads what clients send, message by message (PostgreSQL's
wire protocol).

A round trip is a message after which the client waits for the server: a simple Query ('Q'), or
a Sync ('S'), which ends each extended-protocol statement (Parse/Bind/Describe/Execute, or just
Bind/Execute for a prepared one). The connection's start (SSL request, startup, password) is not
counted: reset() after the clients have connected, then count what one search sends.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import parse_qs, quote, urlsplit

# The 4-byte codes of the untyped requests a client may send before its startup message.
_SSL_REQUEST, _GSSENC_REQUEST = 80877103, 80877104
_WAITS_FOR_SERVER = {b"Q", b"S"}


class RoundTripCounter:
    """Listens on 127.0.0.1 and passes each connection on to the server's unix socket."""

    def __init__(self, server_url: str) -> None:
        parts = urlsplit(server_url)
        host = parse_qs(parts.query).get("host", [parts.hostname or ""])[0]
        self._server_address: str | tuple[str, int] = str(Path(host) / f".s.PGSQL.{parts.port or 5432}") if host.startswith("/") else (host, parts.port or 5432)
        self._login = parts.netloc.rpartition("@")[0]
        self._database = parts.path.lstrip("/")
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._count = 0
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def url(self) -> str:
        """server_url's login and database, through the proxy."""
        return f"postgresql://{self._login}@127.0.0.1:{self.port}/{quote(self._database)}?sslmode=disable"

    @property
    def count(self) -> int:
        with self._lock:
            return self._count

    def reset(self) -> None:
        with self._lock:
            self._count = 0

    @contextmanager
    def counting(self) -> Iterator[list[int]]:
        """Round trips sent inside the block: the list holds one number once the block ends."""
        self.reset()
        counted: list[int] = []
        yield counted
        counted.append(self.count)

    def close(self) -> None:
        self._listener.close()
        for each in self._sockets:
            each.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if isinstance(self._server_address, str):
                server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                server.connect(self._server_address)
            else:
                server = socket.create_connection(self._server_address)
            self._sockets += [client, server]
            threading.Thread(target=self._client_to_server, args=(client, server), daemon=True).start()
            threading.Thread(target=_pipe, args=(server, client), daemon=True).start()

    def _client_to_server(self, client: socket.socket, server: socket.socket) -> None:
        reader = _Reader(client)
        with contextlib.suppress(ConnectionError, OSError, EOFError):  # either side ended
            # Untyped: any SSL or GSS requests (the server answers 'N'), then the startup message.
            while True:
                length = struct.unpack("!I", reader.read(4))[0]
                body = reader.read(length - 4)
                server.sendall(struct.pack("!I", length) + body)
                if struct.unpack("!I", body[:4])[0] not in (_SSL_REQUEST, _GSSENC_REQUEST):
                    break
            while True:
                kind = reader.read(1)
                length = struct.unpack("!I", reader.read(4))[0]
                body = reader.read(length - 4)
                if kind in _WAITS_FOR_SERVER:
                    with self._lock:
                        self._count += 1
                server.sendall(kind + struct.pack("!I", length) + body)
        _end_both(client, server)


class _Reader:
    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._buffer = b""

    def read(self, size: int) -> bytes:
        while len(self._buffer) < size:
            chunk = self._sock.recv(65536)
            if not chunk:
                raise EOFError
            self._buffer += chunk
        data, self._buffer = self._buffer[:size], self._buffer[size:]
        return data


def _pipe(source: socket.socket, target: socket.socket) -> None:
    with contextlib.suppress(OSError):  # either side closed: the other follows
        while chunk := source.recv(65536):
            target.sendall(chunk)
    _end_both(source, target)


def _end_both(*sockets: socket.socket) -> None:
    """Ends both sides of a proxied connection at once. shutdown() first: close() alone, while the
    other direction's thread waits in recv() on the same socket, sends no FIN, and a client told
    of the server's end (a terminated backend's FATAL) would wait for the socket's end forever."""
    for each in sockets:
        with contextlib.suppress(OSError):
            each.shutdown(socket.SHUT_RDWR)
        each.close()
