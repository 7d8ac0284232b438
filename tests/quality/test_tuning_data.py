"""What `model tune` learns from, on a real registry: the negatives it mines from the registry's own
vectors, and a validation split too small to decide, refused before anything is loaded or trained.

No model is loaded or trained here (tests/quality/test_tune.py trains on what is mined, end to end). The
records are embedded by the fake OpenAI server, so each expected negative comes from
payrail_test_support.ranking's order of fake_embedding vectors, never from the code under test.
"""

from __future__ import annotations

import itertools
import os

from payrail_embedder.embedders import OpenAIEmbedder, record_text
from payrail_embedder.postgres.connection import connect
from payrail_embedder.quality import tuning_data
from payrail_embedder.quality.tuning import MIN_VALIDATION_QUERIES
from payrail_embedder.registry import catalog
from payrail_embedder.registry.labelled_queries import LabelledQuery
from payrail_embedder.registry.records import read_lines
from payrail_test_support.cli import cli_import, cli_json, write_jsonl
from payrail_test_support.openai_fake import FAKE_MODEL, fake_embedding
from payrail_test_support.ranking import DECIDING_GAP, cosine_ranking, fake_vector, normalized


def record(provider: str, method: str, purpose: str, enabled: bool = True) -> dict:
    return {"provider": provider, "method": method, "urls": [], "docsUrl": None, "guidance": f"Purpose: {purpose}", "enabled": enabled}


CATALOG = [
    record("Stormcast", "Forecast", "weather forecast for a city."),
    record("Stormcast", "Alerts", "severe weather alerts for a city."),
    record("Skyline", "Daily forecast", "daily weather forecast by city name."),
    record("Skyline", "Radar", "weather radar images."),
    record("Openmeteo", "Hourly", "hourly weather forecast for coordinates."),
    record("Fixer", "Convert", "convert currency amounts."),
    record("Fixer", "Rates", "currency exchange rates for a city."),
    record("Twilio", "Send SMS", "send a text message to a phone."),
    record("Vonage", "Send SMS", "send a text message."),
    record("Amadeus", "Hotel search", "hotel rooms in a city."),
    record("Amadeus", "Flight offers", "flight offers between cities."),
    # A draft nearer the first query than any enabled record but its own: search never returns it, so it is no negative.
    record("Drafty", "Forecast", "weather forecast for a city, daily.", enabled=False),
]
QUERIES = [
    LabelledQuery(1, "weather forecast for a city", (("Stormcast", "Forecast"),)),
    LabelledQuery(2, "send a text message", (("Twilio", "Send SMS"), ("Vonage", "Send SMS"))),
    # Six records: more than the five negatives a query's pairs take in turn.
    LabelledQuery(
        3,
        "weather in a city",
        (("Stormcast", "Forecast"), ("Stormcast", "Alerts"), ("Skyline", "Daily forecast"), ("Skyline", "Radar"), ("Openmeteo", "Hourly"), ("Fixer", "Rates")),
    ),
]


def text_of(record: dict) -> str:
    return record_text(record["provider"], record["method"], record["guidance"])


def expected_negatives(query: LabelledQuery, excluded_providers: set[str] = frozenset()) -> list[str]:
    """The enabled records nearest the query that it does not name, none of an excluded provider, nearest first."""
    candidates = [
        r for r in CATALOG if r["enabled"] and (r["provider"], r["method"]) not in query.relevant and normalized(r["provider"]) not in excluded_providers
    ]
    ranked = cosine_ranking(candidates, fake_embedding(query.query), fake_vector)
    head = [distance for distance, _ in ranked[: tuning_data.NEGATIVES_PER_QUERY + 1]]
    for nearer, farther in itertools.pairwise(head):
        assert nearer == farther or farther - nearer > DECIDING_GAP, f"float32 rounding, not the rule, would order {query.query!r}'s negatives"
    return [text_of(r) for _, r in ranked[: tuning_data.NEGATIVES_PER_QUERY]]


