"""Addresses the servers listen on: which of them only this machine can reach."""

from __future__ import annotations

import ipaddress


def is_loopback(host: str) -> bool:
    """True for localhost and any loopback address (127.0.0.0/8, ::1): reachable from this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
