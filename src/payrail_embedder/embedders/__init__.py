"""Embedding backends, what turns records and queries into vectors: make_embedder picks one.

Each module here imports only those listed before it: protocol.py (the Embedder protocol, its
errors, the record's text), http.py (an embedding service over HTTP: a deadline, bounded replies, no
redirects), openai.py (the OpenAI backend), local_model.py (a local model on ONNX
Runtime), tuned_models.py (the models `model tune` makes), local.py (the local backend).
"""

from __future__ import annotations

from pathlib import Path

from .local import LOCAL_RUNTIMES, LocalEmbedder
from .local_model import LOCAL_DEFAULT_MODEL
from .openai import OPENAI_DEFAULT_MODEL, OPENAI_MAX_BATCH, OpenAIEmbedder
from .protocol import Embedder, EmbeddingUnavailable, batched, checked_vectors, made_once, record_text

__all__ = [
    "BACKENDS",
    "LOCAL_DEFAULT_MODEL",
    "LOCAL_RUNTIMES",
    "OPENAI_MAX_BATCH",
    "Embedder",
    "EmbeddingUnavailable",
    "LocalEmbedder",
    "OpenAIEmbedder",
    "batched",
    "checked_vectors",
    "made_once",
    "make_embedder",
    "record_text",
]

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
