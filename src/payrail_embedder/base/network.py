"""Addresses the servers listen on: which of them only this machine can reach, the names a Host
header may give for the address a server is bound to, and the open files its connections need."""

from __future__ import annotations

import ipaddress
import resource

from .errors import CodedError

# The addresses "localhost" names (/etc/hosts, RFC 6761): a Host header may say localhost to them.
LOCALHOST_ADDRESSES = frozenset({"127.0.0.1", "::1"})


def is_loopback(host: str) -> bool:
    """True for localhost and any loopback address (127.0.0.0/8, ::1): reachable from this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def host_names(bound_address: str) -> frozenset[str]:
    """The host names a request to a server bound to bound_address (as getsockname gives it) can
    carry: the address itself, an IPv6 one in brackets as URLs write it, and localhost for the
    addresses localhost names. Any other name is a page's own pointed at this address (DNS
    rebinding), or an address the server does not listen on."""
    shown = f"[{bound_address}]" if ":" in bound_address else bound_address
    return frozenset({shown, "localhost"} if bound_address in LOCALHOST_ADDRESSES else {shown})


class TooFewOpenFiles(CodedError):
    """A server's connections need more open files than this process may ever have."""

    code = "invalid_input"


def allow_open_files(needed: int, what: str) -> None:
    """Lets this process open `needed` files (sockets included): raises its soft limit
    (RLIMIT_NOFILE, often 1,024) up to the hard limit, the most an unprivileged process may set.
    A hard limit below `needed` is TooFewOpenFiles, naming `what` needs them."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        if hard != resource.RLIM_INFINITY and hard < needed:
            raise TooFewOpenFiles(
                f"{what} needs {needed:,} open files, and this process may open at most {hard:,} (its hard limit, ulimit -Hn); "
                "lower it, or raise the limit (LimitNOFILE= in a systemd unit, ulimit -n in a shell)"
            )
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
