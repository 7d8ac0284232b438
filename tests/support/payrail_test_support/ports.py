"""Local TCP ports: for a server a test starts, or for an address where nothing answers."""

from __future__ import annotations

import socket
import socketserver
import threading
from collections.abc import Callable

# serve_forever looks whether shutdown() was asked every poll interval; its default of 0.5 s made
# every test with an in-process HTTP server wait up to half a second at its end.
SHUTDOWN_POLL_SECONDS = 0.01


def unused_port() -> int:
    """A port on 127.0.0.1 that nobody listens on now (the kernel's pick for port 0, released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def serve_in_thread(server: socketserver.BaseServer) -> Callable[[], None]:
    """Serves server's requests in a daemon thread; returns the function that stops and closes it."""
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": SHUTDOWN_POLL_SECONDS}, daemon=True).start()

    def stop() -> None:
        server.shutdown()
        server.server_close()

    return stop
