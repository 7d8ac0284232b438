"""The OpenAI backend: the OpenAI embeddings API, or any server that speaks it (OPENAI_BASE_URL).

Requests go through http.py: one deadline for each request, retries and their waits included, the
reply read within limits, no redirects. The official client's own retries are off (max_retries=0)
since they wait past any deadline (a Retry-After of up to a minute, then another full timeout);
OpenAIEmbedder retries within the deadline itself.
"""

from __future__ import annotations

import asyncio
import email.utils
import math
import random
import time
from collections.abc import Sequence

import numpy as np

from .protocol import Embedder, EmbedderMisconfigured, EmbeddingUnavailable, batched, checked_vectors

OPENAI_DEFAULT_MODEL = "text-embedding-3-small"
# The dimensions of OpenAI's own models' vectors: a reply of others is refused, unless the
# embedder asked for them (the text-embedding-3 models shorten theirs on request). Other
# models, on OpenAI-compatible servers, are taken at whatever dimensions they answer.
OPENAI_MODEL_DIMENSIONS = {"text-embedding-3-small": 1536, "text-embedding-3-large": 3072, "text-embedding-ada-002": 1536}
# The OpenAI embeddings endpoint takes at most 2,048 inputs per request.
OPENAI_MAX_BATCH = 2048
# pgvector's vector holds at most 16,000 dimensions: a reply's limit for a model of unknown dimensions.
MAX_DIMENSIONS = 16000
# What is retried, as OpenAI's client does: connection failures, 408, 409, 429 and every 5xx;
# after a wait of Retry-After (Retry-After-Ms) when the service names one, else 0.5 s, doubling to
# at most 8 s, less up to a quarter at random. A wait that would end past the deadline is not begun.
RETRIED_STATUSES = frozenset({408, 409, 429})
FIRST_BACKOFF_SECONDS = 0.5
MAX_BACKOFF_SECONDS = 8.0


class OpenAIEmbedder(Embedder):
    """The OpenAI embeddings API, or any server that speaks it (OPENAI_BASE_URL).

    timeout: seconds for one request (a batch of up to batch_size texts), from the first attempt to
    the last byte of the reply, max_retries retries included.
    """

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

        from . import http  # with the openai client: imported by the first embedder, not by every command

        self.model_name = model_name
        self.dimensions = dimensions
        self.expected_dimensions = dimensions or OPENAI_MODEL_DIMENSIONS.get(model_name)
        self.batch_size = min(batch_size, OPENAI_MAX_BATCH)
        self.timeout = timeout
        self.max_retries = max_retries
        try:
            self._client = openai.AsyncOpenAI(api_key=api_key, base_url=base_url, timeout=timeout, max_retries=0, http_client=http.bounded_client(timeout))
        except openai.OpenAIError as error:
            raise EmbedderMisconfigured(f"cannot set up the OpenAI client: {error}") from error

    def embed(self, texts: Sequence[str]) -> list[np.ndarray]:
        from . import http

        vectors: list[np.ndarray] = []
        for batch in batched(texts, self.batch_size):
            vectors += http.run(self._embed_batch(list(batch)))
        return vectors

    async def _embed_batch(self, batch: list[str]) -> list[np.ndarray]:
        import openai

        from . import http

        http.ReplyLimit.set(http.reply_limit(len(batch), self.expected_dimensions or MAX_DIMENSIONS))
        try:
            async with asyncio.timeout(self.timeout):
                response = await self._create_within_deadline(batch, asyncio.get_running_loop().time() + self.timeout)
            vectors = checked_vectors(reply_vectors(response, len(batch), self.model_name), len(batch), self.model_name)
        except (TimeoutError, openai.APITimeoutError) as error:
            raise EmbeddingUnavailable(
                f"{self.model_name} via OpenAI API: timed out: no whole reply within {self.timeout:g} s (PAYRAIL_EMBEDDING_TIMEOUT, retries included)"
            ) from error
        except (openai.OpenAIError, http.ReplyRefused) as error:
            raise EmbeddingUnavailable(f"{self.model_name} via OpenAI API: {error}") from error
        # What the client's parsing of a reply that is not an embeddings reply raises.
        except (ValueError, TypeError, AttributeError, LookupError) as error:
            raise EmbeddingUnavailable(f"{self.model_name} via OpenAI API: malformed response: {error}") from error
        self._check_dimensions(vectors[0].size)
        return vectors

    async def _create_within_deadline(self, batch: list[str], deadline: float):
        import openai

        loop = asyncio.get_running_loop()
        for attempt in range(self.max_retries + 1):
            try:
                return await self._client.embeddings.create(model=self.model_name, input=batch, dimensions=self.dimensions or openai.omit)
            except (openai.APIConnectionError, openai.APIStatusError) as error:
                if attempt == self.max_retries or not retried(error):
                    raise
                asked_wait = retry_after(error)
                wait = backoff(attempt) if asked_wait is None else asked_wait
                if loop.time() + wait >= deadline:
                    if asked_wait is None:
                        raise
                    raise EmbeddingUnavailable(
                        f"{self.model_name} via OpenAI API: {error}; it asked to be retried after {asked_wait:g} s, "
                        f"past the {self.timeout:g} s deadline (PAYRAIL_EMBEDDING_TIMEOUT)"
                    ) from error
                await asyncio.sleep(wait)
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _check_dimensions(self, answered: int) -> None:
        if self.expected_dimensions is None or answered == self.expected_dimensions:
            return
        because = "were asked for" if self.dimensions else "the model makes"
        raise EmbeddingUnavailable(
            f"{self.model_name} via OpenAI API returned {answered}-dimensional embeddings, but "
            f"{self.expected_dimensions} {because}: is OPENAI_BASE_URL a server that serves this model?"
            " (PAYRAIL_EMBEDDING_DIMENSIONS asks for shortened vectors)"
        )