def test_each_querys_negatives_are_its_nearest_enabled_records_it_does_not_name(cli_env, database_url, openai_fake, tmp_path):
    cli_import(cli_env, tmp_path / "catalog.jsonl", CATALOG)
    embedder = OpenAIEmbedder(FAKE_MODEL, api_key="test-key", base_url=openai_fake.base_url)

    with connect(database_url, autocommit=True) as conn:
        queries, warnings = tuning_data.golden_queries(conn, QUERIES)
        mined = tuning_data.mined_negatives(conn, embedder, queries)
        outside_skyline = tuning_data.mined_negatives(conn, embedder, queries, excluded_providers=frozenset({"skyline"}))

    assert not warnings and [query.labelled for query in queries] == QUERIES
    drafted = text_of(CATALOG[-1])
    assert fake_embedding(QUERIES[0].query) @ fake_vector(CATALOG[-1]) > max(fake_embedding(QUERIES[0].query) @ fake_vector(r) for r in CATALOG[1:-1])
    for query in queries:
        assert mined[query] == expected_negatives(query.labelled), query.labelled.query
        assert outside_skyline[query] == expected_negatives(query.labelled, {"skyline"}), query.labelled.query
        assert drafted not in mined[query] and not any(text.startswith("Skyline:") for text in outside_skyline[query])
    # The third query names six of the eleven enabled records: five are left, all of them negatives.
    assert len(mined[queries[2]]) == 5

    # Each pair takes its query's next negative, cycling: the sixth record's pair takes the first again.
    pairs = tuning_data.training_pairs(queries, mined)
    by_query = [[pair for pair in pairs if pair[0] == query.labelled.query] for query in queries]
    assert [len(group) for group in by_query] == [1, 2, 6]
    for query, group in zip(queries, by_query, strict=True):
        records = [text_of(next(r for r in CATALOG if (r["provider"], r["method"]) == pair)) for pair in query.labelled.relevant]
        assert group == [(query.labelled.query, text, mined[query][n % 5]) for n, text in enumerate(records)]
    assert tuning_data.training_pairs(queries) == [pair[:2] for pair in pairs]  # without negatives: the same pairs


ONE_RECORD_PROVIDERS = [record(f"Provider {n:03d}", "Lookup", f"answers question {n}.") for n in range(180)]


def question(n: int) -> dict:
    return {"query": f"question {n}", "relevant": [[f"Provider {n:03d}", "Lookup"]]}


def test_tune_refuses_a_validation_split_too_small_to_decide_before_it_loads_anything(database_url, openai_fake, tmp_path):
    """Before: 10 golden queries were tuned on, 2 of them decided, and the report said nothing of
    what 2 queries can decide. The registry's model is the local one by name, its vectors the fake
    server's: tune refuses before it reads a vector or loads a model."""
    embedder = OpenAIEmbedder("all-MiniLM-L6-v2", api_key="test-key", base_url=openai_fake.base_url, dimensions=384)
    with connect(database_url, autocommit=True) as conn:
        report = catalog.import_records(conn, lambda: embedder, read_lines(write_jsonl(tmp_path / "catalog.jsonl", ONE_RECORD_PROVIDERS)))
    assert report.saved and report.created == len(ONE_RECORD_PROVIDERS)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PAYRAIL_", "OPENAI_"))}
    env.update(PAYRAIL_DATABASE_URL=database_url, PAYRAIL_DATA_DIR=str(tmp_path / "data"), PAYRAIL_EMBEDDER="local")

    # One query a provider: validation takes the first providers drawn until a fifth of the queries, 2 of 10.
    code, failure, _ = cli_json(env, "model", "tune", write_jsonl(tmp_path / "ten.jsonl", [question(n) for n in range(10)]), "--json")

    assert code == 2 and failure["error"] == "invalid_input", failure
    assert failure["detail"] == (
        f"ten.jsonl: the split by provider (--validation-fraction 0.2, --seed 0) leaves 2 golden queries to decide on, under the "
        f"{MIN_VALIDATION_QUERIES} that can decide anything: a 95% paired interval of the change in hit@3 can exclude zero from "
        f"{MIN_VALIDATION_QUERIES} queries on, and then only for a gain of 0.10 with no query lost; below that, keeping the model "
        "(and its epochs) would be chance. Label more golden queries, over more providers (about 180 at this fraction), raise "
        "--validation-fraction, or give --force to tune anyway, undecided"
    )
    assert not (tmp_path / "data").exists()

    # One short of the minimum: ceil(0.19 x 180) = 35 validation queries.
    assert MIN_VALIDATION_QUERIES == 36  # 0.9 ** 35 > 0.025 > 0.9 ** 36
    every = write_jsonl(tmp_path / "every.jsonl", [question(n) for n in range(180)])
    code, failure, _ = cli_json(env, "model", "tune", every, "--json", "--validation-fraction", "0.19")
    assert code == 2 and failure["error"] == "invalid_input"
    assert failure["detail"].startswith("every.jsonl: the split by provider (--validation-fraction 0.19, --seed 0) leaves 35 golden queries to decide on")
    assert "(about 190 at this fraction)" in failure["detail"]  # 36 / 0.19
    assert not (tmp_path / "data").exists()
