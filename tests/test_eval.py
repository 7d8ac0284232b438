"""payrail-embedder eval: labelled queries through the real search path, scored.

The expected metrics are computed here from the answers of payrail_test_support.ranking, with
the metric definitions written out again below, never copied from a run.
"""

from __future__ import annotations

import json
import math
import re

import psycopg
import pytest

from payrail_test_support.cli import cli_import, cli_json, run_cli
from payrail_test_support.openai_fake import FAKE_MODEL
from payrail_test_support.ranking import normalized, search_answer

CATALOG = [
    ("Stripe", "Create a PaymentIntent", "Purpose: Charge a customer card in a chosen currency.", True),
    ("Stripe", "Create a refund", "Purpose: Give money back to a customer for an earlier card charge.", True),
    ("Twilio", "Send an SMS", "Purpose: Send a text message to a mobile phone number.", True),
    ("Booking.com", "Get accommodation availability", "Purpose: Live hotel room availability and prices.", True),
    ("OpenWeather", "Current weather data", "Purpose: Current weather conditions and temperature for a city.", True),
    ("OpenWeather", "Daily forecast", "Purpose: Weather forecast for the next days in a city.", True),
    ("Duffel", "Search flights", "Purpose: Find flight offers between two airports on a date.", True),
    # Closest of all to the hotel question, but a disabled draft: it can never be returned.
    ("Amadeus", "Hotel Search", "Purpose: Find live hotel room availability and prices through a paid API.", False),
]
RECORDS = [{"provider": p, "method": m, "urls": [], "docsUrl": None, "guidance": g, "enabled": on} for p, m, g, on in CATALOG]

LABELLED = [
    {"query": "charge the customer card in euros", "relevant": [["Stripe", "Create a PaymentIntent"]]},
    {
        "query": "what is the weather forecast in Paris for the next days and today temperature",
        "relevant": [["OpenWeather", "Current weather data"], ["OpenWeather", "Daily forecast"]],
    },
    # Labels compare as the registry compares names: case and runs of white space do not matter.
    {"query": "text message to a phone", "relevant": [["twilio", "send  an sms"]]},
    {
        "query": "find live hotel room availability through a paid API",
        "relevant": [["Amadeus", "Hotel Search"], ["Booking.com", "Get accommodation availability"]],
    },
    {"query": "book a train ticket between two cities", "relevant": [["Amadeus", "Hotel Search"]]},
    {
        "query": "give money back for an earlier charge, and send a text message about it",
        "relevant": [
            ["Stripe", "Create a refund"],
            ["Twilio", "Send an SMS"],
            ["Stripe", "Create a PaymentIntent"],
            ["Booking.com", "Get accommodation availability"],
        ],
    },
    # An exact provider name takes the name path: its methods by normalized method name.
    {"query": "openweather", "relevant": [["OpenWeather", "Daily forecast"]]},
]


def expected_top3(query: str) -> list[tuple[str, str]]:
    return [(r["provider"], r["method"]) for r in search_answer(RECORDS, query)]


def expected_report(lines: list[int] | None = None) -> tuple[dict[str, float], list[int]]:
    """The metrics and missed lines of LABELLED's queries, or of those on the given (1-based) lines."""
    lines = lines or list(range(1, len(LABELLED) + 1))
    totals = {"hit@1": 0.0, "hit@3": 0.0, "recall@1": 0.0, "recall@3": 0.0, "capped_recall@3": 0.0, "mrr@3": 0.0}
    missed_lines = []
    for line in lines:
        labelled = LABELLED[line - 1]
        relevant = {(normalized(p), normalized(m)) for p, m in labelled["relevant"]}
        top = [(normalized(p), normalized(m)) for p, m in expected_top3(labelled["query"])]
        ranks = [rank for rank, pair in enumerate(top, start=1) if pair in relevant]
        totals["hit@1"] += 1 in ranks
        totals["hit@3"] += bool(ranks)
        totals["recall@1"] += (1 in ranks) / len(relevant)
        totals["recall@3"] += len(ranks) / len(relevant)
        totals["capped_recall@3"] += len(ranks) / min(len(relevant), 3)
        totals["mrr@3"] += 1 / ranks[0] if ranks else 0.0
        if not ranks:
            missed_lines.append(line)
    return {name: total / len(lines) for name, total in totals.items()}, missed_lines


