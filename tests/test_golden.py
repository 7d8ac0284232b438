"""payrail-embedder golden: the registry's golden queries, written and read through the command
line (in process, click's CliRunner) and the Python API a page calls, against a real registry.

What the database must have kept is read back with SQL, never from the command under test.
"""

from __future__ import annotations

import json

import psycopg
import pytest

from payrail_embedder.postgres.connection import connect
from payrail_embedder.registry import golden
from payrail_embedder.registry.write import Refused, delete_record
from payrail_test_support.cli import cli_import, cli_json, command_line_author, run_cli
from payrail_test_support.logs import events
from payrail_test_support.servers import login_url

CATALOG = [
    {"provider": "Stripe", "method": "Create a PaymentIntent", "urls": [], "docsUrl": None, "guidance": "Purpose: Charge a customer card.", "enabled": True},
    {
        "provider": "Stripe",
        "method": "Create a refund",
        "urls": [],
        "docsUrl": None,
        "guidance": "Purpose: Give money back for an earlier charge.",
        "enabled": True,
    },
    {"provider": "Twilio", "method": "Send an SMS", "urls": [], "docsUrl": None, "guidance": "Purpose: Send a text message to a phone.", "enabled": True},
    {
        "provider": "Zürich Telekom",
        "method": "Nachricht senden",
        "urls": [],
        "docsUrl": None,
        "guidance": "Purpose: Send a message in Switzerland.",
        "enabled": True,
    },
    {"provider": "Amadeus", "method": "Hotel Search", "urls": [], "docsUrl": None, "guidance": "Purpose: Find hotels.", "enabled": False},
]


@pytest.fixture
def registry(cli_env, tmp_path):
    cli_import(cli_env, tmp_path / "catalog.jsonl", CATALOG)
    return cli_env


def stored_golden(url: str) -> list[tuple]:
    """Each golden query with its records' ids in order, who added it and when, read with SQL."""
    with psycopg.connect(url) as conn:
        return conn.execute(
            """select g.id, g.query, g.added_by, g.added_at, array_agg(r.record_id order by r.ordinal)
               from payrail.golden_queries as g join payrail.golden_query_records as r on r.golden_query_id = g.id
               group by g.id order by g.id"""
        ).fetchall()


def record_id(url: str, provider: str, method: str) -> int:
    with psycopg.connect(url) as conn:
        return conn.execute("select id from payrail.provider_methods where provider = %s and method = %s", (provider, method)).fetchone()[0]


def write_lines(path, lines: list[str]):
    path.write_bytes("".join(line + "\n" for line in lines).encode("utf-8"))
    return path


def test_add_list_and_remove_a_golden_query(registry, database_url):
    code, added, stderr = cli_json(
        registry,
        "golden",
        "add",
        "--json",
        "give money back and tell them by text",
        "--relevant",
        "Stripe / Create a refund",
        "--relevant",
        "twilio  SEND AN SMS",
    )

    assert code == 0, (added, stderr)
    [(golden_id, query, added_by, added_at, ids)] = stored_golden(database_url)
    assert (query, ids) == (
        "give money back and tell them by text",
        [record_id(database_url, "Stripe", "Create a refund"), record_id(database_url, "Twilio", "Send an SMS")],
    )
    # Added from the command line as a shared superuser: the operating-system user, said as such.
    assert added_by == command_line_author(psycopg.conninfo.conninfo_to_dict(database_url)["user"])
    assert added == {
        "goldenQueryId": golden_id,
        "query": query,
        "language": None,
        "addedBy": added_by,
        "addedAt": added_at.isoformat(),
        "relevant": [
            {"recordId": ids[0], "provider": "Stripe", "method": "Create a refund", "enabled": True},
            {"recordId": ids[1], "provider": "Twilio", "method": "Send an SMS", "enabled": True},
        ],
    }
    assert cli_json(registry, "golden", "list", "--json")[1] == {"goldenQueries": [added]}
    text = run_cli(registry, "golden", "list").stdout
    assert text == (
        f"golden query {golden_id}: give money back and tell them by text\n"
        "   relevant: Stripe / Create a refund; Twilio / Send an SMS\n"
        f"   added {added_at.isoformat()} by {added_by}\n"
        "1 golden query\n"
    )

    removed = run_cli(registry, "golden", "remove", "GIVE money back and tell them  by text")
    assert removed.returncode == 0, removed.stderr
    assert removed.stdout.startswith(f"removed golden query {golden_id}: give money back and tell them by text\n")
    assert stored_golden(database_url) == []
    assert run_cli(registry, "golden", "list").stdout == "0 golden queries\n"


