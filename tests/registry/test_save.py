"""The write path (write.save_changes) that import, edit and the backoffice share: every rule checked
before anything is embedded, conflicts with other writers, refusals naming their fields, and
writers running side by side. Real PostgreSQL, the OpenAI backend against the fake HTTP server.
"""

from __future__ import annotations

import json
import random
import subprocess
import threading

import psycopg
import pytest

from payrail_embedder.embedders import OpenAIEmbedder
from payrail_embedder.postgres.connection import connect
from payrail_embedder.registry.records import ProviderMethod
from payrail_embedder.registry.write import Change, Conflict, Refused, Saved, check_changes, save_changes
from payrail_test_support import CLI, REPO
from payrail_test_support.cli import cli_json, run_cli, write_jsonl
from payrail_test_support.openai_fake import FAKE_MODEL
from payrail_test_support.stored import assert_whole_or_nothing, rows


def record(n: int, **changes) -> dict:
    base = {
        "provider": f"Provider {n:03d}",
        "method": f"Method {n:03d}",
        "urls": [f"https://api.example/{n}"],
        "docsUrl": None,
        "guidance": f"Purpose: record number {n}.",
        "enabled": True,
    }
    return {**base, **changes}


def as_record(data: dict) -> ProviderMethod:
    return ProviderMethod(data["provider"], data["method"], data["urls"], data["docsUrl"], data["guidance"], data["enabled"])


@pytest.fixture
def embedder(openai_fake):
    return OpenAIEmbedder(FAKE_MODEL, api_key="test-key", base_url=openai_fake.base_url, timeout=2, max_retries=0)


def test_a_bad_last_line_of_a_long_file_costs_no_embedding_request(cli_env, database_url, openai_fake, tmp_path):
    lines = [record(n) for n in range(1, 200)] + [record(200, urls=["http://api.example/200"])]
    code, report, _ = cli_json(cli_env, "import", "--json", write_jsonl(tmp_path / "long.jsonl", lines))
    assert (code, report["saved"], [r["line"] for r in report["refused"]]) == (2, False, [200]), report
    assert "provider_methods_urls_https_check" in report["refused"][0]["reason"]
    assert openai_fake.requests == []
    assert rows(database_url) == []


def test_import_reports_every_refused_line_in_file_order_whichever_rule_refused_it(cli_env, database_url, openai_fake, tmp_path):
    path = tmp_path / "mixed.jsonl"
    path.write_text(
        "\n".join(
            [
                json.dumps(record(1)),
                json.dumps(record(2, docsUrl="ftp://docs.example")),  # the database's rule
                json.dumps({**record(3), "colour": "red"}),  # the file format's rule
                json.dumps(record(4, guidance="   ")),  # the database's rule
                '{"provider": "A", "provider": "B", "method": "M", "guidance": "G."}',  # a key twice
                json.dumps(record(1, method=" METHOD  001 ")),  # the same record as line 1
                json.dumps(record(7)),
            ]
        )
        + "\n",
        encoding="utf-8",
    )
    code, report, _ = cli_json(cli_env, "import", "--json", str(path))
    assert code == 2 and report["saved"] is False, report
    refused = [(r["line"], r["reason"]) for r in report["refused"]]
    assert [line for line, _ in refused] == [2, 3, 4, 5, 6], refused
    assert "provider_methods_docs_url_check" in refused[0][1]
    assert "unknown field(s) colour" in refused[1][1]
    assert "provider_methods_guidance_length_check" in refused[2][1]
    assert "appears twice" in refused[3][1]
    assert refused[4][1] == f"same provider and method as {path}:1"
    assert openai_fake.requests == [] and rows(database_url) == []

    # --skip-invalid saves the good lines, embedding only them.
    code, report, _ = cli_json(cli_env, "import", "--json", "--skip-invalid", str(path))
    assert (code, report["created"], len(report["refused"])) == (2, 2, 5), report
    assert sum(len(r["input"]) for r in openai_fake.requests) == 2


def test_export_then_import_of_drafts_without_a_vector_changes_nothing(cli_env, database_url, openai_fake, tmp_path):
    with psycopg.connect(database_url) as conn:
        conn.execute("insert into payrail.provider_methods (provider, method, guidance) values ('Acme', 'Draft', 'Not embedded yet.')")
        before = conn.execute("select version, updated_at from payrail.provider_methods").fetchall()
    exported = tmp_path / "export.jsonl"
    assert run_cli(cli_env, "export", "-o", str(exported)).returncode == 0
    code, report, _ = cli_json(cli_env, "import", "--json", str(exported))
    assert (code, report["unchanged"], report["updated"], report["created"]) == (0, 1, 0, 0), report
    assert openai_fake.requests == []
    with psycopg.connect(database_url) as conn:
        assert conn.execute("select version, updated_at from payrail.provider_methods").fetchall() == before