@pytest.fixture
def registry(cli_env, tmp_path):
    cli_import(cli_env, tmp_path / "catalog.jsonl", RECORDS)
    labelled = tmp_path / "labelled.jsonl"
    labelled.write_text("".join(json.dumps(item) + "\n" for item in LABELLED))
    return labelled


def test_eval_reports_the_metrics_of_the_search_path(cli_env, openai_fake, registry):
    metrics, missed_lines = expected_report()
    # The fixture exercises every case: a miss, a hit below rank 1, several relevant pairs.
    assert missed_lines and 0 < metrics["hit@1"] < metrics["hit@3"] < 1
    assert metrics["recall@3"] < metrics["capped_recall@3"]
    requests_before = len(openai_fake.requests)

    result = run_cli(cli_env, "eval", "--json", str(registry))

    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["queries"] == len(LABELLED)
    assert report["metrics"] == pytest.approx(metrics, abs=1e-9)
    assert [miss["line"] for miss in report["misses"]] == missed_lines
    for miss in report["misses"]:
        labelled = LABELLED[miss["line"] - 1]
        assert miss["query"] == labelled["query"]
        assert miss["relevant"] == labelled["relevant"]
        assert [tuple(pair) for pair in miss["returned"]] == expected_top3(labelled["query"])
    # All queries embedded in one request, not one request per query.
    new_requests = openai_fake.requests[requests_before:]
    assert [len(r["input"]) for r in new_requests] == [len(LABELLED)]

    text = run_cli(cli_env, "eval", str(registry))
    assert text.returncode == 0, text.stderr
    assert f"hit@3            {metrics['hit@3']:.3f}" in text.stdout
    assert f"{len(missed_lines)} missed" in text.stdout
    for line in missed_lines:
        assert f"line {line}: {LABELLED[line - 1]['query']}" in text.stdout


def test_eval_refuses_a_malformed_labelled_file(cli_env, tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(LABELLED[0]) + "\n" + json.dumps({"query": "no labels", "relevant": []}) + "\n")

    result = run_cli(cli_env, "eval", "--json", str(path))

    assert result.returncode == 2
    assert json.loads(result.stdout)["error"] == "invalid_input"
    assert f"{path}:2: relevant must be a non-empty array" in json.loads(result.stdout)["detail"]


# Lines 1 to 3 in English, 4 and 5 in German (the tag written in capitals: tags compare regardless of case), the rest untagged.
LANGUAGES = {1: "en", 2: "en", 3: "en", 4: "DE", 5: "de"}


def test_eval_reports_the_metrics_of_each_language_tag(cli_env, registry, tmp_path):
    path = tmp_path / "tagged.jsonl"
    path.write_text(
        "".join(json.dumps({**item, **({"language": LANGUAGES[line]} if line in LANGUAGES else {})}) + "\n" for line, item in enumerate(LABELLED, start=1))
    )
    groups = {"de": [4, 5], "en": [1, 2, 3], "untagged": [line for line in range(1, len(LABELLED) + 1) if line not in LANGUAGES]}
    # Each language's figures differ from the overall ones, so an overall average reported per language fails.
    assert all(expected_report(lines)[0] != expected_report()[0] for lines in groups.values())

    code, report, stderr = cli_json(cli_env, "eval", "--json", path)

    assert code == 0, (report, stderr)
    assert report["metrics"] == pytest.approx(expected_report()[0], abs=1e-9)
    assert list(report["byLanguage"]) == ["de", "en", "untagged"]
    for language, lines in groups.items():
        assert report["byLanguage"][language] == {"queries": len(lines), "metrics": pytest.approx(expected_report(lines)[0], abs=1e-9)}, language

    text = run_cli(cli_env, "eval", path)
    assert text.returncode == 0, text.stderr
    table = text.stdout[text.stdout.index("by language:") :].splitlines()[1:5]
    assert table[0].split() == ["language", "queries", "hit@1", "hit@3", "recall@1", "recall@3", "capped_recall@3", "mrr@3"]
    for row, (language, lines) in zip(table[1:], groups.items()):
        metrics = expected_report(lines)[0]
        assert row.split() == [language, str(len(lines)), *(f"{metrics[name]:.3f}" for name in metrics)], row

    # The registry's own model as the candidate: the same figures for each language.
    code, compared, stderr = cli_json(cli_env, "eval", "--json", path, "--compare", FAKE_MODEL)
    assert code == 0, (compared, stderr)
    assert compared["compare"]["byLanguage"] == compared["byLanguage"] == report["byLanguage"]
    assert run_cli(cli_env, "eval", path, "--compare", FAKE_MODEL).stdout.count(f"by language, {FAKE_MODEL}:") == 2


