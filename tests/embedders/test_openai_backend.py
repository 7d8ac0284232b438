"""The openai backend end to end: the real openai client over real HTTP to a local fake server,
the real payrail-embedder console script in a subprocess, and a real PostgreSQL per server.

Expected orders come from payrail_test_support.ranking, never written down, so the tests say
what the ranking must be rather than what it happened to be.
"""

from __future__ import annotations

import json
import math

import numpy as np
import psycopg
import pytest

from payrail_embedder.embedders import OPENAI_MAX_BATCH, EmbeddingUnavailable, OpenAIEmbedder, record_text
from payrail_test_support.agent_helpers import (
    CATALOG,
    SEMANTIC_QUERY,
    expected_name_matches,
    expected_semantic_matches,
    import_catalog,
)
from payrail_test_support.cli import cli_import, cli_json, run_cli, write_jsonl
from payrail_test_support.openai_fake import FAKE_DIMENSIONS, FAKE_MODEL, fake_embedding
from payrail_test_support.ports import unused_port

MATCH_KEYS = {"provider", "method", "urls", "docsUrl", "guidance"}
# The cli_env fixture's PAYRAIL_EMBEDDING_TIMEOUT and PAYRAIL_EMBEDDING_RETRIES.
EMBEDDING_TIMEOUT = 5.0
EMBEDDING_RETRIES = 1

NAME_QUERY = "Stripe"


def registry_snapshot(database_url: str) -> tuple[list, list]:
    """Every stored column of every record, and the registry's model: what 'unchanged' means."""
    with psycopg.connect(database_url) as conn:
        rows = conn.execute(
            """
            select id, provider, method, urls, docs_url, guidance, enabled, embedding::text,
                   embedding_model, embedding_content_hash, updated_at
            from payrail.provider_methods order by id
            """
        ).fetchall()
        model = conn.execute("select name, dimensions from payrail.get_embedding_model()").fetchall()
    return rows, model


def direct_embedder(openai_fake, **options) -> OpenAIEmbedder:
    """The backend the CLI builds from cli_env, made in this process (same client, same HTTP)."""
    options = {"timeout": EMBEDDING_TIMEOUT, "max_retries": EMBEDDING_RETRIES, **options}
    return OpenAIEmbedder(FAKE_MODEL, api_key="test-key", base_url=openai_fake.base_url, **options)


@pytest.fixture
def loaded_catalog(database_url, openai_fake, tmp_path):
    """The test catalog imported with a healthy fake, in process to keep the failure tests fast
    (the CLI import itself is what test_import_then_search_through_the_cli covers)."""
    import_catalog(database_url, openai_fake, tmp_path)


# 1. Success ---------------------------------------------------------------------------------------


def test_import_then_search_through_the_cli(cli_env, openai_fake, database_url, tmp_path):
    cli_import(cli_env, tmp_path / "catalog.jsonl", CATALOG)

    embedded = [text for request in openai_fake.requests for text in request["input"]]
    assert sorted(embedded) == sorted(record_text(r["provider"], r["method"], r["guidance"]) for r in CATALOG)
    assert {request["model"] for request in openai_fake.requests} == {FAKE_MODEL}
    with psycopg.connect(database_url) as conn:
        assert conn.execute("select name, dimensions from payrail.get_embedding_model()").fetchall() == [(FAKE_MODEL, FAKE_DIMENSIONS)]

    # The semantic path: the query, and only the query, is embedded; the order is the computed one.
    expected = expected_semantic_matches(SEMANTIC_QUERY)
    requests_before = len(openai_fake.requests)

    code, payload, stderr = cli_json(cli_env, "search", "--json", SEMANTIC_QUERY)

    assert code == 0, stderr
    assert list(payload) == ["matches"]
    assert all(set(match) == MATCH_KEYS for match in payload["matches"])
    assert payload["matches"] == expected
    assert all(match["provider"] != "Amadeus" for match in payload["matches"]), "a disabled draft was returned"
    assert [request["input"] for request in openai_fake.requests[requests_before:]] == [[SEMANTIC_QUERY]]

    # The name path: an exact provider name answers without the embedding service.
    requests_before = len(openai_fake.requests)

    code, payload, stderr = cli_json(cli_env, "search", "--json", NAME_QUERY)

    assert code == 0, stderr
    assert payload == {"matches": expected_name_matches(NAME_QUERY)}
    assert len(payload["matches"]) == 2
    assert len(openai_fake.requests) == requests_before, "a name-path search called the embedding service"


