"""The `payrail-embedder` command line against real PostgreSQL, with the fake OpenAI server as the
embedder; run in process with click's CliRunner (payrail_test_support.cli.run_cli says when it
takes a real subprocess instead).

Expected orders come from payrail_test_support.ranking, never written down by hand.
"""

from __future__ import annotations

import json
import operator
import os
import stat
import subprocess
import uuid
from pathlib import Path
from urllib.parse import urlsplit

import click
import numpy as np
import psycopg
import pytest

from payrail_embedder.cli import cli
from payrail_embedder.embedders import record_text
from payrail_embedder.postgres.connection import connect
from payrail_test_support import CLI
from payrail_test_support.cli import cli_import, cli_json, run_cli, run_cli_in_process, without_registry, write_jsonl
from payrail_test_support.devices import fill, small_device
from payrail_test_support.openai_fake import FAKE_DIMENSIONS, FAKE_MODEL, fake_embedding
from payrail_test_support.ranking import cosine_ranking, fake_semantic_path, fake_vector, name_path, normalized
from payrail_test_support.registry_state import group_roles

PUBLIC_FIELDS = {"provider", "method", "urls", "docsUrl", "guidance"}


# --- helpers -------------------------------------------------------------------------------------


def rec(provider, method, guidance, *, enabled=True, urls=(), docs_url=None) -> dict:
    """A record with every field of the JSON Lines format spelled out."""
    return {
        "provider": provider,
        "method": method,
        "urls": list(urls),
        "docsUrl": docs_url,
        "guidance": guidance,
        "enabled": enabled,
    }


def public(record: dict) -> dict:
    """What search shows of a record."""
    return {
        "provider": record["provider"],
        "method": record["method"],
        "urls": record.get("urls", []),
        "docsUrl": record.get("docsUrl"),
        "guidance": record["guidance"],
    }


def as_exported(record: dict) -> dict:
    """The record as export writes it: optional fields filled with their defaults."""
    return {**public(record), "enabled": record.get("enabled") or False}


def export_text(env: dict, path: Path) -> str:
    result = run_cli(env, "export", "-o", str(path))
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    return path.read_text(encoding="utf-8")


def search(env: dict, query: str) -> tuple[int, dict]:
    return cli_json(env, "search", "--json", query)[:2]


def search_matches(env: dict, query: str) -> list[dict]:
    code, answer = search(env, query)
    assert code == 0, answer
    assert set(answer) == {"matches"}, answer
    for match in answer["matches"]:
        assert set(match) == PUBLIC_FIELDS, match
    assert len(answer["matches"]) <= 3
    return answer["matches"]


def stored_row(url: str, provider: str, method: str) -> dict:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            """
            select provider, method, urls, docs_url, guidance, enabled, embedding::real[], embedding_model
            from payrail.provider_methods where provider = %s and method = %s
            """,
            (provider, method),
        ).fetchone()
    assert row is not None, (provider, method)
    keys = ("provider", "method", "urls", "docsUrl", "guidance", "enabled", "embedding", "embedding_model")
    return dict(zip(keys, row))


def assert_embedded_from(row: dict, record: dict) -> None:
    assert row["embedding"] is not None, row
    assert row["embedding_model"] == FAKE_MODEL
    expected = fake_embedding(record_text(record["provider"], record["method"], record["guidance"]))
    np.testing.assert_allclose(np.asarray(row["embedding"], dtype=np.float32), expected, atol=1e-6)


def inputs_of(requests: list[dict]) -> list[str]:
    return [text for request in requests for text in request["input"]]


# --- help ----------------------------------------------------------------------------------------


def walk(command: click.Command, path: tuple[str, ...] = ()):
    yield path, command
    if isinstance(command, click.Group):
        for name, sub in sorted(command.commands.items()):
            yield from walk(sub, path + (name,))


COMMANDS = list(walk(cli))