def test_a_save_of_a_version_that_is_no_longer_current_is_a_conflict_and_embeds_nothing(database_url, embedder, openai_fake):
    with connect(database_url, autocommit=True) as conn:
        (saved,) = save_changes(conn, lambda: embedder, [Change(as_record(record(1)), expected_version=0)])
        assert isinstance(saved, Saved) and (saved.outcome, saved.version, saved.embedded) == ("created", 1, True)
        conn.execute("update payrail.provider_methods set docs_url = 'https://docs.example/1'")  # someone else: version 2
        requests = len(openai_fake.requests)

        stale = Change(as_record(record(1, guidance="Purpose: my edit.")), record_id=saved.record_id, expected_version=1)
        (outcome,) = save_changes(conn, lambda: embedder, [stale])
        assert isinstance(outcome, Conflict) and "version 1 was read, version 2 is saved now" in outcome.reason, outcome
        assert len(openai_fake.requests) == requests
        assert conn.execute("select guidance, docs_url from payrail.provider_methods").fetchone() == ("Purpose: record number 1.", "https://docs.example/1")

        conn.execute("delete from payrail.provider_methods")
        (outcome,) = save_changes(conn, lambda: embedder, [Change(as_record(record(1)), record_id=saved.record_id, expected_version=2)])
        assert isinstance(outcome, Conflict) and "deleted" in outcome.reason, outcome


@pytest.mark.parametrize(
    "changes, fields, rule",
    [
        ({"urls": ["https://a.example", "https://a.example"]}, ("urls",), "provider_methods_urls_unique_check"),
        ({"docsUrl": "https://docs.example@evil.example/"}, ("docsUrl",), "provider_methods_docs_url_check"),
        ({"guidance": ""}, ("guidance",), "provider_methods_guidance_length_check"),
        ({"provider": "Acme\x01"}, ("provider",), "provider_methods_provider_check"),
        ({"method": "x" * 121}, ("method",), "provider_methods_method_check"),
        ({"guidance": "Purpose: NUL \x00 here."}, ("guidance",), None),
        ({"provider": "Existing", "method": "one"}, ("provider", "method"), "provider_methods_provider_method_key"),
    ],
)
def test_a_refusal_names_the_fields_its_rule_is_about(database_url, embedder, openai_fake, changes, fields, rule):
    with connect(database_url, autocommit=True) as conn:
        conn.execute("insert into payrail.provider_methods (provider, method, guidance) values ('Existing', 'One', 'G.')")
        (outcome,) = save_changes(conn, lambda: embedder, [Change(as_record(record(1, **changes)), expected_version=0)])
    assert isinstance(outcome, Refused) and outcome.fields == fields, outcome
    if rule:
        assert rule in outcome.reason
    assert openai_fake.requests == []


def test_an_edit_that_embeds_nothing_is_refused_by_the_save_itself_with_every_rule_and_changes_nothing(database_url, embedder, openai_fake):
    """A URL-only edit skips the checks in a transaction rolled back (they spare an embedding
    request, and there is none): its own save is refused the same way, every rule at once."""
    stored = "select version, urls, docs_url, enabled, embedding::text, updated_at from payrail.provider_methods"
    with connect(database_url, autocommit=True) as conn:
        (saved,) = save_changes(conn, lambda: embedder, [Change(as_record(record(1)), expected_version=0)])
        before = conn.execute(stored).fetchall()
        requests = len(openai_fake.requests)
        bad = record(1, urls=["https://a.example", "https://a.example"], docsUrl="http://docs.example")
        (outcome,) = save_changes(conn, lambda: embedder, [Change(as_record(bad), saved.record_id, saved.version)])
        assert isinstance(outcome, Refused), outcome
        assert sorted(rule.constraint for rule in outcome.rules) == ["provider_methods_docs_url_check", "provider_methods_urls_unique_check"]
        assert set(outcome.fields) == {"urls", "docsUrl"}
        assert len(openai_fake.requests) == requests
        assert conn.execute(stored).fetchall() == before


def test_checking_changes_looks_each_record_up_by_its_key_not_by_normalizing_every_name(database_url):
    """Finding the records n changes are for normalizes names a few times per change, never once per
    change and stored record: that cost n x m normalizations (0.2 ms each on PostgreSQL 16), and a
    300-line import beside other writers once ran past two minutes."""
    stored_count = 600
    with connect(database_url, autocommit=True) as conn:
        conn.cursor().executemany(
            "insert into payrail.provider_methods (provider, method, guidance) values (%s, %s, %s)",
            [(f"Provider {n:03d}", f"Method {n:03d}", f"Purpose: draft {n}.") for n in range(stored_count)],
        )
        conn.execute("analyze payrail.provider_methods")
        first_id = conn.execute("select min(id) from payrail.provider_methods").fetchone()[0]
        by_name = [Change(as_record(record(n, provider=f"PROVIDER {n:03d}"))) for n in range(0, stored_count, 30)]
        by_id = [Change(as_record(record(n)), record_id=first_id + n) for n in range(5)]
        new = [Change(as_record(record(stored_count + n))) for n in range(5)]
        changes = by_name + by_id + new
        with conn.transaction(force_rollback=True):
            conn.execute("set local track_functions = 'all'")
            outcomes = check_changes(conn, changes)
            normalized = conn.execute("select pg_stat_get_xact_function_calls('payrail._normalize_name(text)'::regprocedure)").fetchone()[0]
    assert outcomes == [None] * len(changes)
    assert 0 < normalized <= 20 * len(changes), f"{normalized} normalizations for {len(changes)} changes"