def test_remove_is_all_or_nothing_and_names_what_it_does_not_know(registry, database_url):
    for query in ("charge a card", "send a text"):
        assert run_cli(registry, "golden", "add", query, "--relevant", "Stripe / Create a PaymentIntent").returncode == 0
    before = stored_golden(database_url)

    code, failure, _ = cli_json(registry, "golden", "remove", "--json", "charge a card", "never added", "send a text")

    assert (code, failure["error"]) == (2, "invalid_input"), failure
    assert 'nothing removed: there is no golden query "never added"' in failure["detail"], failure
    assert stored_golden(database_url) == before


@pytest.mark.parametrize(
    "args, code, detail",
    [
        (("charge a card", "--relevant", "Twilio / Send an SMS"), "invalid_input", 'golden query "charge a card" exists already (added '),
        (("  CHARGE  a card ", "--relevant", "Twilio / Send an SMS"), "invalid_input", "exists already"),
        (
            ("pay by card", "--relevant", "Stripe / Create a PaymentIntent", "--relevant", "stripe create a paymentintent"),
            "invalid_input",
            'names provider method "Stripe / Create a PaymentIntent" twice',
        ),
        (("pay by card", "--relevant", "Nobody / Nothing"), "unknown_record", 'no provider method is named "Nobody / Nothing"'),
        (("\u200b ", "--relevant", "Stripe / Create a PaymentIntent"), "invalid_query", "query is empty"),
        (("x" * 2001, "--relevant", "Stripe / Create a PaymentIntent"), "invalid_query", "2001 characters long"),
        (("pay by card",), "invalid_input", "Missing option '--relevant'"),
    ],
)
def test_add_refuses_in_words_and_adds_nothing(registry, database_url, args, code, detail):
    assert run_cli(registry, "golden", "add", "charge a card", "--relevant", "Stripe / Create a PaymentIntent").returncode == 0
    before = stored_golden(database_url)

    result_code, failure, _ = cli_json(registry, "golden", "add", "--json", *args)

    assert (result_code, failure["error"]) == (2, code), failure
    assert detail in failure["detail"], failure
    assert stored_golden(database_url) == before


def test_a_repeated_golden_query_says_how_to_remove_it_from_the_command_line_and_the_backoffice(registry, database_url):
    assert run_cli(registry, "golden", "add", "charge a card", "--relevant", "Stripe / Create a PaymentIntent").returncode == 0

    _, failure, _ = cli_json(registry, "golden", "add", "--json", "Charge a card", "--relevant", "Twilio / Send an SMS")

    assert 'To label it anew, remove it first (`payrail-embedder golden remove "Charge a card"`, or the Remove button' in failure["detail"], failure
    assert "payrail.remove_golden_query" not in failure["detail"], failure


def test_add_reads_the_query_from_standard_input(registry, database_url):
    query = 'a "quoted" question\nover two lines'
    result = run_cli(registry, "golden", "add", "-", "--relevant", "Twilio / Send an SMS", input=query + "\n")
    assert result.returncode == 0, result.stderr
    assert [row[1] for row in stored_golden(database_url)] == [query]


GOLDEN_LINES = [
    # Keys in order, pairs in the order given (not alphabetical), non-ASCII as it is, the line
    # breaks other readers split at escaped, quotes and a newline in the query escaped.
    '{"query": "rembourser un paiement, puis prévenir par SMS", "relevant": [["Twilio", "Send an SMS"], ["Stripe", "Create a refund"]]}',
    '{"query": "Nachricht nach Zürich schicken\\u2028bitte", "relevant": [["Zürich Telekom", "Nachricht senden"]], "language": "de"}',
    '{"query": "the \\"hotel\\" one\\nsecond line", "relevant": [["Amadeus", "Hotel Search"]]}',
    '{"query": "charge a card 💳", "relevant": [["Stripe", "Create a PaymentIntent"], ["Stripe", "Create a refund"], ["Twilio", "Send an SMS"]]}',
]