@pytest.mark.parametrize("path,command", COMMANDS, ids=[" ".join(p) or "(root)" for p, _ in COMMANDS])
def test_every_command_has_help(path, command, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PAYRAIL_", "OPENAI_"))}
    env["PAYRAIL_DATA_DIR"] = str(tmp_path / "unused-embedded-data")
    # In process although no database is configured: help starts no embedded server (the docs'
    # shell tests run `payrail-embedder --help` as a process).
    result = run_cli_in_process(env, *path, "--help")
    assert result.returncode == 0, result.stderr
    usage = " ".join(("Usage: payrail-embedder", *path))
    assert result.stdout.startswith(usage + " "), result.stdout

    assert command.help and command.help.strip(), f"{usage} has no description"
    summary = " ".join(command.help.split("\n\n")[0].split())
    assert summary in " ".join(result.stdout.split()), result.stdout
    if isinstance(command, click.Group):
        listed = result.stdout.split("Commands:", 1)[1]
        for name in command.commands:
            assert f"  {name} " in listed, f"{name} missing from {usage} --help"


# --- import and export ---------------------------------------------------------------------------

ROUND_TRIP = [
    rec(
        "Zürich Verkehr",
        "Fahrplan – Live",
        "Purpose: Live timetables for Zürich, Genève and 東京 ✓ 🚆.\n"
        "Instructions: GET /v1/fahrplan?from=Zürich&to=Bern\twith an API key.\n"
        "Notes: Prices in CHF; café stops included.",
        urls=["https://api.zvv.example/v1/fahrplan?lang=de", "https://zvv.example/preise#tarif"],
        docs_url="https://docs.zvv.example/fahrplan",
    ),
    rec(
        "Acme Travel",
        "Hotel Search",
        "Purpose: Hotel availability.\nInstructions: GET /hotels.\nNotes: draft.",
        enabled=False,
        urls=[],
        docs_url=None,
    ),
    rec("東京データ", "天気予報", "Purpose: 天気予報 for Tokyo.\nInstructions: GET /forecast.", urls=["https://tenki.example/api"]),
    # Optional fields left out: a new record starts disabled, with no URLs and no docs URL.
    {"provider": "Globex", "method": "Room Rates", "guidance": "Purpose: Room rates by city."},
    {
        "provider": "Initech",
        "method": "Flight Search",
        "urls": ["https://api.initech.example/flights"],
        "docsUrl": "https://initech.example/docs",
        "guidance": "Purpose: Flight offers between airports.",
        "enabled": True,
    },
]


def test_import_export_round_trip_changes_nothing(cli_env, openai_fake, tmp_path):
    cli_import(cli_env, tmp_path / "catalog.jsonl", ROUND_TRIP)
    assert sorted(inputs_of(openai_fake.requests)) == sorted(record_text(r["provider"], r["method"], r["guidance"]) for r in ROUND_TRIP)
    requests_after_import = len(openai_fake.requests)

    first = export_text(cli_env, tmp_path / "export-1.jsonl")
    exported = [json.loads(line) for line in first.splitlines()]
    key = operator.itemgetter("provider", "method")
    assert sorted(exported, key=key) == sorted((as_exported(r) for r in ROUND_TRIP), key=key)
    assert [r for r in exported if r["enabled"]], "the enabled state must travel"

    stdout = run_cli(cli_env, "export")
    assert stdout.returncode == 0, stdout.stderr
    assert stdout.stdout == first

    code, report, _ = cli_json(cli_env, "import", "--json", str(tmp_path / "export-1.jsonl"))
    assert code == 0, report
    assert without_registry(report) == {"created": 0, "updated": 0, "unchanged": len(ROUND_TRIP), "refused": [], "saved": True, "notImported": 0}
    assert len(openai_fake.requests) == requests_after_import

    assert export_text(cli_env, tmp_path / "export-2.jsonl") == first
    assert (tmp_path / "export-2.jsonl").read_bytes() == (tmp_path / "export-1.jsonl").read_bytes()


def test_import_reports_created_updated_unchanged_and_embeds_only_changed_content(cli_env, database_url, openai_fake, tmp_path):
    base = [
        rec("Acme Travel", "Hotel Search", "Purpose: Hotel availability by city.", urls=["https://acme.example/h"]),
        rec("Globex", "Room Rates", "Purpose: Room rates by city.", docs_url="https://globex.example/docs"),
        rec("Initech", "Flight Search", "Purpose: Flight offers.", enabled=False),
    ]
    cli_import(cli_env, tmp_path / "base.jsonl", base)
    requests_before = len(openai_fake.requests)
    before = stored_row(database_url, "Acme Travel", "Hotel Search")
    assert_embedded_from(before, base[0])
    vector_before = before["embedding"]

    # URLs only, and no "enabled" key: the record stays enabled and keeps its vector.
    urls_edit = dict(base[0], urls=["https://acme.example/hotels", "https://acme.example/pricing"])
    urls_edit["docsUrl"] = "https://acme.example/docs"
    del urls_edit["enabled"]
    code, report, _ = cli_json(cli_env, "import", "--json", write_jsonl(tmp_path / "urls.jsonl", [urls_edit, base[1], base[2]]))
    assert code == 0, report
    assert without_registry(report) == {"created": 0, "updated": 1, "unchanged": 2, "refused": [], "saved": True, "notImported": 0}
    assert len(openai_fake.requests) == requests_before
    row = stored_row(database_url, "Acme Travel", "Hotel Search")
    assert (row["urls"], row["docsUrl"], row["enabled"]) == (urls_edit["urls"], urls_edit["docsUrl"], True)
    np.testing.assert_array_equal(np.asarray(row["embedding"]), np.asarray(vector_before))

    guidance_edit = dict(base[1], guidance="Purpose: Nightly room rates by city and date.\nNotes: paid.")
    code, report, _ = cli_json(cli_env, "import", "--json", write_jsonl(tmp_path / "guidance.jsonl", [urls_edit, guidance_edit, base[2]]))
    assert code == 0, report
    assert without_registry(report) == {"created": 0, "updated": 1, "unchanged": 2, "refused": [], "saved": True, "notImported": 0}
    new_requests = openai_fake.requests[requests_before:]
    assert [r["input"] for r in new_requests] == [[record_text(guidance_edit["provider"], guidance_edit["method"], guidance_edit["guidance"])]]
    row = stored_row(database_url, "Globex", "Room Rates")
    assert (row["guidance"], row["enabled"]) == (guidance_edit["guidance"], True)
    assert_embedded_from(row, guidance_edit)


GOOD_UPDATE = rec("Acme Travel", "Hotel Search", "Purpose: Hotel availability, edited.", enabled=False)
GOOD_NEW = rec("Globex", "Room Rates", "Purpose: Room rates by city.", enabled=True, urls=["https://globex.example/r"])
BAD_LINES = {
    "http_url": (
        json.dumps(rec("Initech", "Flight Search", "Purpose: Flights.", urls=["http://initech.example/flights"])).encode(),
        "provider_methods_urls_https_check",
    ),
    "malformed_json": (b'{"provider": "Initech", "method": "Flight Search", "guidance": "x"', "malformed JSON"),
    "duplicate_key": (
        json.dumps(rec("  GLOBEX ", "room   RATES", "Purpose: The same method again.")).encode(),
        "same provider and method as",
    ),
    "invalid_utf8": (b'{"provider": "Initech \xff\xfe", "method": "Flight Search", "guidance": "x"}', "UTF-8"),
}


@pytest.mark.parametrize("kind", BAD_LINES)
def test_import_refuses_a_file_with_a_bad_line(kind, cli_env, database_url, tmp_path):
    with psycopg.connect(database_url) as conn:
        conn.execute(
            "insert into payrail.provider_methods (provider, method, guidance) values (%s, %s, %s)",
            ("Acme Travel", "Hotel Search", "Purpose: Hotel availability."),
        )
    before = export_text(cli_env, tmp_path / "before.jsonl")

    bad_line, reason = BAD_LINES[kind]
    path = tmp_path / "catalog.jsonl"
    with open(path, "wb") as file:
        # Line 3 is blank: line numbers are the file's own.
        file.write(json.dumps(GOOD_UPDATE).encode() + b"\n" + json.dumps(GOOD_NEW).encode() + b"\n\n" + bad_line + b"\n")
    bad_number = 4

    plain = run_cli(cli_env, "import", str(path))
    assert plain.returncode != 0
    assert f"{path}:{bad_number}: " in plain.stderr and reason in plain.stderr, plain.stderr
    assert "nothing saved" in plain.stdout

    code, report, _ = cli_json(cli_env, "import", "--json", str(path))
    assert code != 0
    assert report["saved"] is False
    assert len(report["refused"]) == 1, report
    refusal = report["refused"][0]
    assert (refusal["source"], refusal["line"]) == (str(path), bad_number)
    assert reason in refusal["reason"], refusal
    if kind == "duplicate_key":
        assert f"{path}:2" in refusal["reason"]
    assert export_text(cli_env, tmp_path / "after-refusal.jsonl") == before

    code, report, _ = cli_json(cli_env, "import", "--skip-invalid", "--json", str(path))
    assert report["saved"] is True, report
    assert (report["created"], report["updated"], report["unchanged"]) == (1, 1, 0)
    assert [(r["line"], reason in r["reason"]) for r in report["refused"]] == [(bad_number, True)]
    saved = [json.loads(line) for line in export_text(cli_env, tmp_path / "after-skip.jsonl").splitlines()]
    assert sorted(saved, key=lambda r: r["provider"]) == [as_exported(GOOD_UPDATE), as_exported(GOOD_NEW)]


def test_an_import_line_breaking_several_rules_names_every_field_and_rule_in_words(cli_env, database_url, tmp_path):
    """The import report says what the backoffice and edit say: every broken rule at once, each
    with its field, the rule and what to do from payrail.rules, never PostgreSQL's text."""
    bad = rec("", "Flight Search", "Purpose: Flights.", urls=["http://initech.example/flights"], docs_url="ftp://docs.initech.example")
    path = write_jsonl(tmp_path / "bad.jsonl", [GOOD_NEW, bad])
    with psycopg.connect(database_url) as conn:
        words = dict(conn.execute("select constraint_name, rule || '. ' || remedy from payrail.rules").fetchall())
    # The list's rule names the URL that breaks it.
    words["provider_methods_urls_https_check"] = words["provider_methods_urls_https_check"].replace(
        ". Write each", '; not so: "http://initech.example/flights". Write each', 1
    )

    code, report, _ = cli_json(cli_env, "import", "--json", path)
    assert (code, report["saved"], report["notImported"]) == (2, False, 1), report
    [refusal] = report["refused"]
    assert refusal["reason"] == "; ".join(
        f"{field}: {words[constraint]} ({constraint})"
        for field, constraint in (
            ("provider", "provider_methods_provider_check"),
            ("urls", "provider_methods_urls_https_check"),
            ("docsUrl", "provider_methods_docs_url_check"),
        )
    ), refusal
    assert "violates" not in refusal["reason"]

    plain = run_cli(cli_env, "import", path)
    assert plain.returncode == 2 and f"refused {path}:2: {refusal['reason']}" in plain.stderr, plain.stderr
    assert "Fix the refused lines and import again, or import with --skip-invalid" in plain.stderr
    assert plain.stdout == "0 created, 0 updated, 0 unchanged, 1 refused: nothing saved: 1 valid line was not imported either\n"
    with psycopg.connect(database_url) as conn:
        assert conn.execute("select count(*) from payrail.provider_methods").fetchone()[0] == 0  # nothing saved


# --- search --------------------------------------------------------------------------------------

NAME_CATALOG = [
    rec("Hotel", "Search", "Purpose: A provider called Hotel.", urls=["https://hotel.example/search"]),
    rec("Hotel Search", "Lookup", "Purpose: A provider called Hotel Search.", docs_url="https://hs.example/docs"),
    rec("Acme Travel", "Hotel Search", "Purpose: Hotel availability.", urls=["https://acme.example/hotels"]),
    rec("Globex", "Hotel  Search", "Purpose: Hotel availability at Globex."),
    rec("Aardvark", "Hotel Search", "Purpose: A draft that sorts first.", enabled=False),
    rec("Acme Travel", "Flight Search", "Purpose: Flights."),
    rec("Acme Travel", "Car Rental", "Purpose: Cars."),
    rec("Acme Travel", "Rail Pass", "Purpose: Trains."),
    rec("Acme Travel", "Airport Transfer", "Purpose: A draft that sorts first.", enabled=False),
    rec("Initech", "Flight Search", "Purpose: Flights at Initech."),
]


def test_search_name_path_returns_documented_order_without_embedding(cli_env, openai_fake, tmp_path):
    cli_import(cli_env, tmp_path / "catalog.jsonl", NAME_CATALOG)
    requests_after_import = len(openai_fake.requests)

    queries = [
        "Acme Travel",  # a provider with four enabled methods and one draft
        "flight search",  # a method of two providers
        "  acme   TRAVEL /  hotel SEARCH ",  # a pair, "provider / method"
        "ACME travel\tHotel search",  # a pair, "provider method"
        "Hotel Search",  # a pair, a provider and three methods (one of them a draft) at once
    ]
    for query in queries:
        expected = name_path(NAME_CATALOG, query)
        assert expected, f"{query!r} should take the name path"
        assert search_matches(cli_env, query) == [public(r) for r in expected], query
    assert len(name_path(NAME_CATALOG, "Acme Travel")) == 3
    assert len({normalized(r["provider"]) for r in name_path(NAME_CATALOG, "Hotel Search")}) == 3

    assert len(openai_fake.requests) == requests_after_import, "the name path needs no embedding"


SEMANTIC_CATALOG = [
    rec(
        "Acme Travel",
        "Hotel Search",
        "Purpose: live hotel availability and nightly room rates for a city and dates.\nInstructions: GET /v1/hotels with an API key.\nNotes: paid per call.",
        urls=["https://acme.example/hotels"],
        docs_url="https://acme.example/docs",
    ),
    rec("Globex", "Room Rates", "Purpose: average room rates by city, updated daily.\nNotes: free tier."),
    rec("Alpha Beta", "Gamma", "Purpose: weather forecast data for farms.\nInstructions: GET /forecast."),
    # The same words as the record above: an exact tie, broken by the normalized names.
    rec("Gamma Beta", "Alpha", "Purpose: weather forecast data for farms.\nInstructions: GET /forecast."),
    rec("Initech", "Flight Search", "Purpose: flight offers between airports.\nInstructions: POST /search."),
    rec("Umbrella", "Hotel Availability", "Purpose: live hotel availability and room rates", enabled=False),
    rec("Zeta", "Forecast", "Purpose: weather forecast data for farms alpha beta gamma", enabled=False),
]


def test_search_semantic_path_orders_by_cosine_distance(cli_env, openai_fake, tmp_path):
    cli_import(cli_env, tmp_path / "catalog.jsonl", SEMANTIC_CATALOG)

    for query in ("live hotel availability and room rates", "alpha beta gamma weather forecast for farms"):
        assert name_path(SEMANTIC_CATALOG, query) == []
        # A draft is the nearest of all: only the enabled rule keeps it out.
        assert cosine_ranking(SEMANTIC_CATALOG, fake_embedding(query), fake_vector)[0][1]["enabled"] is False
        requests_before = len(openai_fake.requests)

        matches = search_matches(cli_env, query)
        assert matches == [public(r) for r in fake_semantic_path(SEMANTIC_CATALOG, query)], query
        assert len(matches) == 3
        assert [r["input"] for r in openai_fake.requests[requests_before:]] == [[query]]

    enabled = [r for r in SEMANTIC_CATALOG if r["enabled"]]
    tie = cosine_ranking(enabled, fake_embedding("alpha beta gamma weather forecast for farms"), fake_vector)
    assert tie[0][0] == tie[1][0], "the second query must exercise the tie-break"


def test_search_refuses_empty_and_too_long_queries(cli_env, openai_fake):
    for query in ("", "   ", "x" * 2001):
        code, answer = search(cli_env, query)
        assert code != 0
        assert set(answer) == {"error", "detail"}, answer
        assert answer["error"] == "invalid_query"
        assert answer["detail"].strip()
    assert openai_fake.requests == []

    code, answer = search(cli_env, "x" * 2000)
    assert code == 0, answer
    assert answer == {"matches": []}


def test_search_with_the_database_down_is_unavailable(openai_fake, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PAYRAIL_", "OPENAI_"))}
    env.update(
        PAYRAIL_DATABASE_URL="postgresql://postgres@/x?host=/nonexistent",
        PAYRAIL_DATA_DIR=str(tmp_path / "unused-embedded-data"),
        PAYRAIL_EMBEDDER="openai",
        PAYRAIL_EMBEDDING_MODEL=FAKE_MODEL,
        OPENAI_BASE_URL=openai_fake.base_url,
        OPENAI_API_KEY="test-key",
    )
    for query in ("Acme Travel", "find live hotel availability through a paid API"):
        code, answer = search(env, query)
        assert code != 0
        assert set(answer) == {"error", "detail"}, answer
        assert answer["error"] == "search_unavailable"
        assert answer["detail"].strip()


# --- sync and the operator's psql workflow -------------------------------------------------------

DRAFTS = [
    rec("Acme Travel", "Hotel Search", "Purpose: live hotel availability by city.", enabled=False),
    rec("Globex", "Room Rates", "Purpose: nightly room rates and taxes.", enabled=False),
    rec("Initech", "Flight Search", "Purpose: flight offers between airports.", enabled=False),
]


def insert_rows(url: str, records: list[dict]) -> None:
    with psycopg.connect(url) as conn:
        for r in records:
            conn.execute(
                "insert into payrail.provider_methods (provider, method, urls, docs_url, guidance) values (%s, %s, %s, %s, %s)",
                (r["provider"], r["method"], r["urls"], r["docsUrl"], r["guidance"]),
            )


def test_sync_embeds_drafts_inserted_with_sql(cli_env, database_url, openai_fake):
    # One record already embedded by the write path, written directly: sync must leave it alone.
    embedded = rec("Hooli", "Mail Send", "Purpose: send transactional mail.", urls=["https://hooli.example/mail"])
    with connect(database_url) as conn:
        conn.execute("select payrail.set_embedding_model(%s, %s)", (FAKE_MODEL, FAKE_DIMENSIONS))
        conn.execute(
            """
            insert into payrail.provider_methods
              (provider, method, urls, guidance, enabled, embedding, embedding_model, embedding_content_hash)
            values (%s, %s, %s, %s, true, %s, %s, payrail._content_hash(%s, %s, %s))
            """,
            (
                embedded["provider"],
                embedded["method"],
                embedded["urls"],
                embedded["guidance"],
                fake_embedding(record_text(embedded["provider"], embedded["method"], embedded["guidance"])),
                FAKE_MODEL,
                embedded["provider"],
                embedded["method"],
                embedded["guidance"],
            ),
        )
    insert_rows(database_url, DRAFTS)
    pending = [f"{r['provider']} / {r['method']}" for r in DRAFTS]

    code, dry, _ = cli_json(cli_env, "sync", "--dry-run", "--json")
    assert code == 0, dry
    assert list(dry) == ["wouldEmbed"] and sorted(dry["wouldEmbed"]) == sorted(pending)
    assert openai_fake.requests == []
    assert all(stored_row(database_url, r["provider"], r["method"])["embedding"] is None for r in DRAFTS)

    code, summary, _ = cli_json(cli_env, "sync", "--json")
    assert code == 0, summary
    assert (summary["embedded"], summary["changedMeanwhile"]) == (len(DRAFTS), 0), summary
    assert sorted(inputs_of(openai_fake.requests)) == sorted(record_text(r["provider"], r["method"], r["guidance"]) for r in DRAFTS)
    # The dry run listed the records in the order sync then embedded them.
    name_of_text = {record_text(r["provider"], r["method"], r["guidance"]): f"{r['provider']} / {r['method']}" for r in DRAFTS}
    assert dry["wouldEmbed"] == [name_of_text[text] for text in inputs_of(openai_fake.requests)]
    for r in DRAFTS:
        row = stored_row(database_url, r["provider"], r["method"])
        assert row["enabled"] is False
        assert_embedded_from(row, r)

    assert cli_json(cli_env, "sync", "--dry-run", "--json")[:2] == (0, {"wouldEmbed": []})
    requests_after_sync = len(openai_fake.requests)
    code, summary, _ = cli_json(cli_env, "sync", "--json")
    assert (code, summary["embedded"], summary["changedMeanwhile"]) == (0, 0, 0), summary
    assert len(openai_fake.requests) == requests_after_sync

    with psycopg.connect(database_url) as conn:
        enabled = conn.execute("update payrail.provider_methods set enabled = true where not enabled returning provider").fetchall()
    assert len(enabled) == len(DRAFTS)

    catalog = [embedded] + [dict(r, enabled=True) for r in DRAFTS]
    query = "nightly room rates for a hotel"
    assert search_matches(cli_env, query) == [public(r) for r in fake_semantic_path(catalog, query)]
    assert search_matches(cli_env, "Globex") == [public(dict(DRAFTS[1], enabled=True))]


def test_operator_edits_guidance_in_psql_then_syncs_and_enables(cli_env, database_url, openai_fake, tmp_path):
    original = rec("Acme Travel", "Hotel Search", "Purpose: hotel availability.", urls=["https://acme.example/h"])
    cli_import(cli_env, tmp_path / "catalog.jsonl", [original])
    before = stored_row(database_url, "Acme Travel", "Hotel Search")
    assert_embedded_from(before, original)
    vector_before = before["embedding"]
    edited = dict(original, guidance="Purpose: live hotel availability and nightly rates.\nNotes: paid per call.")
    where = "where provider = 'Acme Travel' and method = 'Hotel Search'"

    with psycopg.connect(database_url) as conn:
        with pytest.raises(psycopg.errors.CheckViolation) as refused:
            conn.execute(f"update payrail.provider_methods set guidance = %s {where}", (edited["guidance"],))
        conn.rollback()
    assert refused.value.sqlstate == "23514"
    assert refused.value.diag.constraint_name == "provider_methods_enabled_needs_embedding_check"
    assert "payrail-embedder" in (refused.value.diag.message_hint or "")
    row = stored_row(database_url, "Acme Travel", "Hotel Search")
    assert (row["guidance"], row["enabled"]) == (original["guidance"], True)
    np.testing.assert_array_equal(np.asarray(row["embedding"]), np.asarray(vector_before))

    with psycopg.connect(database_url) as conn:
        # URL edits need no new vector, even while enabled.
        conn.execute(f"update payrail.provider_methods set urls = %s {where}", (["https://acme.example/hotels"],))
        conn.execute(f"update payrail.provider_methods set guidance = %s, enabled = false {where}", (edited["guidance"],))
    edited["urls"] = ["https://acme.example/hotels"]
    row = stored_row(database_url, "Acme Travel", "Hotel Search")
    assert (row["guidance"], row["enabled"], row["embedding"]) == (edited["guidance"], False, None)
    assert search_matches(cli_env, "Acme Travel") == []

    code, summary, _ = cli_json(cli_env, "sync", "--json")
    assert code == 0, summary
    assert summary["embedded"] == 1, summary
    assert_embedded_from(stored_row(database_url, "Acme Travel", "Hotel Search"), edited)

    with psycopg.connect(database_url) as conn:
        conn.execute(f"update payrail.provider_methods set enabled = true {where}")
    assert search_matches(cli_env, "acme travel") == [public(edited)]


def test_deployment_login_roles_run_the_workflow(cli_env, database_url, openai_fake):
    """A deployment grants the group roles to its login roles (DESIGN: Roles) and works through them."""
    suffix = uuid.uuid4().hex[:10]
    operator, agent, password = f"payrail_test_op_{suffix}", f"payrail_test_agent_{suffix}", uuid.uuid4().hex

    def url_for(role: str) -> str:
        parts = urlsplit(database_url)
        host = f"{parts.hostname or ''}{f':{parts.port}' if parts.port else ''}"
        return parts._replace(netloc=f"{role}:{password}@{host}").geturl()

    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f"create role {operator} login password '{password}' in role payrail_operator, payrail_embedder")
        conn.execute(f"create role {agent} login password '{password}' in role payrail_agent")
    try:
        with psycopg.connect(url_for(operator)) as conn:
            conn.execute(
                "insert into payrail.provider_methods (provider, method, guidance) values (%s, %s, %s)",
                ("Acme Travel", "Hotel Search", "Purpose: hotel availability."),
            )
        code, summary, _ = cli_json({**cli_env, "PAYRAIL_DATABASE_URL": url_for(operator)}, "sync", "--json")
        assert (code, summary.get("embedded")) == (0, 1), summary
        with psycopg.connect(url_for(operator)) as conn:
            conn.execute("update payrail.provider_methods set enabled = true")

        agent_env = {**cli_env, "PAYRAIL_DATABASE_URL": url_for(agent)}
        matches = search_matches(agent_env, "Acme Travel")
        assert [(m["provider"], m["method"]) for m in matches] == [("Acme Travel", "Hotel Search")]
        with psycopg.connect(url_for(agent)) as conn:
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute("select provider from payrail.provider_methods")
    finally:
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute(f"drop role if exists {operator}")
            conn.execute(f"drop role if exists {agent}")


def test_db_roles_says_the_group_roles_exist_and_changes_nothing(cli_env, database_url):
    """On a server that has them (db apply made them), as a rerun finds them; creating them on a
    new server is tests/test_operations.py's."""
    roles = ["payrail_agent", "payrail_operator", "payrail_embedder"]
    before = group_roles(database_url)
    assert [role["rolname"] for role in before] == sorted(roles)
    assert cli_json(cli_env, "db", "roles", "--json")[:2] == (0, {"created": [], "existing": roles})
    result = run_cli(cli_env, "db", "roles")
    assert (result.returncode, result.stdout.splitlines()) == (0, [f"{role} exists already" for role in roles])
    assert group_roles(database_url) == before


def test_db_status_never_prints_the_password_of_the_url(cli_env):
    """Not even a wrong one: status says which database it tried, without the secret."""
    parts = urlsplit(cli_env["PAYRAIL_DATABASE_URL"])
    secret = f"not-the-password-{uuid.uuid4().hex}"
    wrong = parts._replace(netloc=f"{parts.username or 'postgres'}:{secret}@{parts.hostname or ''}").geturl()
    for args in (["db", "status"], ["db", "status", "--json"]):
        result = run_cli({**cli_env, "PAYRAIL_DATABASE_URL": wrong}, *args)
        assert secret not in result.stdout + result.stderr, result
        assert urlsplit(wrong).path.lstrip("/") in result.stdout, result


# --- numbers and full disks --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args, env",
    [
        (("model", "tune", "--validation-fraction", "nan"), {}),
        (("model", "tune", "--learning-rate", "nan"), {}),
        (("model", "tune", "--learning-rate", "inf"), {}),
        (("--embedding-timeout", "nan", "search", "hotel"), {}),
        (("--embedding-timeout", "inf", "search", "hotel"), {}),
        (("search", "hotel"), {"PAYRAIL_EMBEDDING_TIMEOUT": "nan"}),
        (("db", "apply", "--lock-timeout", "nan"), {}),
        (("db", "apply", "--lock-timeout", "inf"), {}),
    ],
    ids=lambda value: " ".join(value) if isinstance(value, tuple) else " ".join(f"{k}={v}" for k, v in value.items()),
)
def test_a_number_option_refuses_nan_and_infinity_before_anything_runs(args, env, tmp_path):
    """nan passes every click.FloatRange and an infinity one open on its side: a deadline of inf
    seconds is none, a learning rate of nan trains garbage."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("PAYRAIL_", "OPENAI_"))}
    # Never connected to: the option is refused first.
    result = run_cli_in_process({**base, "PAYRAIL_DATABASE_URL": "postgresql:///unused", **env}, *args)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert "is not a finite number" in result.stderr or "is not in the range" in result.stderr, result.stderr


def test_an_export_onto_a_full_disk_says_so_with_its_path_and_leaves_the_file_as_it_was(cli_env, tmp_path):
    """Before: a traceback (OSError: [Errno 28]), and the file cut short where the disk filled up,
    which read as a whole, shorter catalog."""
    records = [rec(f"Provider {n}", "Lookup", f"Purpose: record {n}.") for n in range(3)]
    cli_import(cli_env, tmp_path / "catalog.jsonl", records)
    assert run_cli(cli_env, "golden", "add", "record one", "--relevant", "Provider 1 / Lookup").returncode == 0
    with small_device(tmp_path / "disk", 1) as disk:
        earlier = disk / "export.jsonl"
        earlier.write_text("an earlier export\n")
        earlier.chmod(0o640)
        filler = fill(disk)

        for args in (("export", "-o", earlier), ("golden", "export", earlier), ("export", "-o", disk / "new.jsonl")):
            result = run_cli(cli_env, *args)
            where = args[-1]
            assert (result.returncode, result.stderr) == (1, f"Error: unavailable: the disk is full: no space left on the device that holds {where}\n")
            assert earlier.read_text() == "an earlier export\n"
            assert sorted(p.name for p in disk.iterdir()) == ["export.jsonl", "filler"], "a partial file is left"

        # Standard output redirected to a file on the full disk (`export > FILE`): named as such.
        with open(disk / "redirected.jsonl", "wb") as redirected:
            process = subprocess.run([str(CLI), "export"], env=cli_env, stdout=redirected, stderr=subprocess.PIPE, text=True, timeout=60)
        assert (process.returncode, process.stderr) == (
            1,
            f"Error: unavailable: the disk is full: no space left on the device that holds standard output ({disk / 'redirected.jsonl'})\n",
        )

        (disk / "redirected.jsonl").unlink()
        filler.unlink()
        assert export_text(cli_env, earlier) == "".join(json.dumps(as_exported(r)) + "\n" for r in records)
        assert stat.S_IMODE(earlier.stat().st_mode) == 0o640, "the file's permissions are kept"
        assert sorted(p.name for p in disk.iterdir()) == ["export.jsonl"]


def test_an_export_to_a_full_device_says_so(cli_env, tmp_path):
    """/dev/full refuses every write with ENOSPC: a device is written as it is, not replaced."""
    cli_import(cli_env, tmp_path / "catalog.jsonl", [rec("Provider", "Lookup", "Purpose: a record.")])
    result = run_cli(cli_env, "export", "-o", "/dev/full")
    assert (result.returncode, result.stderr) == (1, "Error: unavailable: the disk is full: no space left on the device that holds /dev/full\n")
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode)
