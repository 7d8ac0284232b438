"""What every request and response of the backoffice goes through: the security headers, the Host
check of a loopback server, and the Origin check of every request that may change something.

The per-session CSRF token is the second, independent check (app.py checks it with the form).
"""

from __future__ import annotations

from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..base.network import is_loopback

# No script at all (the pages are plain forms), styles and images from the app itself, never framed.
CONTENT_SECURITY_POLICY = "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
SECURITY_HEADERS = [
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"same-origin"),
    (b"cache-control", b"no-store"),
]
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "::1"})


def allowed_hosts(bind_host: str, public_url: str | None) -> frozenset[str] | None:
    """The host names a backoffice bound to bind_host answers as: its loopback names, and the
    public URL's host behind a proxy; None (any) when it is bound beyond loopback without one."""
    if public_url:
        public_host = urlsplit(public_url).hostname
        if public_host is None:
            raise ValueError(f"{public_url!r} is not an origin: it names no host")
        return LOOPBACK_NAMES | {public_host}
    return LOOPBACK_NAMES if is_loopback(bind_host) else None


def origin_of(url: str) -> str | None:
    """scheme://host[:port] of an absolute http(s) URL, lower-cased; None for anything else ("null"),
    one without a host too (https://:8443)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    return f"{parts.scheme}://{parts.netloc}".lower()


def own_origin(scope: Scope, headers: Headers) -> str:
    # The scheme is https when a trusted reverse proxy says so (uvicorn's proxy headers).
    return f"{scope['scheme']}://{headers.get('host', '')}".lower()


def refusal(scope: Scope, headers: Headers, public_origin: str | None) -> str | None:
    """Why a request that may change something is refused before it reaches a page, or None.

    It must come from a page of this backoffice: its Origin (or, when a browser sends none, its
    Referer's) must be public_origin, or without one the origin the request was addressed to.
    """
    if scope["method"] in SAFE_METHODS:
        return None
    if "origin" in headers:
        claimed = origin_of(headers["origin"]) or headers["origin"]  # e.g. "null" from a sandboxed page
    elif "referer" in headers:
        claimed = origin_of(headers["referer"]) or "an unreadable Referer"
    else:
        return "Refused: the request says neither where it comes from (no Origin) nor which page sent it (no Referer)."
    if claimed != (public_origin or own_origin(scope, headers)):
        return f"Refused: this request comes from another site ({claimed}); nothing was changed."
    return None


class Guard:
    """ASGI middleware.

    hosts: the host names requests may be addressed to (None: any), so that a web page cannot
    reach a loopback backoffice through a name of its own (DNS rebinding). public_origin: the
    origin browsers reach the backoffice at behind a reverse proxy (its --public-url).
    """

    def __init__(self, app: ASGIApp, *, hosts: frozenset[str] | None, public_origin: str | None) -> None:
        self.app = app
        self.hosts = hosts
        self.public_origin = public_origin

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = list(message.get("headers", [])) + SECURITY_HEADERS
            await send(message)

        headers = Headers(scope=scope)
        host = urlsplit("//" + headers.get("host", "")).hostname
        if self.hosts is not None and host not in self.hosts:
            response = PlainTextResponse(f"Unknown host: this backoffice answers as {', '.join(sorted(self.hosts))} only.", 400)
        elif problem := refusal(scope, headers, self.public_origin):
            response = PlainTextResponse(problem, 403)
        else:
            await self.app(scope, receive, send_with_headers)
            return
        await response(scope, receive, send_with_headers)
