"""The OpenAI backend: the OpenAI embeddings API, or any server that speaks it (OPENAI_BASE_URL)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .protocol import EmbedderMisconfigured, EmbeddingUnavailable, batched, checked_vectors

OPENAI_DEFAULT_MODEL = "text-embedding-3-small"
# The dimensions of OpenAI's own models' vectors: a reply of others is refused, unless the
# embedder asked for them (the text-embedding-3 models shorten theirs on request). Other
# models, on OpenAI-compatible servers, are taken at whatever dimensions they answer.
OPENAI_MODEL_DIMENSIONS = {"text-embedding-3-small": 1536, "text-embedding-3-large": 3072, "text-embedding-ada-002": 1536}
# The OpenAI embeddings endpoint takes at most 2,048 inputs per request.
OPENAI_MAX_BATCH = 2048


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
