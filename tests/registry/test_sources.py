"""Where records came from (provider_methods.source) on real PostgreSQL servers: what each write
face names (an import's file, --source, a line's own, standard input, psql), the history keeping
each version's, `list` and the bulk commands filtering by it exactly, eval's figures by source
checked against search's own answers, and sources an outsider names (file names with control,
invisible or odd characters, too long) refused before anything is saved; and agents never see it,
whichever door they use (SQL as payrail_agent, the Python API, MCP over stdio, HTTP /search)."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import quote, urlsplit

import anyio
import psycopg
import pytest

from payrail_embedder.faces.api import Registry
from payrail_embedder.postgres.connection import connect
from payrail_embedder.registry import bulk
from payrail_test_support.agent_helpers import mcp_client
from payrail_test_support.backoffice import AGENT, OPERATOR, OTHER_OPERATOR, PASSWORD
from payrail_test_support.cli import cli_json, run_cli, write_jsonl
from payrail_test_support.remote_agents import McpHttpServer, bearer


def rec(provider: str, method: str, guidance: str, **fields) -> dict:
    return {"provider": provider, "method": method, "urls": [], "docsUrl": None, "guidance": guidance, "enabled": True} | fields


CURATED = [
    rec("Acme Maps", "Geocode an address", "Purpose: turn a street address into map coordinates."),
    rec("Globex Weather", "Current conditions", "Purpose: the weather in a city now."),
]
# A bulk catalog's near-duplicates of the curated records, in the very words agents ask with: the
# fake embeddings are bags of words, so these take the curated records' places.
BULK = [
    rec("Bulkco", "Geocode", "geocode street address coordinates"),
    rec("Bulkco", "Weather", "weather city now"),
    rec("Bulkco", "Fax", "Purpose: send a fax.", enabled=False),
]
BULK_FILE = "Katalog März 2026 (copy) 'x' \"y\".jsonl"


def sources_of(database_url: str) -> dict[str, str]:
    """Each record's source, by "provider / method"."""
    with psycopg.connect(database_url) as conn:
        return {f"{p} / {m}": s for p, m, s in conn.execute("select provider, method, source from payrail.provider_methods")}


@pytest.fixture
def catalogs(cli_env, operator_logins, tmp_path) -> dict:
    """CURATED imported from curated.jsonl, BULK from BULK_FILE (every record embedded), the login roles made."""
    for name, records in (("curated.jsonl", CURATED), (BULK_FILE, BULK)):
        result = run_cli(cli_env, "import", write_jsonl(tmp_path / name, records))
        assert result.returncode == 0, result.stdout + result.stderr
    return cli_env