# 2. Batching --------------------------------------------------------------------------------------


@pytest.mark.slow
def test_import_batches_embedding_requests(cli_env, openai_fake, database_url, tmp_path):
    count = 5000
    records = [
        {
            "provider": f"Provider {number:04d}",
            "method": "Lookup",
            "urls": [f"https://api{number}.example.com/v1/lookup"],
            "docsUrl": None,
            "guidance": f"Purpose: Look up item {number}.\nInstructions: GET /v1/lookup.\nNotes: Batch test.",
            "enabled": number % 2 == 0,
        }
        for number in range(count)
    ]
    # Batches of 2,048 texts: the fake's replies take seconds to make under load.
    cli_import({**cli_env, "PAYRAIL_EMBEDDING_TIMEOUT": "60"}, tmp_path / "many.jsonl", records)

    sizes = [len(request["input"]) for request in openai_fake.requests]
    assert len(sizes) == math.ceil(count / OPENAI_MAX_BATCH)
    assert all(0 < size <= OPENAI_MAX_BATCH for size in sizes), sizes
    assert sum(sizes) == count
    embedded = [text for request in openai_fake.requests for text in request["input"]]
    assert sorted(embedded) == sorted(record_text(r["provider"], r["method"], r["guidance"]) for r in records)
    # The client asked for base64, which the fake honours: the saved vectors prove the decoding.
    assert {request.get("encoding_format") for request in openai_fake.requests} == {"base64"}
    with psycopg.connect(database_url) as conn:
        stored = conn.execute("select count(*) from payrail.provider_methods where vector_dims(embedding) = %s", (FAKE_DIMENSIONS,)).fetchone()[0]
        sample_row = conn.execute(
            "select provider, method, guidance, embedding::text from payrail.provider_methods where provider = 'Provider 4321'"
        ).fetchone()
    assert stored == count
    stored_vector = np.array(json.loads(sample_row[3]), dtype=np.float32)
    np.testing.assert_allclose(stored_vector, fake_embedding(record_text(*sample_row[:3])), atol=1e-6)


# 3. Failures of the embedding service during search ----------------------------------------------

# behaviour -> (requests the fake must have received for the failing search, words the detail mentions)
FAILURES = {
    "429": (EMBEDDING_RETRIES + 1, "429"),
    "500": (EMBEDDING_RETRIES + 1, "500"),
    # The timeout is the whole request's deadline: a hang spends it, and leaves no time to retry.
    "hang": (1, "timed out"),
    "refused": (0, "connection"),
    "wrong_dimensions": (1, "dimensions"),
    "malformed": (None, "malformed"),
}


@pytest.mark.parametrize("behaviour", list(FAILURES))
def test_search_reports_unavailable_when_embedding_fails(behaviour, cli_env, openai_fake, loaded_catalog, database_url):
    expected_requests, detail_mentions = FAILURES[behaviour]
    env = dict(cli_env)
    if behaviour == "refused":
        env["OPENAI_BASE_URL"] = f"http://127.0.0.1:{unused_port()}/v1"  # connections are refused
    else:
        openai_fake.behaviour = behaviour
    snapshot_before = registry_snapshot(database_url)
    requests_before = len(openai_fake.requests)

    code, payload, stderr = cli_json(env, "search", "--json", SEMANTIC_QUERY)

    assert code != 0
    assert set(payload) == {"error", "detail"}, payload
    assert payload["error"] == "search_unavailable"
    assert isinstance(payload["detail"], str) and detail_mentions in payload["detail"].lower(), payload["detail"]
    assert "Traceback" not in stderr
    failing_requests = len(openai_fake.requests) - requests_before
    if expected_requests is None:
        assert 1 <= failing_requests <= EMBEDDING_RETRIES + 1
    else:
        assert failing_requests == expected_requests
    if behaviour == "hang":
        assert openai_fake.hanging == 1, "the client did not give up on its deadline"

    # Names need no embedding, so they still answer while the service is failing.
    requests_before = len(openai_fake.requests)
    code, payload, stderr = cli_json(env, "search", "--json", NAME_QUERY)
    assert code == 0, (payload, stderr)
    assert payload == {"matches": expected_name_matches(NAME_QUERY)}
    assert len(openai_fake.requests) == requests_before

    assert registry_snapshot(database_url) == snapshot_before