def test_eval_without_language_tags_reports_no_languages(cli_env, registry):
    code, report, _ = cli_json(cli_env, "eval", "--json", registry)
    assert code == 0 and "byLanguage" not in report
    assert "by language" not in run_cli(cli_env, "eval", registry).stdout


@pytest.mark.parametrize("tag", ["e", "english-uk", "en_US", "zh Hans", "", 7, None, ["en"], "untagged", "en\n", "日本"])
def test_eval_refuses_a_bad_language_tag_naming_its_line_and_measures_nothing(cli_env, openai_fake, registry, tmp_path, tag):
    path = tmp_path / "tagged.jsonl"
    path.write_text(json.dumps({**LABELLED[0], "language": "en"}) + "\n" + json.dumps({**LABELLED[1], "language": tag}) + "\n")
    requests_before = len(openai_fake.requests)

    code, failure, _ = cli_json(cli_env, "eval", "--json", path)

    assert (code, failure["error"]) == (2, "invalid_input"), failure
    assert failure["detail"].startswith(f"{path}:2: language "), failure
    assert "metrics" not in failure and len(openai_fake.requests) == requests_before, "nothing embedded or measured"


def test_eval_of_the_registrys_golden_queries_reports_each_language_as_eval_of_the_file_does(cli_env, registry, tmp_path):
    """A tagged file, in the benchmark's format (each line with its "source"), imported as golden
    queries: eval without a file reports the same languages and figures as eval of the file."""
    path = tmp_path / "tagged.jsonl"
    path.write_text(
        "".join(
            json.dumps({**item, **({"language": LANGUAGES[line]} if line in LANGUAGES else {}), "source": f"dev.jsonl#{line}"}) + "\n"
            for line, item in enumerate(LABELLED, start=1)
        )
    )
    code, imported, stderr = cli_json(cli_env, "golden", "import", "--json", path)
    assert code == 0 and imported["added"] == len(LABELLED) and imported["ignoredFields"] == [{"field": "source", "lines": len(LABELLED)}], (imported, stderr)
    groups = {"de": [4, 5], "en": [1, 2, 3], "untagged": [line for line in range(1, len(LABELLED) + 1) if line not in LANGUAGES]}

    code, report, stderr = cli_json(cli_env, "eval", "--json")

    assert code == 0, (report, stderr)
    assert list(report["byLanguage"]) == ["de", "en", "untagged"]
    for language, lines in groups.items():
        assert report["byLanguage"][language] == {"queries": len(lines), "metrics": pytest.approx(expected_report(lines)[0], abs=1e-9)}, language
    assert report["byLanguage"] == cli_json(cli_env, "eval", "--json", path)[1]["byLanguage"]
    assert "by language:" in run_cli(cli_env, "eval").stdout


def test_eval_fails_rather_than_scoring_without_the_embedder(cli_env, registry):
    env = {**cli_env, "OPENAI_BASE_URL": "http://127.0.0.1:9/v1", "PAYRAIL_EMBEDDING_RETRIES": "0"}

    result = run_cli(env, "eval", "--json", str(registry))

    assert result.returncode == 1
    failure = json.loads(result.stdout)
    assert failure["error"] == "search_unavailable" and "embedding the queries failed" in failure["detail"], failure
    assert "metrics" not in failure