def test_each_write_face_names_where_its_records_came_from_and_the_history_keeps_it(catalogs, database_url, tmp_path):
    env = catalogs
    # A line's own source wins over its file's name; --source wins over both; standard input is "stdin".
    own = [rec("Initech", "Invoices", "Purpose: pay invoices.", source="partner feed")]
    assert run_cli(env, "import", write_jsonl(tmp_path / "own.jsonl", own)).returncode == 0
    assert (
        run_cli(
            env, "import", "--source", "vendor X", write_jsonl(tmp_path / "given.jsonl", [rec("Hooli", "Mail", "Purpose: mail.", source="ignored")])
        ).returncode
        == 0
    )
    piped = json.dumps(rec("Umbrella", "Vaccines", "Purpose: order vaccines.")) + "\n"
    assert run_cli(env, "import", "-", input=piped).returncode == 0
    with psycopg.connect(database_url) as conn:
        conn.execute("insert into payrail.provider_methods (provider, method, guidance) values ('Vandelay', 'Import', 'Purpose: latex.')")
    assert sources_of(database_url) == {
        "Acme Maps / Geocode an address": "curated.jsonl",
        "Globex Weather / Current conditions": "curated.jsonl",
        **{f"Bulkco / {r['method']}": BULK_FILE for r in BULK},
        "Initech / Invoices": "partner feed",
        "Hooli / Mail": "vendor X",
        "Umbrella / Vaccines": "stdin",
        "Vandelay / Import": "psql",
    }

    code, listed, _ = cli_json(env, "list", "--sources", "--json")
    assert code == 0 and listed == {
        "sources": [
            {"source": BULK_FILE, "records": 3, "enabled": 2},
            {"source": "curated.jsonl", "records": 2, "enabled": 2},
            {"source": "partner feed", "records": 1, "enabled": 1},
            {"source": "psql", "records": 1, "enabled": 0},
            {"source": "stdin", "records": 1, "enabled": 1},
            {"source": "vendor X", "records": 1, "enabled": 1},
        ]
    }
    code, found, _ = cli_json(env, "list", "--source", BULK_FILE, "--json")
    assert [(r["method"], r["source"]) for r in found["records"]] == [(r["method"], BULK_FILE) for r in sorted(BULK, key=lambda r: r["method"])]
    code, found, _ = cli_json(env, "list", "--source", BULK_FILE, "--state", "draft", "--text", "fax", "--json")
    assert [r["method"] for r in found["records"]] == ["Fax"]
    # Exactly as written: no pattern, no case folding, no part of a name.
    for other in ("katalog märz 2026 (copy) 'x' \"y\".jsonl", "%", "curated", "curated.jsonl ", "\x00"):
        assert run_cli(env, "list", "--source", other).stdout == "0 records\n", other
    assert f"(enabled, version 1, from {BULK_FILE}, saved " in run_cli(env, "list", "--source", BULK_FILE).stdout
    assert run_cli(env, "list", "--sources", "--state", "draft").returncode == 2

    # Imported again from a file of another name, a record keeps its source (a fix, even: nothing
    # moves out of its catalog unasked) and nothing unchanged gets a version.
    fixed = dict(CURATED[1], guidance="Purpose: the weather in a city right now.")
    code, report, _ = cli_json(env, "import", "--json", write_jsonl(tmp_path / "fixes.jsonl", [CURATED[0], fixed]))
    assert (code, report["unchanged"], report["updated"]) == (0, 1, 1), report
    assert sources_of(database_url)["Globex Weather / Current conditions"] == "curated.jsonl"
    # --source moves it: a new version, and the history keeps the one before with its source.
    assert run_cli(env, "import", "--source", "fixes.jsonl", tmp_path / "fixes.jsonl").returncode == 0
    code, history, _ = cli_json(env, "history", "Acme Maps / Geocode an address", "--json")
    assert (history["record"]["source"], history["record"]["version"]) == ("fixes.jsonl", 2)
    assert [(v["version"], v["source"]) for v in history["history"]] == [(1, "curated.jsonl")]
    assert "(enabled, from curated.jsonl)" in run_cli(env, "history", "Acme Maps / Geocode an address").stdout

    # An export carries every record's source, so importing it again changes nothing.
    exported = run_cli(env, "export").stdout
    assert {json.loads(line)["source"] for line in exported.splitlines()} == {
        "fixes.jsonl",
        BULK_FILE,
        "partner feed",
        "vendor X",
        "stdin",
        "psql",
    }
    before = sources_of(database_url)
    code, report, _ = cli_json(env, "import", "--json", write_jsonl(tmp_path / "everything.jsonl", [json.loads(line) for line in exported.splitlines()]))
    assert (code, report["unchanged"], report["created"] + report["updated"]) == (0, len(before), 0), report
    assert sources_of(database_url) == before


