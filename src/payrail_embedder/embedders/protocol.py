"""The Embedder protocol every backend follows, its errors, and what every backend shares: the
text a record is embedded from, batches, and the check that refuses a reply unfit to store."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Protocol

import numpy as np

from ..base.errors import CodedError


class EmbeddingUnavailable(CodedError):
    """The embedding service failed or answered with something that is not a usable embedding."""

    code = "unavailable"


class EmbedderMisconfigured(EmbeddingUnavailable):
    """The embedder cannot be set up as configured (no API key, say): fix the configuration."""

    code = "misconfigured"


class Embedder(Protocol):
    """What every caller uses of a backend. A class that names Embedder as its base inherits
    for_registry_model."""

    # The model its vectors come from, as the registry names it.
    model_name: str
    # Texts one request embeds: the backend's own batch (2,048 for OpenAI, 64 locally).
    batch_size: int

    def embed(self, texts: Sequence[str]) -> list[np.ndarray]:
        """One float32 vector per text, in order; EmbeddingUnavailable when none can be made."""
        ...

    def for_registry_model(self, name: str) -> Embedder:
        """The embedder that makes vectors of the registry's model `name`: this one, unless it
        follows the registry's model (a local embedder configured with no model)."""
        return self


def made_once(make: Callable[[], Embedder]) -> Callable[[], Embedder]:
    """make, called on the first use only (a local model loads once), the same embedder after it;
    safe to share between threads."""
    lock = threading.Lock()
    made: list[Embedder] = []

    def embedder() -> Embedder:
        with lock:
            if not made:
                made.append(make())
            return made[0]

    return embedder


def record_text(provider: str, method: str, guidance: str) -> str:
    """What a record's embedding is made from: exactly the content its content hash covers."""
    return f"{provider}: {method}\n{guidance}"


def batched(items: Sequence, size: int) -> Iterator[Sequence]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def checked_vectors(vectors: Sequence, expected_count: int, model_name: str) -> list[np.ndarray]:
    """Refuses a response that cannot be stored or searched: wrong count, ragged, zero or non-finite.
    The lengths a stored vector may have are the database's rule (payrail._is_storable_vector_length):
    a save of another length is refused there, and the write path reports it as the service's failure."""
    if len(vectors) != expected_count:
        raise EmbeddingUnavailable(f"{model_name} returned {len(vectors)} embeddings for {expected_count} inputs")
    # A value beyond float32's range becomes infinity here, refused below without numpy's warning.
    with np.errstate(over="ignore"):
        arrays = [np.asarray(v, dtype=np.float32) for v in vectors]
    dimensions = {a.shape for a in arrays}
    if len(dimensions) > 1 or any(a.ndim != 1 or a.size == 0 for a in arrays):
        raise EmbeddingUnavailable(f"{model_name} returned embeddings of differing or empty shapes: {sorted(dimensions)}")
    for a in arrays:
        if not np.all(np.isfinite(a)) or not np.any(a):
            raise EmbeddingUnavailable(f"{model_name} returned a zero or non-finite embedding")
    return arrays
