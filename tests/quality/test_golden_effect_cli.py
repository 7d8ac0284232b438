"""Golden queries on the command line beyond `golden` itself: their vectors (kept by `golden add`,
`sync` and `model switch`, never read by search), `edit`, which shows an edit's effect on them and
asks before it saves, and `preview --draft` without a query, which shows what enabling a draft
would change. What the commands say is checked against eval and the database.
"""

from __future__ import annotations

import psycopg
import pytest

from payrail_test_support.cli import cli_import, cli_json, run_cli, without_registry
from payrail_test_support.cli import run_edit as edit
from payrail_test_support.golden_tops import eval_tops
from payrail_test_support.openai_fake import FAKE_MODEL, fake_embedding

CATALOG = [
    {
        "provider": "Acme Maps",
        "method": "Geocode an address",
        "urls": [],
        "docsUrl": None,
        "enabled": True,
        "guidance": "Purpose: turn a street address into coordinates.",
    },
    {
        "provider": "Acme Maps",
        "method": "Reverse geocode",
        "urls": [],
        "docsUrl": None,
        "enabled": False,
        "guidance": "Purpose: turn latitude and longitude into a postal address.",
    },
    {"provider": "Globex", "method": "Send an SMS", "urls": [], "docsUrl": None, "enabled": True, "guidance": "Purpose: send a text message to a phone."},
    {"provider": "Globex", "method": "Weather", "urls": [], "docsUrl": None, "enabled": True, "guidance": "Purpose: current weather for a city."},
]
GOLDEN = [
    ("turn latitude and longitude into a postal address", "Acme Maps / Reverse geocode"),
    ("send a text message", "Globex / Send an SMS"),
    ("Globex", "Globex / Weather"),
]


@pytest.fixture
def registry(cli_env, tmp_path):
    cli_import(cli_env, tmp_path / "catalog.jsonl", CATALOG)
    for query, relevant in GOLDEN:
        assert run_cli(cli_env, "golden", "add", query, "--relevant", relevant).returncode == 0
    return cli_env


def kept_vectors(url: str) -> dict[str, tuple[str, list[float]]]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            """select g.query, e.model, e.embedding::real[] from payrail.golden_queries as g
               join payrail.golden_query_embeddings as e on e.golden_query_id = g.id"""
        ).fetchall()
    return {query: (model, vector) for query, model, vector in rows}


def returned_by_eval(env) -> dict[str, list[list[str]]]:
    """Each golden query's top three as eval gets it: the misses say it, the rest are found."""
    code, report, stderr = cli_json(env, "eval", "--json")
    assert code == 0, (report, stderr)
    return {miss["query"]: miss["returned"] for miss in report["misses"]}


def test_golden_add_keeps_the_querys_vector_by_the_registrys_model(registry, database_url):
    kept = kept_vectors(database_url)
    assert set(kept) == {query for query, _ in GOLDEN}
    for query, (model, vector) in kept.items():
        assert model == FAKE_MODEL and vector == pytest.approx(fake_embedding(query).tolist(), abs=1e-7)


def test_sync_embeds_the_golden_queries_without_a_vector_and_model_switch_embeds_them_by_the_new_model(registry, database_url):
    with psycopg.connect(database_url) as conn:
        conn.execute("delete from payrail.golden_query_embeddings")
    code, report, stderr = cli_json(registry, "sync", "--json")
    assert (code, without_registry(report)) == (0, {"embedded": 0, "changedMeanwhile": 0, "pending": [], "goldenQueriesEmbedded": 3}), stderr
    assert set(kept_vectors(database_url)) == {query for query, _ in GOLDEN}
    assert run_cli(registry, "sync").stdout.startswith("0 embedded, 0 changed meanwhile, 0 pending\n")

    code, report, stderr = cli_json(registry, "model", "switch", "fake-embedding-2", "--json")
    assert code == 0 and report["switched"] and report["goldenQueriesEmbedded"] == 3, (report, stderr)
    assert {model for model, _ in kept_vectors(database_url).values()} == {"fake-embedding-2"}


def test_edit_shows_the_effect_and_leaves_the_record_unsaved_when_told(registry, database_url, tmp_path):
    steps = [{"replace": ["Enabled: no", "Enabled: yes"]}]
    result, shown = edit(registry, tmp_path, steps, "Acme Maps / Reverse geocode", input="n\n")
    assert result.returncode == 0, result.stderr
    assert '"turn latitude and longitude into a postal address" (golden query 1): gains this record at rank 1' in result.stdout
    assert "better for what it should find" in result.stdout and result.stdout.endswith("nothing saved\n"), result.stdout
    assert "turn latitude and longitude into a postal address" in returned_by_eval(registry), "still a miss: nothing saved"


