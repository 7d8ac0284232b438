"""Local TCP ports: for a server a test starts, or for an address where nothing answers."""

from __future__ import annotations

import socket


def unused_port() -> int:
    """A port on 127.0.0.1 that nobody listens on now (the kernel's pick for port 0, released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
