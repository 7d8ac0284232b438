"""What every request and response of the backoffice goes through: the security headers, the Host
check of a loopback server, and the Origin check of every request that may change something.

The per-session CSRF token is the second, independent check (app.py checks it with the form).
"""

from __future__ import annotations

from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

# No script at all (the pages are plain forms), styles and images from the app itself, never framed.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'"
)
SECURITY_HEADERS = [
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"same-origin"),
    (b"cache-control", b"no-store"),
]
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "::1"})


def origin_of(url: str) -> str | None:
    """scheme://host[:port] of an absolute http(s) URL, lower-cased; None for anything else ("null")."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return None
    return f"{parts.scheme}://{parts.netloc}".lower()


def own_origin(scope: Scope, headers: Headers) -> str:
    # The scheme is https when a trusted reverse proxy says so (uvicorn's proxy headers).
    return f"{scope['scheme']}://{headers.get('host', '')}".lower()


def refusal(scope: Scope, headers: Headers) -> str | None:
    """Why the request is refused before it reaches a page, or None."""
    if scope["method"] in SAFE_METHODS:
        return None
    if "origin" in headers:
        claimed = origin_of(headers["origin"]) or headers["origin"]  # e.g. "null" from a sandboxed page
    elif "referer" in headers:
        claimed = origin_of(headers["referer"]) or "an unreadable Referer"
    else:
        return "Refused: the request says neither where it comes from (no Origin) nor which page sent it (no Referer)."
    if claimed != own_origin(scope, headers):
        return f"Refused: this request comes from another site ({claimed}); nothing was changed."
    return None


class Guard:
    """ASGI middleware. loopback_only: answer only requests addressed to a loopback name, so a
    web page cannot reach a loopback backoffice through a name of its own (DNS rebinding)."""

    def __init__(self, app: ASGIApp, *, loopback_only: bool) -> None:
        self.app = app
        self.loopback_only = loopback_only

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = list(message.get("headers", [])) + SECURITY_HEADERS
            await send(message)

        headers = Headers(scope=scope)
        if self.loopback_only and urlsplit("//" + headers.get("host", "")).hostname not in LOOPBACK_NAMES:
            response = PlainTextResponse("Unknown host: this backoffice answers on its loopback address only.", 400)
        elif problem := refusal(scope, headers):
            response = PlainTextResponse(problem, 403)
        else:
            await self.app(scope, receive, send_with_headers)
            return
        await response(scope, receive, send_with_headers)