def test_export_then_import_round_trips_byte_for_byte(registry, database_url, tmp_path):
    source = write_lines(tmp_path / "golden.jsonl", GOLDEN_LINES)
    code, report, stderr = cli_json(registry, "golden", "import", "--json", source)
    assert (code, report) == (0, {"added": 4, "unchanged": 0, "refused": [], "saved": True, "ignoredFields": []}), (report, stderr)

    exported = tmp_path / "exported.jsonl"
    assert run_cli(registry, "golden", "export", exported).returncode == 0
    assert exported.read_bytes() == source.read_bytes(), "a file written as export writes exports the same bytes"
    assert run_cli(registry, "golden", "export").stdout.encode("utf-8") == source.read_bytes()
    assert run_cli(registry, "golden", "export", "-").stdout.encode("utf-8") == source.read_bytes()

    # Into a registry that had them removed: the same bytes again, ids and times new.
    before = stored_golden(database_url)
    queries = [json.loads(line)["query"] for line in GOLDEN_LINES]
    assert run_cli(registry, "golden", "remove", *queries).returncode == 0
    assert stored_golden(database_url) == []
    assert run_cli(registry, "golden", "import", exported).returncode == 0
    again = tmp_path / "again.jsonl"
    assert run_cli(registry, "golden", "export", again).returncode == 0
    assert again.read_bytes() == source.read_bytes()
    assert [row[1:3] + row[4:] for row in stored_golden(database_url)] == [row[1:3] + row[4:] for row in before]

    # Importing the same file again changes nothing.
    kept = stored_golden(database_url)
    code, report, _ = cli_json(registry, "golden", "import", "--json", exported)
    assert (code, report) == (0, {"added": 0, "unchanged": 4, "refused": [], "saved": True, "ignoredFields": []})
    assert stored_golden(database_url) == kept
    assert run_cli(registry, "golden", "import", exported).stdout == "0 golden queries added, 4 unchanged\n"


def test_export_writes_each_record_by_its_current_name(registry, database_url, tmp_path):
    """Labels are kept by record: an import's spelling and a later rename both give way to the name it has now."""
    source = write_lines(tmp_path / "golden.jsonl", ['{"query": "text a customer", "relevant": [["TWILIO", "send  an sms"]]}'])
    assert run_cli(registry, "golden", "import", source).returncode == 0
    assert run_cli(registry, "golden", "export").stdout == '{"query": "text a customer", "relevant": [["Twilio", "Send an SMS"]]}\n'

    sms = record_id(database_url, "Twilio", "Send an SMS")
    with psycopg.connect(database_url) as conn:  # a draft renamed needs no vector
        conn.execute("update payrail.provider_methods set enabled = false where id = %s", (sms,))
        conn.execute("update payrail.provider_methods set provider = 'Twilio Inc.', method = 'Messages: Send an SMS' where id = %s", (sms,))
    assert run_cli(registry, "golden", "export").stdout == ('{"query": "text a customer", "relevant": [["Twilio Inc.", "Messages: Send an SMS"]]}\n')
    [(_, _, _, _, ids)] = stored_golden(database_url)
    assert ids == [sms]


def test_import_refuses_every_bad_line_by_number_and_adds_nothing(registry, database_url, tmp_path):
    assert run_cli(registry, "golden", "add", "charge a card", "--relevant", "Stripe / Create a PaymentIntent").returncode == 0
    before = stored_golden(database_url)
    source = write_lines(
        tmp_path / "golden.jsonl",
        [
            '{"query": "give money back", "relevant": [["Stripe", "Create a refund"]]}',
            '{"query": "book a flight", "relevant": [["Duffel", "Search flights"], ["Stripe", "Create a refund"]]}',
            '{"query": "send a text", "relevant": [["Twilio", "Send an SMS"], ["twilio", "send an SMS"]]}',
            '{"query": "Give  MONEY back", "relevant": [["Stripe", "Create a refund"]]}',
            '{"query": "charge a CARD", "relevant": [["Stripe", "Create a refund"]]}',
            '{"query": "charge a card", "relevant": [["Stripe", "Create a PaymentIntent"]]}',
            "",
            '{"query": "hotel", "relevant": [' + ", ".join(['["Amadeus", "Hotel Search"]'] * 3) + "]}",
        ],
    )

    code, report, _ = cli_json(registry, "golden", "import", "--json", source)

    assert code == 2, report
    assert report["saved"] is False and report["added"] == 0
    assert report["refused"] == [
        {"line": 2, "reason": 'no provider method is named "Duffel / Search flights"'},
        {"line": 3, "reason": 'names "Twilio / Send an SMS" more than once'},
        {"line": 4, "reason": "the same query as line 1 (queries compare ignoring case, compatibility forms, invisible characters and runs of white space)"},
        {
            "line": 5,
            "reason": 'the registry holds the golden query "charge a card" with other relevant records; '
            "remove it first (`payrail-embedder golden remove`) to label it anew",
        },
        {"line": 6, "reason": "the same query as line 5 (queries compare ignoring case, compatibility forms, invisible characters and runs of white space)"},
        {"line": 8, "reason": 'names "Amadeus / Hotel Search" more than once'},
    ]
    assert stored_golden(database_url) == before
    text = run_cli(registry, "golden", "import", source)
    assert text.returncode == 2 and text.stdout == "nothing imported: 6 lines refused\n"
    assert f'refused {source}:2: no provider method is named "Duffel / Search flights"\n' in text.stderr


