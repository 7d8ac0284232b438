"""A local OpenAI-compatible embeddings server over real HTTP, for the openai backend's tests.

Its embeddings are deterministic bags of words: each lower-cased word adds 1 to a dimension
picked by its SHA-256, and the sum is scaled to unit length. Texts that share words are close
in cosine distance, so tests can compute the expected order themselves with `fake_embedding`.
`behaviour` switches it to the failures the backend must survive.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np

from payrail_test_support.ports import serve_in_thread

FAKE_MODEL = "fake-embedding-1"
FAKE_DIMENSIONS = 64


def fake_embedding(text: str, dimensions: int = FAKE_DIMENSIONS) -> np.ndarray:
    vector = np.zeros(dimensions, dtype=np.float32)
    for word in re.findall(r"[a-z0-9]+", text.lower()):
        vector[int.from_bytes(hashlib.sha256(word.encode()).digest()[:4], "big") % dimensions] += 1.0
    if not vector.any():
        vector[0] = 1.0
    return vector / np.linalg.norm(vector)


def random_embedding(text: str, dimensions: int = FAKE_DIMENSIONS) -> np.ndarray:
    """A random unit vector seeded by the text: unrelated texts get unrelated directions, as a real
    model's do, so benchmarks search vectors spread like real ones (fake_embedding's bags of the
    same words would be near-copies)."""
    seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")
    vector = np.random.default_rng(seed).standard_normal(dimensions, dtype=np.float32)
    return vector / np.linalg.norm(vector)


# The error message "echo_secrets" answers with a 401 (the openai client quotes an error's message
# as it is): the request's Authorization header, terminal controls (a title set by OSC, BEL, the
# screen cleared, C1's CSI) and line breaks that would forge a log line and an error line.
HOSTILE_MESSAGE = (
    "upstream refused {authorization}\x1b]0;owned\x07\x1b[2J\x9b31m"
    "\nts=2020-01-01T00:00:00.000Z level=info event=sign_in role=admin outcome=success"
    "\r\nError: none\u2028\u202e"
)

# A reply nested this deep: Python's json recurses once per level, so it raised RecursionError.
DEEP_NESTING = 100_000
# What "huge" sends at most: far more than any embeddings reply may be (embedders/http.py).
HUGE_REPLY_BYTES = 256 * 1024 * 1024

# Replies of a service that lies (each a whole, well-formed HTTP reply to an embeddings request),
# by behaviour: the embedder must refuse every one as the service's failure.
LYING = ("deep", "nan", "infinity", "strings", "too_few", "too_many", "repeated_index", "index_out_of_range", "nested_vector", "no_data", "gzip")


@dataclass
class FakeOpenAI:
    """behaviour: "ok", "429", "500", "hang", "wrong_dimensions", "malformed"; and what an attacker's
    service does: "echo_secrets" (a 401 whose message is HOSTILE_MESSAGE), "trickle" (the whole reply, status line included, one byte every
    trickle_seconds), "huge" (a reply that never ends, up to HUGE_REPLY_BYTES), "huge_declared"
    (a Content-Length of 10 GB), "redirect" (307 to redirect_to, another server), "retry_after"
    (429 asking to retry after retry_after_seconds), and every one of LYING.
    """

    behaviour: str = "ok"
    dimensions: int = FAKE_DIMENSIONS
    # How a text becomes a vector: fake_embedding (tests compute the order) or random_embedding (benchmarks).
    embedding: Callable[[str, int], np.ndarray] = fake_embedding
    # Multiplies every vector it answers: a service answering vectors of extreme length.
    scale: float = 1.0
    hang_seconds: float = 30.0
    trickle_seconds: float = 0.05
    retry_after_seconds: str = "60"
    # Where "redirect" sends the client: another server's URL (a second FakeOpenAI's base_url).
    redirect_to: str = ""
    requests: list[dict] = field(default_factory=list)
    # Requests the fake is hanging on (or trickling, or sending "huge" to) right now: a client that
    # returned while this is not 0 gave up on its own (its deadline), not because the fake answered.
    hanging: int = 0
    # The bytes of the last "huge" reply the client took before it hung up.
    huge_bytes_sent: int = 0
    _server: ThreadingHTTPServer | None = None
    _stop: Callable[[], None] | None = None
    # Set by recover(): the requests "hang" holds end at once.
    _recovered: threading.Event = field(default_factory=threading.Event)

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    @property
    def embedded_inputs(self) -> int:
        return sum(len(r["input"]) for r in self.requests)

    def recover(self) -> None:
        """The service comes back, for good: the requests it hangs on end now, without a reply (a
        client retries them within its deadline), and every request after answers."""
        self.behaviour = "ok"
        self._recovered.set()

    def start(self) -> FakeOpenAI:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep pytest output clean
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fake.requests.append(body)
                if fake.behaviour in ("hang", "trickle", "huge"):
                    fake.hanging += 1
                    try:
                        self._stall(body)
                    finally:
                        fake.hanging -= 1
                    return
                if fake.behaviour in LYING:
                    self._lie(body)
                    return
                if fake.behaviour == "huge_declared":
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(10 * 1024**3))
                    self.end_headers()
                    self.wfile.write(b'{"data": [')
                    return
                if fake.behaviour == "redirect":
                    self.send_response(307)
                    self.send_header("Location", fake.redirect_to + "/embeddings")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if fake.behaviour == "retry_after":
                    self.send_response(429)
                    self.send_header("Retry-After", fake.retry_after_seconds)
                    raw = b'{"error": {"message": "fake rate limit", "type": "fake"}}'
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(raw)))
                    self.end_headers()
                    self.wfile.write(raw)
                    return
                if fake.behaviour in ("429", "500"):
                    self._send(int(fake.behaviour), {"error": {"message": f"fake {fake.behaviour}", "type": "fake"}})
                    return
                if fake.behaviour == "malformed":
                    self._send_raw(200, b'{"data": [{"embedding": ')
                    return
                if fake.behaviour == "echo_secrets":
                    message = HOSTILE_MESSAGE.format(authorization=self.headers.get("Authorization", ""))
                    self._send(401, {"error": {"message": message, "type": "invalid_request_error"}})
                    return
                self._send(200, self._reply(body, base64_asked=body.get("encoding_format") == "base64"))

            def _reply(self, body: dict, *, base64_asked: bool) -> dict:
                inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
                # Asked for shorter vectors, it answers them, as OpenAI's text-embedding-3 models do.
                dimensions = body.get("dimensions", fake.dimensions) + (1 if fake.behaviour == "wrong_dimensions" else 0)
                data = []
                for index, text in enumerate(inputs):
                    vector = fake.embedding(text, dimensions) * fake.scale
                    embedding = base64.b64encode(vector.astype("<f4").tobytes()).decode() if base64_asked else vector.tolist()
                    data.append({"object": "embedding", "index": index, "embedding": embedding})
                return {"object": "list", "data": data, "model": body["model"], "usage": {"prompt_tokens": 0, "total_tokens": 0}}

            def _stall(self, body: dict):
                """hang, trickle or huge: a reply the client must give up on."""
                if fake.behaviour == "hang":
                    fake._recovered.wait(fake.hang_seconds)
                    return
                try:
                    if fake.behaviour == "trickle":
                        raw = json.dumps(self._reply(body, base64_asked=True)).encode()
                        head = f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(raw)}\r\n\r\n"
                        for byte in head.encode() + raw:
                            self.wfile.write(bytes([byte]))
                            self.wfile.flush()
                            time.sleep(fake.trickle_seconds)
                        return
                    fake.huge_bytes_sent = 0
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.end_headers()  # no length: the reply ends when the connection does
                    self.wfile.write(b'{"data": [{"object": "embedding", "index": 0, "embedding": [')
                    chunk = b"0.5, " * 13_107  # 64 KiB
                    while fake.huge_bytes_sent < HUGE_REPLY_BYTES:
                        self.wfile.write(chunk)
                        fake.huge_bytes_sent += len(chunk)
                except OSError:  # the client hung up, as it must
                    pass
                self.close_connection = True

            def _lie(self, body: dict):
                """A well-formed HTTP reply whose content is not the embeddings asked for."""
                reply = self._reply(body, base64_asked=False)
                data, first = reply["data"], reply["data"][0]
                lie = fake.behaviour
                if lie == "deep":
                    self._send_raw(200, b"[" * DEEP_NESTING + b"]" * DEEP_NESTING)
                    return
                if lie == "gzip":
                    raw = gzip.compress(json.dumps(reply).encode())
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Encoding", "gzip")
                    self.send_header("Content-Length", str(len(raw)))
                    self.end_headers()
                    self.wfile.write(raw)
                    return
                if lie in ("nan", "infinity"):  # json.dumps writes them as JavaScript's NaN and Infinity
                    first["embedding"][0] = float(lie)
                elif lie == "strings":
                    first["embedding"] = [str(value) for value in first["embedding"]]
                elif lie == "too_few":
                    data.pop()
                elif lie == "too_many":
                    data.append(dict(first, index=len(data)))
                elif lie == "repeated_index":
                    for item in data:
                        item["index"] = 0
                elif lie == "index_out_of_range":
                    first["index"] = len(data)
                elif lie == "nested_vector":
                    first["embedding"] = [first["embedding"]]
                elif lie == "no_data":
                    reply["data"] = {"0": first}
                self._send(200, reply)

            def _send(self, status: int, payload: dict):
                self._send_raw(status, json.dumps(payload).encode())

            def _send_raw(self, status: int, raw: bytes):
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._stop = serve_in_thread(self._server)
        return self

    def stop(self) -> None:
        self._stop()


class SwitchAt(list):
    """Stands in for FakeOpenAI.requests (empty: it counts from when a test puts it in place): from
    the n-th request on, the fake behaves as told.

    The fake appends each request before it looks at its behaviour, so the switch is exact; it
    happens once, so a test may set the behaviour back later.
    """

    def __init__(self, fake, n: int, behaviour: str):
        super().__init__()
        self.fake, self.n, self.behaviour = fake, n, behaviour

    def append(self, item):
        super().append(item)
        if len(self) == self.n:
            self.fake.behaviour = self.behaviour