def test_compare_ranks_a_candidate_in_memory_exactly_as_the_registry_ranks(cli_env, openai_fake, registry):
    """The registry's own model as the candidate: every figure, miss and answer the same as the search path's."""
    code, report, stderr = cli_json(cli_env, "eval", "--json", registry, "--compare", FAKE_MODEL)

    assert code == 0, (report, stderr)
    assert report["compare"] == {"model": FAKE_MODEL, "metrics": report["metrics"], "misses": report["misses"]}
    # LABELLED holds queries of both paths (an exact provider name among them), hits and misses.
    assert report["misses"] and report["metrics"] == pytest.approx(expected_report()[0], abs=1e-9)
    with psycopg.connect(cli_env["PAYRAIL_DATABASE_URL"]) as conn:
        assert conn.execute("select count(*) from payrail.embedding_staging").fetchone() == (0,)  # nothing staged or switched
        assert conn.execute("select name from payrail.embedding_model").fetchone() == (FAKE_MODEL,)

    text = run_cli(cli_env, "eval", registry, "--compare", FAKE_MODEL)
    assert text.returncode == 0, text.stderr
    assert re.search(rf"^hit@3 +{report['metrics']['hit@3']:.3f} +{report['metrics']['hit@3']:.3f} +\+0\.000$", text.stdout, flags=re.M)
    assert text.stdout.count(f"{len(report['misses'])} missed by {FAKE_MODEL}") == 2


# The registry's own golden queries: LABELLED imported, then eval without a file.


@pytest.fixture
def golden_registry(cli_env, registry):
    """The registry of `registry`, holding LABELLED as its golden queries (ids 1, 2, ... in order)."""
    code, report, stderr = cli_json(cli_env, "golden", "import", "--json", registry)
    assert (code, report["added"]) == (0, len(LABELLED)), (report, stderr)
    return cli_env


def test_eval_without_a_file_measures_the_registry_golden_queries_through_search(golden_registry, openai_fake):
    metrics, missed_lines = expected_report()
    golden_ids = [g["goldenQueryId"] for g in cli_json(golden_registry, "golden", "list", "--json")[1]["goldenQueries"]]
    requests_before = len(openai_fake.requests)

    code, report, stderr = cli_json(golden_registry, "eval", "--json")

    assert code == 0, (report, stderr)
    assert report["queries"] == len(LABELLED)
    assert report["metrics"] == pytest.approx(metrics, abs=1e-9)
    assert report["belowFloors"] == []
    # Each miss: the golden query, its records as named now, and the three that came instead.
    assert [miss["goldenQueryId"] for miss in report["misses"]] == [golden_ids[line - 1] for line in missed_lines]
    for miss in report["misses"]:
        labelled = LABELLED[golden_ids.index(miss["goldenQueryId"])]
        assert "line" not in miss and miss["query"] == labelled["query"]
        assert [(normalized(p), normalized(m)) for p, m in miss["relevant"]] == [(normalized(p), normalized(m)) for p, m in labelled["relevant"]]
        assert [tuple(pair) for pair in miss["returned"]] == expected_top3(labelled["query"]) and len(miss["returned"]) == 3
    # The draft named as relevant, warned about by golden query.
    assert report["labelWarnings"] == [
        {"goldenQueryId": golden_ids[number], "provider": "Amadeus", "method": "Hotel Search", "problem": "a draft: search never returns it"}
        for number, labelled in enumerate(LABELLED)
        if ["Amadeus", "Hotel Search"] in labelled["relevant"]
    ]
    new_requests = openai_fake.requests[requests_before:]
    assert [len(r["input"]) for r in new_requests] == [len(LABELLED)], "the queries embedded in one batch"

    text = run_cli(golden_registry, "eval")
    assert text.returncode == 0, text.stderr
    assert f"hit@3            {metrics['hit@3']:.3f}" in text.stdout and f"mrr@3            {metrics['mrr@3']:.3f}" in text.stdout
    first_miss = LABELLED[missed_lines[0] - 1]
    assert f"golden query {golden_ids[missed_lines[0] - 1]}: {first_miss['query']}\n   relevant: " in text.stdout
    assert "   returned: " + "; ".join(f"{p} / {m}" for p, m in expected_top3(first_miss["query"])) in text.stdout
    assert "warning: golden query" in text.stderr


