"""The contract's search answer, computed here from the records a test wrote: never by the code
under test, never written down by hand.

Records are dicts with "provider", "method" and "enabled" (and whatever else the caller keeps).
- The name path: enabled records whose provider-and-method pair ("provider method" or
  "provider / method"), provider or method equals the query, all normalized as
  payrail._normalize_name does; pairs first, then providers, then methods; ties by normalized
  provider, then method; at most 3.
- The semantic path: enabled records by exact cosine distance in float64, ties by normalized
  provider, then method; the first 3.
"""

from __future__ import annotations

import itertools
import re
import unicodedata
from collections.abc import Callable, Iterable

import numpy as np
import regex

from payrail_embedder.embedders import record_text
from payrail_embedder.registry.search import QUERY_INVISIBLE
from payrail_test_support.openai_fake import FAKE_DIMENSIONS, fake_embedding

# White space as the registry counts it (payrail._white_space_characters), from Unicode's own
# property: White_Space but U+0085 (a control character: every field refuses it), and the byte
# order mark.
WHITE_SPACE = regex.sub(r"[^\p{White_Space}]|\x85", "", "".join(map(chr, range(0x110000)))) + "\ufeff"
# pgvector sums in float32: distances closer than this may come back in either order, so a test
# whose answer they would decide proves nothing. Equal distances (equal directions) are fine: the
# names decide those.
DECIDING_GAP = 1e-4
LIMIT = 3


def simple_case_fold(ch: str) -> str:
    """Unicode simple case folding of one character: full folding where it is one character, else
    the lower case where that is (ẞ -> ß)."""
    for folded in (ch.casefold(), ch.lower()):
        if len(folded) == 1:
            return folded
    return ch


def normalized(name: str) -> str:
    """payrail._normalize_name: invisible characters dropped, NFKC, simple case folding, NFKC,
    runs of white space collapsed to one space, trimmed."""
    name = unicodedata.normalize("NFKC", "".join(ch for ch in name if ch not in QUERY_INVISIBLE))
    name = unicodedata.normalize("NFKC", "".join(map(simple_case_fold, name)))
    return re.sub(f"[{re.escape(WHITE_SPACE)}]+", " ", name).strip(" ")


def name_key(record: dict) -> tuple[str, str]:
    return normalized(record["provider"]), normalized(record["method"])


def name_path(records: Iterable[dict], query: str, limit: int | None = LIMIT) -> list[dict]:
    """The enabled records the name path answers with, in the contract's order (the first limit;
    None: every match, whose order ranks a wanted record); [] when the query is no name."""
    q = normalized(query)
    ranked = []
    for record in records:
        if not record["enabled"]:
            continue
        provider, method = record["provider"], record["method"]
        if q in (normalized(f"{provider} {method}"), normalized(f"{provider} / {method}")):
            rank = 1
        elif q == normalized(provider):
            rank = 2
        elif q == normalized(method):
            rank = 3
        else:
            continue
        ranked.append(((rank, *name_key(record)), record))
    return [record for _, record in sorted(ranked, key=lambda item: item[0])][:limit]


def cosine_ranking(records: Iterable[dict], query_vector, vector_of: Callable[[dict], np.ndarray]) -> list[tuple[float, dict]]:
    """Every record given (enabled or not) with its exact cosine distance to the query in float64,
    nearest first, ties by normalized names."""
    records = list(records)
    if not records:
        return []
    matrix = np.array([vector_of(record) for record in records], dtype=np.float64)
    q = np.asarray(query_vector, dtype=np.float64)
    # Row by row sums, not a matrix product (whose kernels may sum rows in different orders): equal
    # vectors, or vectors a power of two apart, get exactly equal distances.
    distances = 1.0 - (matrix * q).sum(axis=1) / (np.linalg.norm(matrix, axis=1) * np.linalg.norm(q))
    scored = [(float(distance), record) for distance, record in zip(distances, records, strict=True)]
    return sorted(scored, key=lambda item: (item[0], *name_key(item[1])))


def semantic_path(records: Iterable[dict], query_vector, vector_of: Callable[[dict], np.ndarray]) -> list[dict]:
    """The semantic path's answer; refuses test data where float32 rounding, not the rule, would decide it."""
    ranked = cosine_ranking([record for record in records if record["enabled"]], query_vector, vector_of)
    head = [distance for distance, _ in ranked[: LIMIT + 1]]
    for nearer, farther in itertools.pairwise(head):
        assert nearer == farther or farther - nearer > DECIDING_GAP, f"near ties decide the answer: {head}"
    return [record for _, record in ranked[:LIMIT]]


def fake_vector(record: dict, dimensions: int = FAKE_DIMENSIONS) -> np.ndarray:
    """The vector the fake OpenAI server gives the record's embedded text."""
    return fake_embedding(record_text(record["provider"], record["method"], record["guidance"]), dimensions)


def fake_semantic_path(records: Iterable[dict], query: str, dimensions: int = FAKE_DIMENSIONS) -> list[dict]:
    """The semantic path when the fake OpenAI server embeds both the records and the query."""
    return semantic_path(records, fake_embedding(query, dimensions), lambda record: fake_vector(record, dimensions))


def search_answer(records: list[dict], query: str) -> list[dict]:
    """What search answers with the fake OpenAI server as the embedder: the name path when the query
    is a name, else the semantic path."""
    return name_path(records, query) or fake_semantic_path(records, query)