def said_after(stdout: str) -> dict[str, list[str]]:
    """Each golden query an effect printed, with its top three after the save, as it printed them."""
    lines = stdout.splitlines()
    return {
        line.split('"')[1]: lines[number + 3].removeprefix("   after: ").split("; ")
        for number, line in enumerate(lines)
        if " for what it should find: " in line
    }


def test_edit_saves_what_it_showed_and_eval_then_finds_what_it_said(registry, database_url, tmp_path, openai_fake):
    steps = [{"replace": ["Purpose: current weather for a city.", "Purpose: send a text message to a phone in a city."]}]
    before = eval_tops(database_url, registry)
    requests = len(openai_fake.requests)
    result, _ = edit(registry, tmp_path, steps, "Globex / Weather", input="y\n")
    assert result.returncode == 0 and 'updated "Globex / Weather"' in result.stdout, (result.stdout, result.stderr)
    assert len(openai_fake.requests) == requests + 1, "the record's text is embedded once, for the preview and the save"
    said = said_after(result.stdout)
    assert "send a text message" in said, result.stdout
    after = eval_tops(database_url, registry)
    assert {query: top for query, top in after.items() if top != before[query]} == said


def test_edit_again_reopens_the_editor_with_the_effect_on_top(registry, database_url, tmp_path):
    steps = [{"replace": ["Enabled: no", "Enabled: yes"]}, {"quit": True}]
    result, shown = edit(registry, tmp_path, steps, "Acme Maps / Reverse geocode", input="e\n")
    assert result.returncode == 0 and result.stdout.endswith("nothing saved\n"), (result.stdout, result.stderr)
    assert "# NOT SAVED YET: you chose to edit it again. Saving it would change this:" in shown[1]
    assert "gains this record at rank 1" in shown[1] and "Enabled: yes" in shown[1]


def test_edit_yes_saves_without_asking_and_a_closed_input_saves_nothing(registry, database_url, tmp_path):
    steps = [{"replace": ["Enabled: no", "Enabled: yes"]}]
    closed = edit(registry, tmp_path, steps, "Acme Maps / Reverse geocode", input="")[0]
    assert closed.returncode == 1 and "Aborted!" in closed.stderr, (closed.stdout, closed.stderr)
    result, _ = edit(registry, tmp_path, steps, "--yes", "Acme Maps / Reverse geocode")
    assert result.returncode == 0 and "Save it?" not in result.stdout and "gains this record" in result.stdout, result.stdout
    assert "turn latitude and longitude into a postal address" not in returned_by_eval(registry)


def test_preview_draft_without_a_query_lists_the_golden_queries_enabling_it_changes(registry, database_url):
    code, effect, stderr = cli_json(registry, "preview", "--draft", "Acme Maps / Reverse geocode", "--json")
    assert code == 0, stderr
    assert (effect["record"]["method"], effect["enabled"], effect["goldenQueries"]) == ("Reverse geocode", True, 3)
    [change] = [c for c in effect["changes"] if c["query"] == "turn latitude and longitude into a postal address"]
    assert change["gains"] and change["verdict"] == "better" and change["after"][0]["method"] == "Reverse geocode"
    # A draft has no rank; enabled, the first place: each record it should find with both.
    assert [(r["method"], r["before"], r["after"]) for r in change["ranks"]] == [("Reverse geocode", None, 1)]
    text = run_cli(registry, "preview", "--draft", "Acme Maps / Reverse geocode").stdout
    assert "   ranks: Acme Maps / Reverse geocode: not ranked -> rank 1; now in the top three\n" in text, text
    assert text.startswith(f"{len(effect['changes'])} of 3 golden queries' top three would change"), text
    # Nothing was enabled; once it is, eval finds what the preview said, and nothing else changed.
    before = eval_tops(database_url, registry)
    with psycopg.connect(database_url) as conn:
        assert conn.execute("select enabled from payrail.provider_methods where method = 'Reverse geocode'").fetchone() == (False,)
        conn.execute("update payrail.provider_methods set enabled = true where method = 'Reverse geocode'")
    after = eval_tops(database_url, registry)
    assert {query: top for query, top in after.items() if top != before[query]} == {
        change["query"]: [f"{r['provider']} / {r['method']}" for r in change["after"]] for change in effect["changes"]
    }
    assert said_after(text) == {change["query"]: [f"{r['provider']} / {r['method']}" for r in change["after"]] for change in effect["changes"]}


def test_preview_draft_of_a_registry_without_golden_queries_says_so(cli_env, tmp_path):
    cli_import(cli_env, tmp_path / "catalog.jsonl", CATALOG)
    result = run_cli(cli_env, "preview", "--draft", "Acme Maps / Reverse geocode")
    assert (result.returncode, result.stdout) == (0, "No golden queries to compare (`payrail-embedder golden add` adds them).\n")