# 4. Import with a failing embedder ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("behaviour", "message_mentions"),
    [("500", "500"), ("wrong_dimensions", "dimensions")],
)
def test_import_with_failing_embedder_saves_nothing(behaviour, message_mentions, cli_env, openai_fake, loaded_catalog, database_url, tmp_path):
    changed = dict(CATALOG[0], guidance="Purpose: Charge a card, edited.\nInstructions: POST.\nNotes: Edited.")
    new = {
        "provider": "Resend",
        "method": "Send email",
        "urls": ["https://api.resend.com/emails"],
        "docsUrl": "https://resend.com/docs/api-reference/emails/send-email",
        "guidance": "Purpose: Send a transactional email.\nInstructions: POST /emails.\nNotes: Paid above a free tier.",
        "enabled": True,
    }
    path = write_jsonl(tmp_path / "edits.jsonl", [changed, new])
    exported_before = run_cli(cli_env, "export")
    assert exported_before.returncode == 0, exported_before.stderr
    assert len(exported_before.stdout.splitlines()) == len(CATALOG)
    snapshot_before = registry_snapshot(database_url)
    requests_before = len(openai_fake.requests)
    openai_fake.behaviour = behaviour

    result = run_cli(cli_env, "import", str(path))

    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith("Error: "), result.stderr
    assert message_mentions in result.stderr.lower(), result.stderr
    # The embedder was asked, for exactly the new and the changed content, before anything was saved.
    assert len(openai_fake.requests) > requests_before
    assert sorted(openai_fake.requests[-1]["input"]) == sorted(record_text(r["provider"], r["method"], r["guidance"]) for r in (changed, new))
    exported_after = run_cli(cli_env, "export")
    assert exported_after.returncode == 0, exported_after.stderr
    assert exported_after.stdout == exported_before.stdout
    assert registry_snapshot(database_url) == snapshot_before


def test_import_into_empty_registry_with_failing_embedder_saves_nothing(cli_env, openai_fake, database_url, tmp_path):
    path = write_jsonl(tmp_path / "catalog.jsonl", CATALOG)
    openai_fake.behaviour = "500"

    result = run_cli(cli_env, "import", str(path))

    assert result.returncode != 0
    assert result.stderr.startswith("Error: ") and "500" in result.stderr, result.stderr
    assert len(openai_fake.requests) == EMBEDDING_RETRIES + 1
    exported = run_cli(cli_env, "export")
    assert (exported.returncode, exported.stdout) == (0, "")
    # No model was recorded either: the next, healthy import may still choose it.
    assert registry_snapshot(database_url) == ([], [])


@pytest.mark.parametrize("scale", [2.0**40, 2.0**-40])
def test_an_embedding_of_extreme_length_is_never_stored(scale, cli_env, openai_fake, loaded_catalog, database_url, tmp_path):
    """The database's limit on a stored vector's length (2^-32..2^32, where search's float32
    distance neither overflows nor loses it) refuses what the service answered: the import fails
    as the service's failure, and nothing is saved."""
    edited = dict(CATALOG[0], guidance="Purpose: Charge a card, edited.")
    path = write_jsonl(tmp_path / "edits.jsonl", [edited])
    snapshot_before = registry_snapshot(database_url)
    openai_fake.scale = scale

    result = run_cli(cli_env, "import", str(path))

    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith(f"Error: unavailable: {FAKE_MODEL} returned an embedding the registry cannot store: "), result.stderr
    assert "a stored vector's length must be between 2^-32 and 2^32" in result.stderr, result.stderr
    assert registry_snapshot(database_url) == snapshot_before


# 5. The embedder used directly from Python --------------------------------------------------------


