"""The operators' write path: sync under failure and kill -9, model switch, preview and history,
with the real CLI in a subprocess, the fake OpenAI server over HTTP and real PostgreSQL servers.

Expected vectors come from the fake OpenAI server's fake_embedding, orders from
payrail_test_support.ranking.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading

import numpy as np
import psycopg
import pytest

from payrail_embedder.embedders import OPENAI_MAX_BATCH, Embedder, OpenAIEmbedder, record_text
from payrail_embedder.model import switch
from payrail_embedder.postgres.connection import connect
from payrail_embedder.registry import sync
from payrail_test_support import CLI, REPO
from payrail_test_support.cli import cli_import, cli_json, command_line_author, run_cli, without_registry
from payrail_test_support.openai_fake import FAKE_DIMENSIONS, FAKE_MODEL, SwitchAt, fake_embedding
from payrail_test_support.ranking import fake_semantic_path
from payrail_test_support.stored import assert_whole_or_nothing, insert_drafts, rows
from payrail_test_support.waiting import wait_until, waits_for_a_lock

NEW_MODEL = "fake-embedding-2"
NEW_DIMENSIONS = 48
QUERY = "find live hotel availability through a paid API"


# --- helpers -------------------------------------------------------------------------------------


def rec(provider, method, guidance, *, enabled=True, urls=(), docs_url=None) -> dict:
    return {"provider": provider, "method": method, "urls": list(urls), "docsUrl": docs_url, "guidance": guidance, "enabled": enabled}


def public(record: dict) -> dict:
    return {key: record[key] for key in ("provider", "method", "urls", "docsUrl", "guidance")}


CATALOG = [
    rec("Booking.com", "Accommodation availability", "Purpose: live hotel availability and room prices for dates.\nNotes: paid partner API."),
    rec("Duffel", "Stays search", "Purpose: search hotel rooms to book by location and dates.\nNotes: paid API."),
    rec("Stripe", "Create a refund", "Purpose: give money back for an earlier card charge."),
    rec("Twilio", "Send an SMS", "Purpose: send a text message to a mobile phone number."),
    rec("OpenWeather", "Current weather", "Purpose: current weather conditions for a city."),
    rec("Amadeus", "Hotel offers", "Purpose: find live hotel availability through a paid API.", enabled=False),
]


def fake_embedder(openai_fake, model=FAKE_MODEL, **kwargs) -> OpenAIEmbedder:
    return OpenAIEmbedder(model, api_key="test-key", base_url=openai_fake.base_url, timeout=2, max_retries=0, **kwargs)


# --- sync ----------------------------------------------------------------------------------------


def test_sync_sends_up_to_2048_inputs_per_request_and_batch_size_overrides(cli_env, database_url, openai_fake):
    insert_drafts(database_url, OPENAI_MAX_BATCH + 1)
    code, summary, _ = cli_json(cli_env, "sync", "--json")
    assert (code, without_registry(summary)) == (0, {"embedded": OPENAI_MAX_BATCH + 1, "changedMeanwhile": 0, "pending": []})
    assert [len(r["input"]) for r in openai_fake.requests] == [OPENAI_MAX_BATCH, 1]

    with psycopg.connect(database_url) as conn:
        conn.execute("update payrail.provider_methods set guidance = guidance || ' Edited.' where id <= 21")
    openai_fake.requests.clear()
    code, summary, _ = cli_json(cli_env, "sync", "--batch-size", "7", "--json")
    assert (code, summary["embedded"]) == (0, 21), summary
    assert [len(r["input"]) for r in openai_fake.requests] == [7, 7, 7]


def test_sync_stops_when_the_embedder_fails_midway_keeps_what_it_committed_and_lists_the_rest(cli_env, database_url, openai_fake):
    names = insert_drafts(database_url, 12)
    openai_fake.requests = SwitchAt(openai_fake, 3, "500")
    code, summary, stderr = cli_json(cli_env, "sync", "--batch-size", "4", "--json")

    assert code == 1, summary
    assert (summary["embedded"], summary["changedMeanwhile"]) == (8, 0), summary
    assert summary["pending"] == names[8:]
    assert "500" in summary["error"], summary
    stored = rows(database_url)
    assert [assert_whole_or_nothing(row) for row in stored] == [True] * 8 + [False] * 4

    # Text mode lists the pending records on standard error.
    result = run_cli(cli_env, "sync", "--batch-size", "4")
    assert result.returncode == 1
    assert all(f"pending: {name}" in result.stderr for name in names[8:]), result.stderr
    assert "0 embedded, 0 changed meanwhile, 4 pending" in result.stdout

    openai_fake.behaviour = "ok"
    code, summary, _ = cli_json(cli_env, "sync", "--json")
    assert (code, without_registry(summary)) == (0, {"embedded": 4, "changedMeanwhile": 0, "pending": []})
    assert all(assert_whole_or_nothing(row) for row in rows(database_url))


def test_sync_killed_with_sigkill_mid_transaction_leaves_nothing_half_written_and_a_rerun_converges(cli_env, database_url, openai_fake):
    """kill -9 while a batch's transaction has written some of its rows and waits on a row lock."""
    names = insert_drafts(database_url, 20)
    ids = [row["id"] for row in rows(database_url)]
    blocker = psycopg.connect(database_url)
    # The third record of the third batch (of 5): the sync's transaction writes two rows, then waits.
    blocker.execute("select from payrail.provider_methods where id = %s for update", (ids[12],))

    sync = subprocess.Popen(
        [str(CLI), "sync", "--batch-size", "5", "--json"],
        env=cli_env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        with psycopg.connect(database_url, autocommit=True) as watcher:

            def sync_waits() -> bool:
                assert sync.poll() is None, sync.communicate()
                return waits_for_a_lock(watcher, "payrail-embedder")

            wait_until(sync_waits, "sync to reach the locked row")
            os.kill(sync.pid, signal.SIGKILL)
            sync.wait(timeout=30)
            assert sync.returncode == -signal.SIGKILL
            blocker.rollback()
            # The server rolls the orphaned transaction back once its backend notices the dead client.
            wait_until(
                lambda: (
                    not watcher.execute(
                        "select exists (select from pg_stat_activity where application_name like 'payrail-embedder%' and datname = current_database())"
                    ).fetchone()[0]
                ),
                "the killed sync's backend to go away",
            )
    finally:
        blocker.close()
        if sync.poll() is None:
            sync.kill()

    stored = rows(database_url)
    embedded = [assert_whole_or_nothing(row) for row in stored]
    # Two batches committed; the third batch's two written rows went with its transaction.
    assert embedded == [True] * 10 + [False] * 10
    requests_before_rerun = len(openai_fake.requests)

    code, summary, _ = cli_json(cli_env, "sync", "--batch-size", "5", "--json")
    assert (code, without_registry(summary)) == (0, {"embedded": 10, "changedMeanwhile": 0, "pending": []})
    assert [r["input"] for r in openai_fake.requests[requests_before_rerun:]] == [
        [record_text(row["provider"], row["method"], row["guidance"]) for row in stored[start : start + 5]] for start in (10, 15)
    ]
    assert all(assert_whole_or_nothing(row) for row in rows(database_url))
    assert cli_json(cli_env, "sync", "--dry-run", "--json")[1] == {"wouldEmbed": []}
    assert len(names) == 20


def test_sync_embeds_the_new_content_of_a_record_edited_while_it_was_embedded(database_url, openai_fake):
    insert_drafts(database_url, 3)
    edited_guidance = "Purpose: rewritten while sync was embedding it."
    real = fake_embedder(openai_fake)

    class EditingEmbedder(Embedder):
        model_name = real.model_name
        batch_size = OPENAI_MAX_BATCH
        calls = 0

        def embed(self, texts):
            vectors = real.embed(texts)
            self.calls += 1
            if self.calls == 1:  # an operator saves an edit after the vector was computed
                with psycopg.connect(database_url) as conn:
                    conn.execute(
                        "update payrail.provider_methods set guidance = %s where method = 'Method 0001'",
                        (edited_guidance,),
                    )
            return vectors

    with connect(database_url, autocommit=True) as conn:
        report = sync.sync(conn, EditingEmbedder())
    assert report.to_json() == {"embedded": 3, "changedMeanwhile": 1, "pending": []}
    stored = rows(database_url)
    assert all(assert_whole_or_nothing(row) for row in stored)
    assert stored[1]["guidance"] == edited_guidance


@pytest.mark.parametrize(
    "bad_vector, message",
    [
        (lambda n: np.full(n, np.nan, dtype=np.float32), "zero or non-finite"),
        (lambda n: np.zeros(n, dtype=np.float32), "zero or non-finite"),
        (lambda n: np.full(n, np.inf, dtype=np.float32), "zero or non-finite"),
    ],
    ids=["nan", "zero", "infinity"],
)
def test_sync_refuses_nan_zero_and_infinite_vectors_and_changes_nothing(database_url, bad_vector, message):
    insert_drafts(database_url, 3)

    class BadEmbedder(Embedder):
        model_name = FAKE_MODEL
        batch_size = OPENAI_MAX_BATCH

        def embed(self, texts):
            return [fake_embedding(t) for t in texts[:-1]] + [bad_vector(FAKE_DIMENSIONS)]

    before = rows(database_url)
    with connect(database_url, autocommit=True) as conn:
        report = sync.sync(conn, BadEmbedder())
    assert message in report.error
    assert report.embedded == 0 and len(report.pending) == 3
    assert rows(database_url) == before


def test_sync_refuses_vectors_of_other_dimensions_midway_and_names_both(cli_env, database_url, openai_fake):
    names = insert_drafts(database_url, 6)
    openai_fake.requests = SwitchAt(openai_fake, 2, "wrong_dimensions")
    code, summary, _ = cli_json(cli_env, "sync", "--batch-size", "3", "--json")
    assert code == 1
    assert (summary["embedded"], summary["pending"]) == (3, names[3:]), summary
    assert f"({FAKE_DIMENSIONS} dimensions)" in summary["error"] and f"({FAKE_DIMENSIONS + 1} dimensions)" in summary["error"]
    assert [assert_whole_or_nothing(row) for row in rows(database_url)] == [True] * 3 + [False] * 3


def test_sync_with_another_model_than_the_registrys_is_refused_before_any_request(cli_env, database_url, openai_fake, tmp_path):
    cli_import(cli_env, tmp_path / "catalog.jsonl", CATALOG[:2])
    insert_drafts(database_url, 2)
    requests = len(openai_fake.requests)
    result = run_cli({**cli_env, "PAYRAIL_EMBEDDING_MODEL": NEW_MODEL}, "sync", "--json")
    failure = json.loads(result.stdout)
    assert (result.returncode, failure["error"]) == (2, "misconfigured"), failure
    assert f"the registry uses model {FAKE_MODEL}" in failure["detail"] and "model switch" in failure["detail"]
    assert len(openai_fake.requests) == requests


# --- model switch --------------------------------------------------------------------------------


def test_model_switch_stages_while_the_old_model_answers_resumes_after_a_failure_then_switches(cli_env, database_url, openai_fake, tmp_path):
    cli_import(cli_env, tmp_path / "catalog.jsonl", CATALOG)
    new_env = {**cli_env, "PAYRAIL_EMBEDDING_MODEL": NEW_MODEL}
    code, shown, _ = cli_json(cli_env, "model", "show", "--json")
    assert (code, shown["model"], shown["dimensions"], shown["embedded"], shown["staged"]) == (0, FAKE_MODEL, FAKE_DIMENSIONS, len(CATALOG), {})
    code, before, _ = cli_json(cli_env, "search", "--json", QUERY)
    assert code == 0 and before["matches"] == [public(r) for r in fake_semantic_path(CATALOG, QUERY)]

    # The new model answers with other dimensions; its second request fails.
    openai_fake.dimensions = NEW_DIMENSIONS
    openai_fake.requests = SwitchAt(openai_fake, 2, "500")
    code, report, stderr = cli_json(cli_env, "model", "switch", NEW_MODEL, "--batch-size", "2", "--json")
    assert code == 1, report
    assert (report["switched"], report["staged"], report["previous"]) == (False, 2, {"model": FAKE_MODEL, "dimensions": FAKE_DIMENSIONS})
    # Staging embeds the shortest texts first (sync's order): the first batch is two of the shortest,
    # and the rest are pending, shortest first.
    length = {f"{r['provider']} / {r['method']}": len(r["provider"]) + len(r["method"]) + len(r["guidance"]) for r in CATALOG}
    staged_names = set(length) - set(report["pending"])
    assert len(staged_names) == 2 and max(length[n] for n in staged_names) <= min(length[n] for n in report["pending"])
    assert [length[n] for n in report["pending"]] == sorted(length[n] for n in report["pending"]), report
    assert "500" in report["error"]

    # Staged but not switched: the old model is in force and answers exactly as before.
    code, shown, _ = cli_json(cli_env, "model", "show", "--json")
    assert (shown["model"], shown["staged"]) == (FAKE_MODEL, {NEW_MODEL: 2})
    openai_fake.dimensions, openai_fake.behaviour = FAKE_DIMENSIONS, "ok"
    assert cli_json(cli_env, "search", "--json", QUERY)[:2] == (0, before)
    # A client already embedding with the new model is told so, never given a ranking.
    code, answer, _ = cli_json(new_env, "search", "--json", QUERY)
    assert (code, answer["error"]) == (1, "search_unavailable"), answer
    assert FAKE_MODEL in answer["detail"] and NEW_MODEL in answer["detail"]

    # The rerun embeds only what is not staged yet, then switches.
    openai_fake.dimensions = NEW_DIMENSIONS
    openai_fake.requests = []
    code, report, _ = cli_json(cli_env, "model", "switch", NEW_MODEL, "--batch-size", "2", "--json")
    assert code == 0, report
    assert (report["switched"], report["staged"], report["moved"], report["draftsCleared"], report["dimensions"]) == (
        True,
        len(CATALOG) - 2,
        len(CATALOG),
        0,
        NEW_DIMENSIONS,
    )
    assert sorted(text for r in openai_fake.requests for text in r["input"]) == sorted(
        record_text(r["provider"], r["method"], r["guidance"]) for r in CATALOG if f"{r['provider']} / {r['method']}" not in staged_names
    )
    assert all(assert_whole_or_nothing(row, NEW_DIMENSIONS) for row in rows(database_url))
    code, shown, _ = cli_json(cli_env, "model", "show", "--json")
    assert (shown["model"], shown["dimensions"], shown["embedded"], shown["staged"]) == (NEW_MODEL, NEW_DIMENSIONS, len(CATALOG), {})

    # Now the new model answers, and a client still on the old one gets search_unavailable (PYE02 in SQL).
    code, answer, _ = cli_json(new_env, "search", "--json", QUERY)
    assert (code, answer["matches"]) == (0, [public(r) for r in fake_semantic_path(CATALOG, QUERY, NEW_DIMENSIONS)])
    code, answer, _ = cli_json(cli_env, "search", "--json", QUERY)
    assert (code, answer["error"]) == (1, "search_unavailable"), answer
    assert FAKE_MODEL in answer["detail"] and NEW_MODEL in answer["detail"]
    with connect(database_url) as conn, pytest.raises(psycopg.Error) as refused:
        conn.execute("select * from payrail.search_provider_methods(%s, %s, %s)", (QUERY, fake_embedding(QUERY), FAKE_MODEL))
    assert refused.value.sqlstate == "PYE02"
    # Names never needed a vector.
    assert cli_json(cli_env, "search", "--json", "Stripe")[1]["matches"] == [public(CATALOG[2])]

    code, report, _ = cli_json(new_env, "model", "switch", NEW_MODEL, "--json")
    assert (code, report["switched"], report.get("error")) == (0, False, None)
    assert "already uses" in run_cli(new_env, "model", "switch", NEW_MODEL).stdout


def test_model_switch_restages_a_record_edited_after_it_was_staged(cli_env, database_url, openai_fake, tmp_path):
    cli_import(cli_env, tmp_path / "catalog.jsonl", CATALOG)
    openai_fake.dimensions = NEW_DIMENSIONS
    real = fake_embedder(openai_fake, NEW_MODEL)
    edited = dict(CATALOG[0], guidance="Purpose: live hotel availability, edited during the switch.")

    class EditingEmbedder(Embedder):
        model_name = NEW_MODEL
        batch_size = OPENAI_MAX_BATCH
        calls = 0

        def embed(self, texts):
            vectors = real.embed(texts)
            self.calls += 1
            if self.calls == 1:  # `payrail-embedder import` saves an edit with an old-model vector meanwhile
                with connect(database_url) as conn:
                    conn.execute(
                        """
                        update payrail.provider_methods
                        set guidance = %s, embedding = %s, embedding_model = %s,
                            embedding_content_hash = payrail._content_hash(provider, method, %s)
                        where provider = %s
                        """,
                        (
                            edited["guidance"],
                            fake_embedding(record_text(edited["provider"], edited["method"], edited["guidance"])),
                            FAKE_MODEL,
                            edited["guidance"],
                            edited["provider"],
                        ),
                    )
            return vectors

    with connect(database_url, autocommit=True) as conn:
        report = switch.switch_model(conn, EditingEmbedder(), batch_size=len(CATALOG))
    assert (report.switched, report.changed_meanwhile, report.staged) == (True, 1, len(CATALOG)), report
    assert all(assert_whole_or_nothing(row, NEW_DIMENSIONS) for row in rows(database_url))
    assert [r["guidance"] for r in rows(database_url) if r["provider"] == edited["provider"]] == [edited["guidance"]]


def test_a_vector_writer_waits_for_a_switch_in_progress_then_is_refused(database_url):
    """Readers keep the old model during the switch; an old-model writer cannot slip in past it."""
    with connect(database_url) as conn:
        conn.execute("select payrail.set_embedding_model('old-model', 3)")
        conn.execute(
            """
            insert into payrail.provider_methods (provider, method, guidance, enabled, embedding, embedding_model, embedding_content_hash)
            values ('Acme', 'Hotels', 'Find hotels.', true, '[1,0,0]', 'old-model', payrail._content_hash('Acme', 'Hotels', 'Find hotels.'))
            """
        )
        conn.execute(
            """
            insert into payrail.embedding_staging (provider_method_id, model, content_hash, embedding)
            select id, 'new-model', content_hash, '[1,0]' from payrail.provider_methods
            """
        )

    switcher = connect(database_url)
    switcher.execute("select * from payrail.switch_embedding_model('new-model', 2)")  # not committed yet
    outcome: dict = {}

    def write_old_model_vector():
        try:
            with connect(database_url) as writer:
                writer.execute(
                    """
                    insert into payrail.provider_methods (provider, method, guidance, embedding, embedding_model, embedding_content_hash)
                    values ('Globex', 'Late', 'Late writer.', '[0,1,0]', 'old-model', payrail._content_hash('Globex', 'Late', 'Late writer.'))
                    """
                )
            outcome["result"] = "saved"
        except psycopg.Error as error:
            outcome["result"] = error.sqlstate

    writer = threading.Thread(target=write_old_model_vector)
    writer.start()
    try:
        with connect(database_url, autocommit=True) as reader:

            def writer_waits() -> bool:
                assert writer.is_alive(), outcome
                return waits_for_a_lock(reader)

            wait_until(writer_waits, "the late writer to wait for the switch's lock", timeout=30)
            answer = reader.execute("select provider from payrail.search_provider_methods('find a hotel', '[1,0,0]', 'old-model')").fetchall()
            assert answer == [("Acme",)], "search must keep answering with the old model during the switch"
        switcher.commit()
        writer.join(timeout=30)
    finally:
        switcher.close()
    assert outcome == {"result": "PYE02"}


# --- preview and history -------------------------------------------------------------------------


def test_preview_counts_the_draft_as_enabled_and_changes_nothing(cli_env, database_url, openai_fake, tmp_path):
    cli_import(cli_env, tmp_path / "catalog.jsonl", CATALOG)
    draft = CATALOG[-1]
    code, answer, _ = cli_json(cli_env, "preview", QUERY, "--draft", "amadeus /  HOTEL offers", "--json")
    with_draft = [dict(r, enabled=True) if r is draft else r for r in CATALOG]
    assert (code, answer["matches"]) == (0, [public(r) for r in fake_semantic_path(with_draft, QUERY)])
    assert answer["matches"][0] == public(draft)
    # The name path counts it too, without embedding the query.
    requests = len(openai_fake.requests)
    assert cli_json(cli_env, "preview", "Amadeus", "--draft", "Amadeus / Hotel offers", "--json")[1] == {"matches": [public(draft)]}
    assert len(openai_fake.requests) == requests
    # Nothing changed: search does not show the draft.
    assert cli_json(cli_env, "search", "--json", QUERY)[1]["matches"] == [public(r) for r in fake_semantic_path(CATALOG, QUERY)]
    text = run_cli(cli_env, "preview", QUERY, "--draft", "Amadeus / Hotel offers").stdout
    assert text.startswith("1. Amadeus / Hotel offers\n")

    with psycopg.connect(database_url) as conn:
        conn.execute("update payrail.provider_methods set guidance = 'Purpose: edited.' where provider = 'Amadeus'")
    result = run_cli(cli_env, "preview", QUERY, "--draft", "Amadeus / Hotel offers")
    assert result.returncode == 2
    assert "draft_not_embedded: " in result.stderr and "payrail-embedder sync" in result.stderr
    result = run_cli(cli_env, "preview", QUERY, "--draft", "Nobody / Nothing")
    assert result.returncode == 2 and 'unknown_record: no provider method is named "Nobody / Nothing"' in result.stderr


def test_history_shows_every_earlier_version_and_restore_brings_one_back(cli_env, database_url, openai_fake, tmp_path):
    original = rec("Acme Maps", "Geocode", "Purpose: turn an address into coordinates.", enabled=False, urls=["https://acme.example/v1"])
    cli_import(cli_env, tmp_path / "catalog.jsonl", [original])
    with psycopg.connect(database_url) as conn:
        conn.execute("update payrail.provider_methods set urls = '{https://acme.example/v2}' where provider = 'Acme Maps'")
        conn.execute("update payrail.provider_methods set guidance = 'Purpose: geocoding, rewritten.' where provider = 'Acme Maps'")

    code, found, _ = cli_json(cli_env, "history", "acme maps", "GEOCODE", "--json")
    assert code == 0
    assert found["record"]["guidance"] == "Purpose: geocoding, rewritten." and found["record"]["embedded"] is False
    assert [(v["operation"], v["urls"], v["guidance"]) for v in found["history"]] == [
        ("update", ["https://acme.example/v2"], original["guidance"]),
        ("update", ["https://acme.example/v1"], original["guidance"]),
    ]
    with psycopg.connect(database_url) as conn:
        user = conn.info.user
    assert {(v["changedBy"], v["changedBySessionUser"]) for v in found["history"]} == {(user, user)}
    # Every version names who saved it, the first (imported by the command line as a shared
    # superuser: the operating-system user) included; psql's updates name the login.
    assert [v["savedBy"] for v in found["history"]] == [user, command_line_author(user)] and found["record"]["savedBy"] == user
    text = run_cli(cli_env, "history", "Acme Maps", "Geocode").stdout
    assert original["guidance"] in text and f"saved {found['history'][-1]['savedAt']} by {command_line_author(user)}" in text, text
    assert text.splitlines()[-1] == "restore one with: payrail-embedder restore HISTORY_ID   (--as-draft: as a draft)"

    code, restored, _ = cli_json(cli_env, "restore", str(found["history"][-1]["historyId"]), "--json", "--yes")
    assert code == 0 and restored["outcome"] == "updated", restored
    assert (restored["urls"], restored["guidance"], restored["enabled"]) == (original["urls"], original["guidance"], False)
    with psycopg.connect(database_url) as conn:
        conn.execute("delete from payrail.provider_methods where provider = 'Acme Maps'")
    export = run_cli(cli_env, "export").stdout
    assert export == ""
    code, found, _ = cli_json(cli_env, "history", "Acme Maps", "Geocode", "--json")
    assert found["record"] is None
    assert found["history"][0]["operation"] == "delete"
    assert public(found["history"][0]) == public(original)

    result = run_cli(cli_env, "history", "Nobody", "Nothing")
    assert result.returncode == 2 and "unknown_record: no provider method" in result.stderr


def test_sync_embeds_the_shortest_texts_first_so_each_batch_pads_little(cli_env, database_url, openai_fake):
    """A model pads a batch to its longest text; sync groups texts of similar lengths."""
    rng = np.random.default_rng(5)
    drafts = [(f"Provider {n:02d}", f"Method {n:02d}", "Purpose: " + "lookup " * int(rng.integers(1, 60))) for n in range(12)]
    with psycopg.connect(database_url) as conn, conn.cursor() as cursor:
        cursor.executemany("insert into payrail.provider_methods (provider, method, guidance) values (%s, %s, %s)", drafts)
    result = run_cli(cli_env, "sync", "--batch-size", "4")
    assert result.returncode == 0, result.stdout + result.stderr

    sent = [text for request in openai_fake.requests for text in request["input"]]
    assert [len(request["input"]) for request in openai_fake.requests] == [4, 4, 4]
    assert sorted(sent) == sorted(record_text(*draft) for draft in drafts)
    assert [len(text) for text in sent] == sorted(len(text) for text in sent)