def retried(error: Exception) -> bool:
    import openai

    if isinstance(error, openai.APITimeoutError):
        return False  # the deadline is spent
    if isinstance(error, openai.APIStatusError):
        return error.status_code in RETRIED_STATUSES or error.status_code >= 500
    return True


def retry_after(error: Exception) -> float | None:
    """The wait the service asked for (Retry-After-Ms, Retry-After in seconds or as a date), or None."""
    response = getattr(error, "response", None)
    headers = response.headers if response is not None else {}
    for name, unit in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            seconds = float(value) * unit
        except ValueError:
            try:
                seconds = email.utils.parsedate_to_datetime(value).timestamp() - time.time()
            except (TypeError, ValueError):
                continue
        return max(0.0, seconds) if math.isfinite(seconds) else None
    return None


def backoff(attempt: int) -> float:
    return min(FIRST_BACKOFF_SECONDS * 2**attempt, MAX_BACKOFF_SECONDS) * (1 - 0.25 * random.random())


def reply_vectors(response, count: int, model_name: str) -> list[list[float]]:
    """The reply's embeddings in input order, refused unless it holds exactly one list of numbers
    for each input, indexed 0..count-1 once each (a reply of repeated indexes would give one text
    another's vector)."""
    data = getattr(response, "data", None)
    if not isinstance(data, list):
        raise EmbeddingUnavailable(f"{model_name} via OpenAI API: malformed response: no list of embeddings")
    if len(data) != count:
        raise EmbeddingUnavailable(f"{model_name} returned {len(data)} embeddings for {count} inputs")
    by_index: dict[int, list] = {}
    for item in data:
        index, embedding = getattr(item, "index", None), getattr(item, "embedding", None)
        if type(index) is not int or not 0 <= index < count or index in by_index:
            raise EmbeddingUnavailable(f"{model_name} via OpenAI API: malformed response: the embeddings' indexes are not 0 to {count - 1}, once each")
        # Strings of digits are not numbers (numpy would take them).
        if not isinstance(embedding, list) or not set(map(type, embedding)) <= {float, int}:
            raise EmbeddingUnavailable(f"{model_name} via OpenAI API: malformed response: an embedding is not a list of numbers")
        by_index[index] = embedding
    return [by_index[index] for index in range(count)]