@pytest.mark.parametrize(
    "line, code, detail",
    [
        ('{"query": "hotel", "query": "other", "relevant": [["Amadeus", "Hotel Search"]]}', "invalid_input", "field 'query' appears twice"),
        ('{"query": "hotel", "relevant": []}', "invalid_input", "relevant must be a non-empty array"),
        # The registry's own limit for a golden query, met before the database is asked (which refuses it too).
        (
            '{"query": "hotel", "relevant": [' + ", ".join(f'["Amadeus", "Hotel Search {n}"]' for n in range(101)) + "]}",
            "invalid_input",
            "relevant names 101 records; a labelled query may name at most 100, as a golden query may",
        ),
        ('{"query": "hotel", "relevant": [["Amadeus\\u0000", "Hotel Search"]]}', "invalid_input", "PostgreSQL text cannot hold"),
        ('{"query": "hotel", "relevant": [["\\ud800", "Hotel Search"]]}', "invalid_input", "PostgreSQL text cannot hold"),
        ('{"query": "\\u200b", "relevant": [["Amadeus", "Hotel Search"]]}', "invalid_query", "query is empty"),
        ('{"query": "caf\\ud800", "relevant": [["Amadeus", "Hotel Search"]]}', "invalid_query", "not valid Unicode"),
        ('{"query": "hotel", "relevant": [["Amadeus", "Hotel Search"]]', "invalid_input", "malformed JSON"),
        ('["hotel"]', "invalid_input", "a line must be a JSON object"),
    ],
)
def test_import_refuses_a_malformed_line_naming_it(registry, database_url, tmp_path, line, code, detail):
    source = write_lines(tmp_path / "golden.jsonl", ['{"query": "charge a card", "relevant": [["Stripe", "Create a PaymentIntent"]]}', line])
    result_code, failure, _ = cli_json(registry, "golden", "import", "--json", source)
    assert (result_code, failure["error"]) == (2, code), failure
    assert f"{source}:2: " in failure["detail"] and detail in failure["detail"], failure
    assert stored_golden(database_url) == []


def test_import_takes_every_line_eval_takes_naming_the_fields_it_ignores_once(registry, database_url, tmp_path):
    """Lines in the benchmark's format carry "source" beside query and relevant (and may carry
    anything else): golden import takes each line eval takes, keeps its language, and names every
    other field once, with how many lines carry it; the stored queries are exactly the lines'."""
    source = write_lines(
        tmp_path / "golden.jsonl",
        [
            '{"query": "charge a card", "relevant": [["Stripe", "Create a PaymentIntent"]], "source": "solvable_queries/G1_instruction.json#query_id=1"}',
            '{"source": "G1.json#2", "query": "give money back", "relevant": [["Stripe", "Create a refund"]], "language": "EN", "reviewer": {"name": "ada"}}',
            '{"query": "Nachricht schicken", "relevant": [["Zürich Telekom", "Nachricht senden"]], "language": "de", "source": "by hand"}',
        ],
    )

    code, report, stderr = cli_json(registry, "golden", "import", "--json", source)

    assert (code, report) == (
        0,
        {"added": 3, "unchanged": 0, "refused": [], "saved": True, "ignoredFields": [{"field": "source", "lines": 3}, {"field": "reviewer", "lines": 1}]},
    ), (report, stderr)
    with psycopg.connect(database_url) as conn:
        assert conn.execute("select query, language from payrail.golden_queries order by id").fetchall() == [
            ("charge a card", None),
            ("give money back", "en"),  # tags compare regardless of case: kept as eval compares them
            ("Nachricht schicken", "de"),
        ]
    again = run_cli(registry, "golden", "import", source)
    assert again.returncode == 0, again.stderr
    assert again.stdout == "0 golden queries added, 3 unchanged\nignored fields: source (in 3 lines), reviewer (in 1 line)\n"
    assert run_cli(registry, "golden", "export").stdout == (
        '{"query": "charge a card", "relevant": [["Stripe", "Create a PaymentIntent"]]}\n'
        '{"query": "give money back", "relevant": [["Stripe", "Create a refund"]], "language": "en"}\n'
        '{"query": "Nachricht schicken", "relevant": [["Zürich Telekom", "Nachricht senden"]], "language": "de"}\n'
    )
    listed = run_cli(registry, "golden", "list").stdout
    assert "golden query" in listed and listed.count("   language: ") == 2 and "   language: de\n" in listed, listed