def test_psql_and_the_write_path_keep_a_source_unless_the_writer_names_one(catalogs, database_url):
    with connect(database_url, user=OPERATOR, password=PASSWORD, autocommit=True) as conn:
        acme = conn.execute("select id, version from payrail.provider_methods where provider = 'Acme Maps'").fetchone()
        # payrail.save_provider_methods, the one write path: a change that names no source keeps the record's.
        saved = conn.execute(
            "select outcome from payrail.save_provider_methods(payrail.provider_method_changes(%s::jsonb))",
            (
                json.dumps(
                    [
                        {
                            "record_id": acme[0],
                            "expected_version": acme[1],
                            "provider": "Acme Maps",
                            "method": "Geocode an address",
                            "urls": [],
                            "guidance": CURATED[0]["guidance"],
                            "enabled": False,
                        }
                    ]
                ),
            ),
        ).fetchall()
        assert conn.execute("select version, source from payrail.provider_methods where id = %s", (acme[0],)).fetchone() == (acme[1] + 1, "curated.jsonl"), (
            saved
        )
        conn.execute("update payrail.provider_methods set source = 'hand-picked' where provider = 'Acme Maps'")
        # A new record written there without one says psql; with one, its own.
        conn.execute(
            "select * from payrail.save_provider_methods(payrail.provider_method_changes(%s::jsonb), p_embed_drafts => false)",
            (json.dumps([{"provider": "Psqlco", "method": "A", "guidance": "G."}, {"provider": "Psqlco", "method": "B", "guidance": "G.", "source": "ops"}]),),
        )
        broken = conn.execute(
            "select constraint_name from payrail.check_provider_method(null, 'X', 'Y', '{}', null, 'G.', null, %s)", ("ops\u202e",)
        ).fetchall()
    assert broken == [("provider_methods_source_check",)]
    found = sources_of(database_url)
    assert (found["Acme Maps / Geocode an address"], found["Psqlco / A"], found["Psqlco / B"]) == ("hand-picked", "psql", "ops")
    with psycopg.connect(database_url) as conn:
        kept = conn.execute(
            """select h.source from payrail.provider_method_history as h join payrail.provider_methods as pm on pm.id = h.provider_method_id
               where pm.provider = 'Acme Maps' order by h.id"""
        ).fetchall()
    assert kept[-1] == ("curated.jsonl",), "the version psql replaced keeps the source it had"


# Names an outsider may give a catalog file or --source: each is refused before a line is read,
# in the rule's words, and nothing is saved.
HOSTILE_FILE_NAMES = {
    "terminal escape": "bulk\x1b[31m.jsonl",
    "line break": "bulk\nts=2020 level=info.jsonl",
    "bidi override": "bulk\u202egnp.jsonl",
    "leading space": " bulk.jsonl",
}


@pytest.mark.parametrize("file_name", HOSTILE_FILE_NAMES.values(), ids=HOSTILE_FILE_NAMES.keys())
def test_a_file_name_that_cannot_be_a_source_is_refused_before_anything_is_imported(cli_env, database_url, tmp_path, file_name):
    path = write_jsonl(tmp_path / file_name, CURATED)
    code, failure, stderr = cli_json(cli_env, "import", "--json", path)
    assert code == 2 and failure["error"] == "invalid_input", failure
    assert "cannot be a source: a source must be 1 to 255 characters, without control characters" in failure["detail"]
    assert failure["detail"].endswith("Or give one with --source NAME."), failure
    assert json.dumps(Path(file_name).name, ensure_ascii=False).translate({0x202E: "\\u202e"}) in failure["detail"], "named, escaped"
    assert not any(c in failure["detail"] for c in "\x1b\n\u202e"), "no control or invisible character reaches the terminal"
    assert sources_of(database_url) == {}
    # Named by --source instead, its records are imported.
    assert run_cli(cli_env, "import", "--source", "catalog", path).returncode == 0
    assert set(sources_of(database_url).values()) == {"catalog"}


@pytest.mark.parametrize("source", ["", "s" * 256, "a\tb", "x\u200b", "tail "], ids=["empty", "256 characters", "tab", "zero width", "trailing space"])
def test_a_source_given_that_breaks_the_rule_is_refused_and_nothing_is_saved(cli_env, database_url, tmp_path, source):
    code, failure, _ = cli_json(cli_env, "import", "--json", "--source", source, write_jsonl(tmp_path / "ok.jsonl", CURATED))
    assert (code, failure["error"]) == (2, "invalid_input") and failure["detail"].startswith("--source "), failure
    assert sources_of(database_url) == {}


