"""A local OpenAI-compatible embeddings server over real HTTP, for the openai backend's tests.

Its embeddings are deterministic bags of words: each lower-cased word adds 1 to a dimension
picked by its SHA-256, and the sum is scaled to unit length. Texts that share words are close
in cosine distance, so tests can compute the expected order themselves with `fake_embedding`.
`behaviour` switches it to the failures the backend must survive.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
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


@dataclass
class FakeOpenAI:
    """behaviour: "ok", "429", "500", "hang", "wrong_dimensions", "malformed", "echo_secrets"."""

    behaviour: str = "ok"
    dimensions: int = FAKE_DIMENSIONS
    # How a text becomes a vector: fake_embedding (tests compute the order) or random_embedding (benchmarks).
    embedding: Callable[[str, int], np.ndarray] = fake_embedding
    # Multiplies every vector it answers: a service answering vectors of extreme length.
    scale: float = 1.0
    hang_seconds: float = 30.0
    requests: list[dict] = field(default_factory=list)
    # Requests the fake is hanging on right now: a client that returned while this is not 0 gave up
    # on its own (its timeout), not because the fake answered.
    hanging: int = 0
    _server: ThreadingHTTPServer | None = None
    _stop: Callable[[], None] | None = None

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    @property
    def embedded_inputs(self) -> int:
        return sum(len(r["input"]) for r in self.requests)

    def start(self) -> FakeOpenAI:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep pytest output clean
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fake.requests.append(body)
                if fake.behaviour == "hang":
                    fake.hanging += 1
                    time.sleep(fake.hang_seconds)
                    fake.hanging -= 1
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
                inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
                # Asked for shorter vectors, it answers them, as OpenAI's text-embedding-3 models do.
                dimensions = body.get("dimensions", fake.dimensions) + (1 if fake.behaviour == "wrong_dimensions" else 0)
                data = []
                for index, text in enumerate(inputs):
                    vector = fake.embedding(text, dimensions) * fake.scale
                    if body.get("encoding_format") == "base64":
                        embedding = base64.b64encode(vector.astype("<f4").tobytes()).decode()
                    else:
                        embedding = vector.tolist()
                    data.append({"object": "embedding", "index": index, "embedding": embedding})
                self._send(
                    200,
                    {
                        "object": "list",
                        "data": data,
                        "model": body["model"],
                        "usage": {"prompt_tokens": 0, "total_tokens": 0},
                    },
                )

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