def test_import_refuses_a_query_the_registry_holds_in_another_language(registry, database_url, tmp_path):
    code, added, _ = cli_json(registry, "golden", "add", "--json", "charge a card", "--relevant", "Stripe / Create a PaymentIntent", "--language", "EN")
    assert code == 0 and added["language"] == "en", added
    before = stored_golden(database_url)
    lines = {
        '{"query": "charge a card", "relevant": [["Stripe", "Create a PaymentIntent"]]}': 'in language "en", this line has none',
        '{"query": "charge a card", "relevant": [["Stripe", "Create a PaymentIntent"]], "language": "de"}': 'in language "en", this line says "de"',
    }
    for line, why in lines.items():
        code, report, _ = cli_json(registry, "golden", "import", "--json", write_lines(tmp_path / "golden.jsonl", [line]))
        assert code == 2 and report["refused"] == [
            {
                "line": 1,
                "reason": f'the registry holds the golden query "charge a card" {why}; remove it first (`payrail-embedder golden remove`) to label it anew',
            }
        ], report
    same = write_lines(tmp_path / "same.jsonl", ['{"query": "Charge a card", "relevant": [["stripe", "create a paymentintent"]], "language": "En"}'])
    assert cli_json(registry, "golden", "import", "--json", same)[1]["unchanged"] == 1
    assert stored_golden(database_url) == before


@pytest.mark.parametrize("tag", ["e", "english-uk", "en_US", "zh Hans", "", "untagged", "日本"])
def test_add_refuses_a_language_that_is_no_tag_and_adds_nothing(registry, database_url, tag):
    code, failure, _ = cli_json(registry, "golden", "add", "--json", "charge a card", "--relevant", "Stripe / Create a PaymentIntent", "--language", tag)
    assert (code, failure["error"]) == (2, "invalid_input") and "--language" in failure["detail"], failure
    assert stored_golden(database_url) == []


def test_import_refuses_bytes_that_are_not_utf8_and_takes_a_byte_order_mark(registry, database_url, tmp_path):
    source = tmp_path / "golden.jsonl"
    source.write_bytes(b'\xef\xbb\xbf{"query": "charge a card", "relevant": [["Stripe", "Create a PaymentIntent"]]}\n{"query": "caf\xe9"}\n')
    code, failure, _ = cli_json(registry, "golden", "import", "--json", source)
    assert (code, failure["error"]) == (2, "invalid_input") and f"{source}:2: not valid UTF-8" in failure["detail"], failure
    source.write_bytes(b'\xef\xbb\xbf{"query": "charge a card", "relevant": [["Stripe", "Create a PaymentIntent"]]}\n')
    assert run_cli(registry, "golden", "import", source).returncode == 0
    assert [row[1] for row in stored_golden(database_url)] == ["charge a card"]


def test_a_record_golden_queries_name_is_deleted_only_with_them(registry, database_url):
    refund = record_id(database_url, "Stripe", "Create a refund")
    for query, names in (("money back", ["Stripe / Create a refund"]), ("money back and a text", ["Stripe / Create a refund", "Twilio / Send an SMS"])):
        assert run_cli(registry, "golden", "add", query, *[arg for name in names for arg in ("--relevant", name)]).returncode == 0
    before = stored_golden(database_url)

    with connect(database_url, autocommit=True) as conn:
        refused = delete_record(conn, refund, 1)[1]
        assert refused == Refused(
            'provider method "Stripe / Create a refund" is not deleted: 2 golden queries name it: "money back", "money back and a text" '
            "(golden_query_records_record_id_fkey). Hint: Delete it with its golden queries (payrail.delete_provider_method(id, version, "
            "p_with_golden_queries => true): it leaves those queries, and a query that names no other record goes too), or relabel them first."
        )
        assert stored_golden(database_url) == before
        assert [g.query for g in golden.golden_queries(conn, record_id=refund)] == ["money back", "money back and a text"]

        assert delete_record(conn, refund, 1, with_golden_queries=True)[1] is None
    assert [(row[1], row[4]) for row in stored_golden(database_url)] == [("money back and a text", [record_id(database_url, "Twilio", "Send an SMS")])]
    with psycopg.connect(database_url) as conn:
        assert conn.execute("select count(*) from payrail.provider_methods where id = %s", (refund,)).fetchone() == (0,)