def test_the_longest_file_name_and_markup_are_a_source_as_they_are(cli_env, database_url, tmp_path):
    longest = "x" * 249 + ".jsonl"  # 255 bytes: the most a file name may take here
    markup = '<img src=x onerror="alert(1)"> & co.jsonl'
    for name in (longest, markup):
        assert run_cli(cli_env, "import", write_jsonl(tmp_path / name, [rec("P", name[-20:], "G.")])).returncode == 0
    assert sorted(sources_of(database_url).values()) == sorted([longest, markup])


def test_bulk_by_source_acts_on_exactly_the_records_it_asked_about(catalogs, database_url):
    before = sources_of(database_url)
    drafts_of_bulk = bulk.Selection.matching(source=BULK_FILE)
    with (
        connect(database_url, user=OPERATOR, password=PASSWORD, autocommit=True) as conn,
        connect(database_url, user=OTHER_OPERATOR, password=PASSWORD, autocommit=True) as other,
    ):
        question = bulk.set_enabled(conn, drafts_of_bulk, False, preview=True)
        assert (
            question.in_words() == "Would disable 2 records; 1 was a draft already."
            and drafts_of_bulk.describe() == f"source {json.dumps(BULK_FILE, ensure_ascii=False)}"
        )
        # Meanwhile another operator moves a curated record into that catalog: nothing is done.
        other.execute("update payrail.provider_methods set source = %s where provider = 'Globex Weather'", (BULK_FILE,))
        with pytest.raises(bulk.ChangedSinceAsked, match="it would now disable 3 records"):
            bulk.set_enabled(conn, drafts_of_bulk, False, confirmed=question.digest())
        assert conn.execute("select count(*) from payrail.provider_methods where enabled").fetchone() == (4,)
        other.execute("update payrail.provider_methods set source = 'curated.jsonl' where provider = 'Globex Weather'")
        done = bulk.set_enabled(conn, drafts_of_bulk, False, confirmed=question.digest())
    assert done.changed == question.acting_on
    with psycopg.connect(database_url) as conn:
        enabled = {f"{p} / {m}" for p, m in conn.execute("select provider, method from payrail.provider_methods where enabled")}
    assert enabled == {"Acme Maps / Geocode an address", "Globex Weather / Current conditions"}

    # The command line: delete a whole catalog, and nothing else.
    code, deleted, _ = cli_json(catalogs, "delete", "--source", BULK_FILE, "--yes", "--json")
    assert code == 0 and len(deleted["deleted"]) == 3, deleted
    assert sources_of(database_url) == {name: source for name, source in before.items() if source != BULK_FILE}
    assert run_cli(catalogs, "disable", "--source", "%", "--yes").returncode == 0
    assert len(sources_of(database_url)) == 2


def test_eval_counts_the_places_each_source_takes_as_search_answers(catalogs, tmp_path):
    env = catalogs
    golden = [
        {"query": "geocode a street address into coordinates", "relevant": [["Acme Maps", "Geocode an address"]]},
        {"query": "weather in a city now", "relevant": [["Globex Weather", "Current conditions"]]},
    ]
    code, report, _ = cli_json(env, "eval", "--json", write_jsonl(tmp_path / "golden.jsonl", golden))
    assert code == 0, report
    # The figures again, from search's own answers and the list's sources.
    source_of = {(r["provider"], r["method"]): r["source"] for r in cli_json(env, "list", "--json")[1]["records"]}
    expected: dict[str, dict] = {}
    for query in golden:
        wanted = {tuple(r) for r in query["relevant"]}
        top = [(m["provider"], m["method"]) for m in cli_json(env, "search", "--json", query["query"])[1]["matches"]]
        for name in top:
            figures = expected.setdefault(source_of[name], {"places": 0, "wanted": 0, "missed": 0})
            figures["places"] += 1
            figures["wanted"] += name in wanted
        for name in wanted - set(top):
            expected.setdefault(source_of[name], {"places": 0, "wanted": 0, "missed": 0})["missed"] += 1
    enabled = {s["source"]: s["enabled"] for s in cli_json(env, "list", "--sources", "--json")[1]["sources"]}
    assert {f["source"]: {k: f[k] for k in ("places", "wanted", "missed", "enabled")} for f in report["bySource"]} == {
        source: figures | {"enabled": enabled[source]} for source, figures in expected.items()
    }
    assert all(f["unwanted"] == f["places"] - f["wanted"] for f in report["bySource"])
    bulk_figures = next(f for f in report["bySource"] if f["source"] == BULK_FILE)
    assert bulk_figures["unwanted"] >= 2, "the bulk catalog's near-duplicates take places the curated records should have"

    text = run_cli(env, "eval", write_jsonl(tmp_path / "golden.jsonl", golden)).stdout.splitlines()
    header = text.index("by source: the top-three places of 2 queries (6 at most):")
    assert text[header + 1].split() == ["source", "enabled", "places", "wanted", "unwanted", "missed"]
    assert any(line.startswith(BULK_FILE) for line in text[header + 2 : header + 2 + len(report["bySource"])])