class PsqlEditor(threading.Thread):
    """An operator editing in psql meanwhile: transactions of a few URL edits in random order (not
    the registry's lock order), redone when PostgreSQL picks it as a deadlock's victim. A short
    pause between transactions, still far quicker than a person: back to back, they can make the
    import the victim on each of its attempts on a loaded machine (a CI run's import failed so)."""

    def __init__(self, database_url: str, seed: int):
        super().__init__(daemon=True)
        self.database_url, self.rng = database_url, random.Random(seed)
        self.stop, self.saved, self.victims = threading.Event(), 0, 0

    def run(self):
        with psycopg.connect(self.database_url) as conn:
            ids = [row[0] for row in conn.execute("select id from payrail.provider_methods").fetchall()]
            conn.commit()
            while not self.stop.is_set():
                try:
                    with conn.transaction():
                        for record_id in self.rng.sample(ids, 5):
                            conn.execute(
                                "update payrail.provider_methods set docs_url = %s where id = %s",
                                (f"https://docs.example/{self.rng.randrange(10**6)}", record_id),
                            )
                    self.saved += 1
                except psycopg.errors.DeadlockDetected:
                    self.victims += 1
                self.stop.wait(self.rng.uniform(0.01, 0.05))


def import_beside(cli_env: dict, database_url: str, path: str, command: list[str], seed: int) -> tuple:
    """Runs `payrail-embedder import path` while command runs in another process and an operator
    edits in psql; returns the import's result and the command's process and standard output."""
    editor = PsqlEditor(database_url, seed)
    editor.start()
    try:
        other = subprocess.Popen([str(CLI), *command], env=cli_env, cwd=REPO, stdout=subprocess.PIPE, text=True)
        imported = run_cli(cli_env, "import", "--json", path)
        out, _ = other.communicate(timeout=300)
    finally:
        editor.stop.set()
        editor.join(timeout=60)
    assert editor.saved > 0
    return imported, other, out


@pytest.mark.slow
def test_import_sync_and_psql_edits_side_by_side_all_finish_and_leave_every_vector_current(cli_env, database_url, tmp_path):
    """All write the same records (sync their vectors, import new content and vectors, psql their
    URLs); neither command fails the other, and no line is refused for a transient reason."""
    count = 300
    for round_number in range(3):
        with psycopg.connect(database_url) as conn:
            conn.execute("delete from payrail.provider_methods")
            conn.cursor().executemany(
                "insert into payrail.provider_methods (provider, method, guidance) values (%s, %s, %s)",
                [(f"Provider {n:03d}", f"Method {n:03d}", f"Purpose: draft {n}.") for n in range(count)],
            )
        catalog = [record(n, guidance=f"Purpose: imported {n} in round {round_number}.", enabled=n % 2 == 0) for n in range(count)]
        path = write_jsonl(tmp_path / f"round-{round_number}.jsonl", catalog)
        imported, sync, synced_out = import_beside(cli_env, database_url, path, ["sync", "--batch-size", "7", "--json"], round_number)

        report = json.loads(imported.stdout)
        assert (imported.returncode, report.get("refused"), report.get("updated")) == (0, [], count), report
        assert sync.returncode == 0, synced_out
        assert json.loads(synced_out)["pending"] == []
        stored = rows(database_url)
        assert all(assert_whole_or_nothing(row) for row in stored if row["enabled"])
        assert all(row["embedding"] is not None for row in stored)


@pytest.mark.slow
def test_a_model_switch_import_and_psql_edits_side_by_side_all_finish(cli_env, database_url, tmp_path):
    count = 200
    catalog = [record(n, enabled=n % 2 == 0) for n in range(count)]
    code, report, _ = cli_json(cli_env, "import", "--json", write_jsonl(tmp_path / "catalog.jsonl", catalog))
    assert code == 0, report
    # URL-only changes: the import writes no vector, so the switch's model does not concern it.
    moved = write_jsonl(tmp_path / "moved.jsonl", [record(n, urls=[f"https://api.example/v2/{n}"], enabled=n % 2 == 0) for n in range(count)])
    switch_command = ["model", "switch", "fake-embedding-2", "--batch-size", "16", "--json"]
    imported, switch, switched_out = import_beside(cli_env, database_url, moved, switch_command, seed=1)

    report = json.loads(imported.stdout)
    assert (imported.returncode, report.get("refused"), report.get("updated")) == (0, [], count), report
    switched = json.loads(switched_out)
    assert (switch.returncode, switched.get("switched")) == (0, True), switched
    stored = rows(database_url)
    assert {row["embedding_model"] for row in stored if row["enabled"]} == {"fake-embedding-2"}
    assert all(row["embedding"] is None or row["embedding_content_hash"] == row["content_hash"] for row in stored)