def test_openai_embedder_returns_the_servers_vectors(openai_fake):
    texts = ["hotel room availability", "send an SMS text message", "Stripe: Create a refund\nPurpose: refunds."]

    vectors = direct_embedder(openai_fake).embed(texts)

    assert len(vectors) == len(texts)
    for text, vector in zip(texts, vectors, strict=True):
        assert vector.shape == (FAKE_DIMENSIONS,)
        assert vector.dtype == np.float32
        np.testing.assert_allclose(vector, fake_embedding(text), atol=1e-6)
    assert len(openai_fake.requests) == 1
    assert openai_fake.requests[0]["input"] == texts
    assert openai_fake.requests[0]["model"] == FAKE_MODEL
    assert openai_fake.requests[0].get("encoding_format") == "base64"


def test_openai_embedder_keeps_order_across_batches(openai_fake):
    texts = [f"text number {number}" for number in range(5)]

    vectors = direct_embedder(openai_fake, batch_size=2).embed(texts)

    assert [request["input"] for request in openai_fake.requests] == [texts[0:2], texts[2:4], texts[4:5]]
    for text, vector in zip(texts, vectors, strict=True):
        np.testing.assert_allclose(vector, fake_embedding(text), atol=1e-6)


@pytest.mark.parametrize("behaviour", ["500", "429", "malformed"])
def test_openai_embedder_raises_unavailable(behaviour, openai_fake):
    openai_fake.behaviour = behaviour

    with pytest.raises(EmbeddingUnavailable, match=FAKE_MODEL):
        direct_embedder(openai_fake).embed(["hotel room availability"])

    if behaviour in ("500", "429"):
        assert len(openai_fake.requests) == EMBEDDING_RETRIES + 1


def test_openai_embedder_times_out_on_a_hanging_server(openai_fake):
    openai_fake.behaviour = "hang"
    embedder = direct_embedder(openai_fake, timeout=0.5, max_retries=0)

    with pytest.raises(EmbeddingUnavailable, match="timed out"):
        embedder.embed(["hotel room availability"])

    assert len(openai_fake.requests) == 1
    assert openai_fake.hanging == 1, "the client gave up on its own timeout while the fake still hung"


def test_openai_models_must_answer_their_own_dimensions(openai_fake):
    """A server answering 64-dimensional vectors for text-embedding-3-small is not OpenAI's model."""
    embedder = OpenAIEmbedder("text-embedding-3-small", api_key="test-key", base_url=openai_fake.base_url)
    with pytest.raises(EmbeddingUnavailable, match="returned 64-dimensional embeddings, but 1536 the model makes"):
        embedder.embed(["send an SMS"])
    asked = OpenAIEmbedder("text-embedding-3-large", api_key="test-key", base_url=openai_fake.base_url, dimensions=64)
    assert [v.size for v in asked.embed(["send an SMS", "geocode"])] == [64, 64]
    assert openai_fake.requests[-1]["dimensions"] == 64
    openai_fake.behaviour = "wrong_dimensions"
    with pytest.raises(EmbeddingUnavailable, match="returned 65-dimensional embeddings, but 64 were asked for"):
        asked.embed(["send an SMS"])


def test_a_reply_of_other_dimensions_is_never_recorded_as_the_models_shape(cli_env, openai_fake, database_url, tmp_path):
    """On a fresh registry, the first import sets the model: never from a reply of the wrong shape."""
    path = write_jsonl(tmp_path / "catalog.jsonl", [{**CATALOG[0], "enabled": True}])
    env = {**cli_env, "PAYRAIL_EMBEDDING_MODEL": "text-embedding-3-small"}
    result = run_cli(env, "import", path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "returned 64-dimensional embeddings, but 1536 the model makes" in result.stderr
    with psycopg.connect(database_url) as conn:
        assert conn.execute("select count(*) from payrail.embedding_model").fetchone() == (0,)
        assert conn.execute("select count(*) from payrail.provider_methods").fetchone() == (0,)
    result = run_cli({**env, "PAYRAIL_EMBEDDING_DIMENSIONS": "64"}, "import", path)
    assert result.returncode == 0, result.stdout + result.stderr
    with psycopg.connect(database_url) as conn:
        assert conn.execute("select name, dimensions from payrail.embedding_model").fetchone() == ("text-embedding-3-small", 64)