# A source no answer could hold by chance.
MARKER = "MARKER-7f3a secret partner.jsonl"
AGENT_QUERIES = ["Acme Maps", "weather in a city now"]


@pytest.mark.slow
def test_agents_never_see_where_a_record_came_from(catalogs, database_url, tmp_path, token_file, tokens, monkeypatch):
    with psycopg.connect(database_url) as conn:
        conn.execute("update payrail.provider_methods set source = %s", (MARKER,))
        results = conn.execute(
            """select pg_catalog.pg_get_function_result(p.oid) from pg_catalog.pg_proc as p
               where p.pronamespace = 'payrail'::regnamespace and p.proname = 'search_provider_methods'"""
        ).fetchall()
    assert results and all("source" not in result for (result,) in results), results

    with connect(database_url, user=AGENT, password=PASSWORD, autocommit=True) as agent:
        for statement in (
            "select source from payrail.provider_methods",
            "select source from payrail.provider_method_history",
            "select source from payrail.provider_method_list_entries",
            "select * from payrail.list_provider_method_sources()",
            f"select * from payrail.list_provider_methods(p_source => '{MARKER}')",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                agent.execute(statement)
        by_sql = [agent.execute("select * from payrail.search_provider_methods(%s)", ("Acme Maps",)).fetchall()]

    parts = urlsplit(database_url)
    agent_url = parts._replace(netloc=f"{AGENT}:{quote(PASSWORD)}@{parts.netloc.rpartition('@')[2]}").geturl()
    env = catalogs | {"PAYRAIL_DATABASE_URL": agent_url}
    monkeypatch.setenv("OPENAI_API_KEY", env["OPENAI_API_KEY"])
    with Registry(env["PAYRAIL_DATABASE_URL"], backend="openai", model=env["PAYRAIL_EMBEDDING_MODEL"], openai_base_url=env["OPENAI_BASE_URL"]) as registry:
        by_api = [[m.to_json() for m in registry.search_provider_methods(query)["matches"]] for query in AGENT_QUERIES]

    async def over_mcp():
        with open(tmp_path / "mcp-stderr.log", "w") as errlog:
            async with mcp_client(env, errlog) as client:
                return [(await client.call_tool("search_provider_methods", {"query": query})).structured_content for query in AGENT_QUERIES]

    by_mcp = anyio.run(over_mcp)
    server = McpHttpServer(env, tmp_path / "mcp-http.log", "--token-file", str(token_file))
    try:
        by_http = [server.get(f"/search?query={quote(query)}", bearer(tokens["booking-agent"])) for query in AGENT_QUERIES]
    finally:
        server.stop()
    assert all(status == 200 for status, _, _ in by_http), by_http
    for door, answers in {"sql": by_sql, "python api": by_api, "mcp": by_mcp, "http": [body for _, _, body in by_http]}.items():
        seen = json.dumps(answers, default=str)
        assert "Acme Maps" in seen and "MARKER" not in seen and '"source"' not in seen, (door, seen)