def test_agents_cannot_read_or_write_golden_queries_through_the_cli(registry, database_url):
    assert run_cli(registry, "golden", "add", "charge a card", "--relevant", "Stripe / Create a PaymentIntent").returncode == 0
    with psycopg.connect(database_url, autocommit=True) as admin:
        admin.execute("create role golden_agent login in role payrail_agent")
    try:
        agent = {**registry, "PAYRAIL_DATABASE_URL": login_url(database_url, "golden_agent")}
        for args in (
            ("golden", "list", "--json"),
            ("golden", "export"),
            ("eval", "--json"),
            ("golden", "add", "--json", "steal", "--relevant", "Stripe / Create a PaymentIntent"),
            ("golden", "remove", "--json", "charge a card"),
        ):
            result = run_cli(agent, *args)
            assert result.returncode == 2 and "charge a card" not in result.stdout, (args, result.stdout, result.stderr)
            if "--json" in args:
                assert json.loads(result.stdout)["error"] == "not_permitted", (args, result.stdout)
        assert [row[1] for row in stored_golden(database_url)] == ["charge a card"]
    finally:
        with psycopg.connect(database_url, autocommit=True) as admin:
            admin.execute("drop role golden_agent")


def test_every_change_of_the_golden_queries_is_logged_with_who_and_where(registry, database_url, tmp_path):
    user = psycopg.conninfo.conninfo_to_dict(database_url)["user"]
    added = run_cli(registry, "golden", "add", "charge a card", "--relevant", "Stripe / Create a PaymentIntent")
    [event] = events(added.stderr)
    assert (event["event"], event["role"], event["relevant"], event["level"]) == ("golden_add", user, "1", "info"), event
    assert event["golden_query"] == str(stored_golden(database_url)[0][0]) and event["database"] and event["duration_ms"]

    source = write_lines(
        tmp_path / "golden.jsonl",
        ['{"query": "charge a card", "relevant": [["Stripe", "Create a PaymentIntent"]]}', '{"query": "refund", "relevant": [["Nobody", "Nothing"]]}'],
    )
    [event] = events(run_cli(registry, "golden", "import", "--json", source).stderr, "golden_import")
    assert (event["level"], event["added"], event["unchanged"], event["refused"]) == ("warning", "0", "0", "1"), event
    source.write_text('{"query": "charge a card", "relevant": [["Stripe", "Create a PaymentIntent"]]}\n', encoding="utf-8")
    [event] = events(run_cli(registry, "golden", "import", "--json", source).stderr, "golden_import")
    assert (event["level"], event["added"], event["unchanged"], event["refused"]) == ("info", "0", "1", "0"), event

    [event] = events(run_cli(registry, "golden", "remove", "charge a card").stderr)
    assert (event["event"], event["role"], event["removed"]) == ("golden_remove", user, "1"), event


def test_add_and_import_add_nothing_when_the_embedding_service_fails(registry, database_url, openai_fake, tmp_path):
    """golden add and golden import embed the new queries first and keep their vectors: without the
    embedding service they add nothing, and say which service failed."""
    assert run_cli(registry, "golden", "add", "charge a card", "--relevant", "Stripe / Create a PaymentIntent").returncode == 0
    before = stored_golden(database_url)
    lines = write_lines(tmp_path / "golden.jsonl", ['{"query": "send a text", "relevant": [["Twilio", "Send an SMS"]]}'])
    openai_fake.behaviour = "500"
    try:
        added = cli_json(registry, "golden", "add", "--json", "give money back", "--relevant", "Stripe / Create a refund")
        imported = cli_json(registry, "golden", "import", "--json", str(lines))
    finally:
        openai_fake.behaviour = "ok"
    for code, failure, _ in (added, imported):
        assert (code, failure["error"]) == (1, "unavailable"), failure
        assert "fake-embedding-1 via OpenAI API" in failure["detail"], failure
    assert stored_golden(database_url) == before
    with psycopg.connect(database_url) as conn:
        kept = conn.execute("select g.query from payrail.golden_query_embeddings as e join payrail.golden_queries as g on g.id = e.golden_query_id").fetchall()
    assert kept == [("charge a card",)]
