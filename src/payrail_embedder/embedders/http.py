"""Talking to an embedding service over HTTP as to a service that may fail, lie or attack: a
deadline for the whole request, replies read within limits, no redirects.

- The deadline (PAYRAIL_EMBEDDING_TIMEOUT) covers everything from the first attempt to the last
  byte of the reply: connecting (DNS and TLS included), every retry and its wait, a reply that
  trickles in a byte at a time. Requests run as asyncio tasks on one event loop thread of the
  process (run()), where cancelling at the deadline interrupts whatever phase they are in; a
  blocking socket's timeouts bound each read, not their sum.
- A reply is read through BoundedTransport, which refuses it, while it arrives, once it is longer
  than the request's limit (ReplyLimit: from the number of texts and the dimensions; far above a
  real reply) or nests JSON deeper than MAX_JSON_DEPTH (Python's json would recurse until
  RecursionError), and which refuses a redirect instead of following it: the query text is the
  agent's, sent to the configured service only. It asks for no compression (Accept-Encoding:
  identity) and refuses a compressed reply, so the bytes counted are the bytes parsed.
"""

from __future__ import annotations

import asyncio
import contextvars
import re
import threading
from collections.abc import AsyncIterator, Coroutine
from typing import TypeVar

import httpx2

T = TypeVar("T")

# A real reply nests 4 deep ({"data": [{"embedding": [...]}]}); errors' bodies 2 or 3.
MAX_JSON_DEPTH = 16
# Room for one number of a JSON array: a float32 at its longest, "-1.2345678918063641e-05, ", is 25
# characters, and a server that indents its JSON puts each on a line of its own.
BYTES_PER_VALUE = 40
# Each embedding's object around its numbers ("object", "index", the key), generously.
BYTES_PER_EMBEDDING = 1024
# The rest of a reply: "model", "usage", an error's message.
BYTES_PER_REPLY = 1024 * 1024


def reply_limit(texts: int, dimensions: int) -> int:
    """The most bytes a reply to `texts` texts of `dimensions` dimensions may take: every number
    written out at its longest as JSON (a base64 reply, OpenAI's own, is under a fifth of it)."""
    return texts * (dimensions * BYTES_PER_VALUE + BYTES_PER_EMBEDDING) + BYTES_PER_REPLY


# The limit of the request being sent, set by the task that sends it (BoundedTransport reads it).
ReplyLimit: contextvars.ContextVar[int] = contextvars.ContextVar("ReplyLimit")

_STRUCTURE = re.compile(rb'[\[\]{}"\\]')
_OPEN, _CLOSE, _QUOTE, _BACKSLASH = frozenset(b"[{"), frozenset(b"]}"), ord('"'), ord("\\")


class ReplyRefused(Exception):
    """The service's reply breaks a limit; nothing of it is used. Raised inside the HTTP client
    (which passes it through as it is), reported by the embedder as the service's failure."""


class _JsonDepth:
    """How deep the JSON read so far nests, fed a chunk at a time; raises ReplyRefused past MAX_JSON_DEPTH.

    Only brackets outside strings count; a string's escaped quote does not end it, also when the
    escape is the last byte of a chunk.
    """

    def __init__(self) -> None:
        self.depth = 0
        self._in_string = False
        self._escaped = False

    def feed(self, chunk: bytes) -> None:
        escaped_at = 0 if self._escaped else -1
        self._escaped = False
        for match in _STRUCTURE.finditer(chunk):
            at = match.start()
            if at == escaped_at:
                continue
            byte = chunk[at]
            if self._in_string:
                if byte == _BACKSLASH:
                    escaped_at = at + 1
                    self._escaped = escaped_at == len(chunk)
                elif byte == _QUOTE:
                    self._in_string = False
            elif byte == _QUOTE:
                self._in_string = True
            elif byte in _OPEN:
                self.depth += 1
                if self.depth > MAX_JSON_DEPTH:
                    raise ReplyRefused(f"the embedding service's reply nests deeper than {MAX_JSON_DEPTH} levels; refused")
            elif byte in _CLOSE:
                self.depth -= 1


class _BoundedBody(httpx2.AsyncByteStream):
    """A reply's body, refused once longer than `limit` bytes or nested too deep."""

    def __init__(self, body: httpx2.AsyncByteStream, limit: int) -> None:
        self._body = body
        self._limit = limit

    async def __aiter__(self) -> AsyncIterator[bytes]:
        received = 0
        depth = _JsonDepth()
        async for chunk in self._body:
            received += len(chunk)
            if received > self._limit:
                raise ReplyRefused(f"the embedding service's reply is longer than {self._limit:,} bytes, the most this request can need; refused")
            depth.feed(chunk)
            yield chunk

    async def aclose(self) -> None:
        await self._body.aclose()


class BoundedTransport(httpx2.AsyncBaseTransport):
    """httpx2's own transport, with every reply read within ReplyLimit and no redirect taken."""

    def __init__(self) -> None:
        self._transport = httpx2.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        limit = ReplyLimit.get()
        response = await self._transport.handle_async_request(request)
        try:
            refusal = _refusal(response, limit)
        except BaseException:
            await response.aclose()
            raise
        if refusal is not None:
            await response.aclose()
            raise ReplyRefused(refusal)
        # An async transport's reply streams asynchronously (httpx2 asserts the same when it reads one).
        assert isinstance(response.stream, httpx2.AsyncByteStream)
        return httpx2.Response(
            status_code=response.status_code,
            headers=response.headers,
            stream=_BoundedBody(response.stream, limit),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self._transport.aclose()


def _refusal(response: httpx2.Response, limit: int) -> str | None:
    """Why a reply is refused from its head alone, or None."""
    if response.is_redirect:
        # The Location is not repeated: it is the service's text, and the query never goes there.
        return (
            f"the embedding service answered HTTP {response.status_code}, a redirect to another address, "
            "which is not followed (the query is sent to OPENAI_BASE_URL only): set OPENAI_BASE_URL to the address it serves"
        )
    encoding = response.headers.get("content-encoding", "identity").strip().lower()
    if encoding not in ("", "identity"):
        return f"the embedding service's reply is compressed ({encoding[:40]}), which was not asked for; refused"
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        return f"the embedding service's reply is {int(declared):,} bytes long, more than the {limit:,} this request can need; refused"
    return None


def bounded_client(timeout: float) -> httpx2.AsyncClient:
    """An HTTP client for an embedding service: BoundedTransport, no redirects, no compression.
    Each phase's own timeout is the whole deadline; run()'s deadline is the one that binds."""
    return httpx2.AsyncClient(transport=BoundedTransport(), follow_redirects=False, timeout=timeout, headers={"Accept-Encoding": "identity"})


_loop: asyncio.AbstractEventLoop | None = None
_loop_lock = threading.Lock()


def _event_loop() -> asyncio.AbstractEventLoop:
    """The process's one event loop for embedding requests, on a daemon thread started on first use."""
    global _loop
    with _loop_lock:
        if _loop is None:
            _loop = asyncio.new_event_loop()
            threading.Thread(target=_loop.run_forever, name="payrail-embedding-requests", daemon=True).start()
        return _loop


def run(request: Coroutine[object, object, T]) -> T:
    """Runs request on the embedding requests' event loop and waits for its outcome (any thread may)."""
    return asyncio.run_coroutine_threadsafe(request, _event_loop()).result()
