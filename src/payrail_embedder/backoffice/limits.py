"""How much of a request the backoffice reads: bodies are counted while they arrive, and one over
its route's limit is refused (413, the limit in words) before more of it is kept anywhere."""

from __future__ import annotations

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

SIGN_IN_LIMIT = 64_000  # a name and a password, from anyone
FORM_LIMIT = 1_000_000  # a record form at the most the rules allow is about 0.2 MB
# A refused body is still read to its end (and dropped) up to this much: a browser shows the
# refusal only once it has sent its request; beyond it the connection is closed.
DRAIN_LIMIT = 1_000_000_000


def in_words(size: int) -> str:
    """16 MB, 64 kB: sizes as the limits are set, in decimal units."""
    if size >= 1_000_000:
        return f"{size / 1_000_000:g} MB"
    return f"{size / 1_000:g} kB"


class BodyTooLarge(Exception):
    """A request body over its limit; drain() reads the rest of it (none when ended), keeping none."""

    def __init__(self, limit: int, receive: Receive, *, ended: bool) -> None:
        super().__init__(f"the request is larger than {in_words(limit)}")
        self.limit = limit
        self._receive = receive
        self._ended = ended

    async def drain(self) -> None:
        drained = 0
        while not self._ended and drained < DRAIN_LIMIT:
            message = await self._receive()
            drained += len(message.get("body", b""))
            self._ended = message["type"] != "http.request" or not message.get("more_body")


class BodyLimit:
    """ASGI middleware: the body of a request to /sign-in is limited to SIGN_IN_LIMIT, of an
    import upload to upload_limit, of any other to FORM_LIMIT. A declared Content-Length over it
    is refused before a byte is read; a body without one, when its count passes it."""

    def __init__(self, app: ASGIApp, *, upload_limit: int) -> None:
        self.app = app
        self.upload_limit = upload_limit

    def limit_for(self, path: str) -> int:
        if path == "/import":
            return self.upload_limit
        if path == "/sign-in":
            return SIGN_IN_LIMIT
        return FORM_LIMIT

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limit_for(scope["path"])
        declared = Headers(scope=scope).get("content-length", "")
        received = 0

        async def counted_receive() -> Message:
            nonlocal received
            if declared.isdigit() and int(declared) > limit:
                raise BodyTooLarge(limit, receive, ended=False)
            message = await receive()
            received += len(message.get("body", b""))
            if received > limit:
                raise BodyTooLarge(limit, receive, ended=not message.get("more_body"))
            return message

        await self.app(scope, counted_receive, send)