def test_eval_of_the_golden_queries_and_of_their_export_agree(golden_registry, tmp_path):
    exported = tmp_path / "golden.jsonl"
    assert run_cli(golden_registry, "golden", "export", exported).returncode == 0
    from_registry = cli_json(golden_registry, "eval", "--json")[1]
    from_file = cli_json(golden_registry, "eval", "--json", exported)[1]
    assert from_file["metrics"] == from_registry["metrics"]
    assert [miss["returned"] for miss in from_file["misses"]] == [miss["returned"] for miss in from_registry["misses"]]


@pytest.mark.parametrize("option, metric", [("--min-hit-at-3", "hit@3"), ("--min-mrr", "mrr@3")])
def test_a_floor_above_the_metric_exits_3_naming_it_and_one_at_it_passes(golden_registry, option, metric):
    value = expected_report()[0][metric]
    floor = round(value + 0.01, 3)

    below = run_cli(golden_registry, "eval", option, str(floor))

    assert below.returncode == 3, below.stderr
    assert f"below the floor: {metric} {value:.3f} < {floor:.3f}" in below.stderr
    assert f"{metric:<16} {value:.3f}" in below.stdout, "the report is printed all the same"
    code, report, _ = cli_json(golden_registry, "eval", "--json", option, str(floor))
    assert code == 3 and report["belowFloors"] == [{"metric": metric, "floor": floor, "value": pytest.approx(value)}]
    assert report["metrics"][metric] == pytest.approx(value)

    at = run_cli(golden_registry, "eval", option, str(math.floor(value * 1000) / 1000))
    assert at.returncode == 0 and "below the floor" not in at.stderr, at.stderr


def test_both_floors_are_checked_and_a_file_takes_them_too(registry, cli_env):
    metrics = expected_report()[0]
    code, report, _ = cli_json(cli_env, "eval", "--json", registry, "--min-hit-at-3", "1", "--min-mrr", "1")
    assert code == 3
    assert [failed["metric"] for failed in report["belowFloors"]] == ["hit@3", "mrr@3"]
    assert cli_json(cli_env, "eval", "--json", registry, "--min-hit-at-3", "0", "--min-mrr", str(metrics["mrr@3"] - 0.001))[0] == 0


@pytest.mark.parametrize("option", ["--min-hit-at-3", "--min-mrr"])
@pytest.mark.parametrize("floor", ["1.5", "-0.1", "high", "0.8x", "nan", "NaN", "-nan", "inf", "-inf", "1e999"])
def test_a_floor_that_is_not_a_number_from_0_to_1_is_a_usage_error_and_measures_nothing(registry, cli_env, openai_fake, option, floor):
    """Before: nan passed the range check (it compares false to both bounds), and no metric is
    below nan, so `--min-mrr nan` made a deployment gate that always passed."""
    requests = len(openai_fake.requests)
    code, failure, _ = cli_json(cli_env, "eval", "--json", registry, option, floor)
    assert (code, failure["error"]) == (2, "invalid_input") and f"Invalid value for '{option}': " in failure["detail"], failure
    assert "nan" not in floor.lower() or f"'{floor}' is not a finite number" in failure["detail"], failure
    assert len(openai_fake.requests) == requests, "the queries were embedded"


def test_eval_of_a_registry_without_golden_queries_says_so_and_exits_2(registry, cli_env):
    code, failure, _ = cli_json(cli_env, "eval", "--json", "--min-hit-at-3", "0")
    assert (code, failure["error"]) == (2, "invalid_input"), failure
    assert "the registry has no golden queries to measure" in failure["detail"], failure
    text = run_cli(cli_env, "eval")
    assert text.returncode == 2 and "golden import FILE" in text.stderr, text.stderr


def test_golden_queries_change_no_answer_of_search(cli_env, registry):
    queries = [labelled["query"] for labelled in LABELLED]
    before = [run_cli(cli_env, "search", "--json", query).stdout for query in queries]
    assert run_cli(cli_env, "golden", "import", registry).returncode == 0
    assert [run_cli(cli_env, "search", "--json", query).stdout for query in queries] == before
