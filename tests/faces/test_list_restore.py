"""The operator's day without psql: `payrail-embedder list`, `history` (who saved every version)
and `restore HISTORY_ID` through the write path, in real subprocesses on a real PostgreSQL.
"""

from __future__ import annotations

import psycopg
import pytest
from psycopg.rows import dict_row

from payrail_embedder.embedders import record_text
from payrail_embedder.postgres.connection import connect
from payrail_test_support.cli import cli_import, cli_json, command_line_author, run_cli
from payrail_test_support.openai_fake import fake_embedding
from test_edit import DRAFT, ENABLED

WEATHER = {**ENABLED, "provider": "globex weather", "method": "Current conditions", "guidance": "Purpose: weather now."}


@pytest.fixture
def registry(cli_env, tmp_path):
    cli_import(cli_env, tmp_path / "catalog.jsonl", [WEATHER, ENABLED, DRAFT])
    return cli_env


def stored(database_url: str, method: str) -> dict:
    with connect(database_url) as conn:
        conn.row_factory = dict_row
        return conn.execute("select * from payrail.provider_methods where method = %s", (method,)).fetchone()


def test_list_shows_every_record_in_order_with_its_state_and_filters_like_the_backoffice(registry, database_url):
    with psycopg.connect(database_url) as conn:
        user = conn.info.user
        conn.execute("update payrail.provider_methods set guidance = guidance || ' Edited.' where method = 'Reverse geocode'")
    code, listed, _ = cli_json(registry, "list", "--json")
    assert code == 0
    # Imported by the command line as a shared superuser: the operating-system user; psql's update: the login.
    assert [(r["provider"], r["method"], r["state"], r["version"], r["savedBy"]) for r in listed["records"]] == [
        ("Acme Maps", "Geocode an address", "enabled", 1, command_line_author(user)),
        ("Acme Maps", "Reverse geocode", "draft needing an embedding", 2, user),
        ("globex weather", "Current conditions", "enabled", 1, command_line_author(user)),  # ignoring case
    ]
    assert listed["records"][0]["recordId"] == stored(database_url, "Geocode an address")["id"]

    text = run_cli(registry, "list").stdout.splitlines()
    assert text[0].startswith("Acme Maps / Geocode an address  (enabled, version 1, from catalog.jsonl, saved ") and text[0].endswith(
        f" by {command_line_author(user)})"
    )
    assert text[-1] == "3 records"

    code, found, _ = cli_json(registry, "list", "--text", "COORDINATES", "--state", "enabled", "--json")
    assert [r["method"] for r in found["records"]] == ["Geocode an address"]
    assert run_cli(registry, "list", "--text", "nothing like it").stdout == "0 records\n"
    # The text is data, never SQL or a pattern: wildcards and quotes match only themselves.
    for hostile in ("%", "_", "'); drop table payrail.provider_methods; --", "\\"):
        assert run_cli(registry, "list", "--text", hostile).stdout == "0 records\n", hostile
    assert len(cli_json(registry, "list", "--json")[1]["records"]) == 3

    code, failure, _ = cli_json(registry, "list", "--state", "archived", "--json")
    assert code == 2 and failure["error"] == "invalid_input" and "archived" in failure["detail"], failure


def test_history_names_who_saved_every_version_and_unknown_where_the_registry_never_kept_it(registry, database_url):
    with psycopg.connect(database_url) as conn:
        user = conn.info.user
        conn.execute("create role payrail_test_editor")
        conn.execute("grant payrail_operator to payrail_test_editor")
        conn.execute("set role payrail_test_editor")
        conn.execute("update payrail.provider_methods set docs_url = 'https://docs.acme.example/v2' where method = 'Reverse geocode'")
        conn.execute("reset role")
    code, found, _ = cli_json(registry, "history", "Acme Maps / Reverse geocode", "--json")
    assert (found["record"]["savedBy"], [v["savedBy"] for v in found["history"]]) == ("payrail_test_editor", [command_line_author(user)])

    # A version saved before the registry kept its author: said unknown, never guessed.
    with psycopg.connect(database_url) as conn:
        conn.execute("alter table payrail.provider_methods disable trigger user")
        conn.execute("update payrail.provider_methods set saved_by = null where method = 'Geocode an address'")
        conn.execute("alter table payrail.provider_methods enable trigger user")
    code, found, _ = cli_json(registry, "history", "Acme Maps / Geocode an address", "--json")
    assert found["record"]["savedBy"] == "unknown"
    assert "saved " in run_cli(registry, "history", "Acme Maps / Geocode an address").stdout.splitlines()[0]
    with psycopg.connect(database_url) as conn:
        conn.execute("drop owned by payrail_test_editor")
        conn.execute("drop role payrail_test_editor")


def test_restore_of_other_content_into_an_enabled_record_embeds_it_and_keeps_it_enabled(registry, database_url, openai_fake):
    edited = ENABLED["guidance"].replace("paid per call", "paid per request")
    with psycopg.connect(database_url) as conn:
        conn.execute("update payrail.provider_methods set enabled = false, guidance = %s where method = %s", (edited, ENABLED["method"]))
    assert run_cli(registry, "sync").returncode == 0
    with psycopg.connect(database_url) as conn:
        conn.execute("update payrail.provider_methods set enabled = true where method = %s", (ENABLED["method"],))
    code, found, _ = cli_json(registry, "history", "Acme Maps", "Geocode an address", "--json")
    first = found["history"][-1]
    assert first["guidance"] == ENABLED["guidance"]

    code, restored, _ = cli_json(registry, "restore", str(first["historyId"]), "--json", "--yes")
    assert code == 0 and (restored["outcome"], restored["embeddedNow"], restored["enabled"]) == ("updated", True, True), restored
    after = stored(database_url, ENABLED["method"])
    assert (after["guidance"], after["enabled"]) == (ENABLED["guidance"], True)
    expected = fake_embedding(record_text(ENABLED["provider"], ENABLED["method"], ENABLED["guidance"]))
    assert after["embedding"].to_numpy().tolist() == pytest.approx(expected.tolist(), abs=1e-6)

    # As a draft: the same content (nothing to embed), taken out of search.
    text = run_cli(registry, "restore", str(first["historyId"]), "--as-draft", "--yes")
    assert text.returncode == 0 and text.stdout.splitlines()[:2] == [
        f'Restoring version 1 (history entry {first["historyId"]}) into "Acme Maps / Geocode an address" (record {after["id"]}, version 4, enabled) changes:',
        "  Enabled: enabled -> draft",
    ], text.stdout
    assert text.stdout.splitlines()[-1].startswith('updated "Acme Maps / Geocode an address"') and "draft" in text.stdout.splitlines()[-1]
    assert stored(database_url, ENABLED["method"])["enabled"] is False


def test_a_deleted_record_comes_back_as_a_new_draft_and_a_name_taken_since_is_refused_in_words(registry, database_url):
    old_id = stored(database_url, "Reverse geocode")["id"]
    with psycopg.connect(database_url) as conn:
        conn.execute("delete from payrail.provider_methods where id = %s", (old_id,))
        (history_id,) = conn.execute("select id from payrail.provider_method_history where provider_method_id = %s", (old_id,)).fetchone()
        conn.execute("insert into payrail.provider_methods (provider, method, guidance) values ('ACME maps', 'reverse  geocode', 'Another.')")
    code, failure, _ = cli_json(registry, "restore", str(history_id), "--json")
    assert code == 2 and failure["error"] == "invalid_input", failure
    assert "provider and method: another record already has this provider and method" in failure["detail"], failure

    with psycopg.connect(database_url) as conn:
        conn.execute("delete from payrail.provider_methods where guidance = 'Another.'")
    code, restored, _ = cli_json(registry, "restore", str(history_id), "--json", "--yes")
    assert code == 0 and restored["outcome"] == "created" and restored["recordId"] != old_id, restored
    assert (restored["enabled"], restored["embedded"], restored["guidance"]) == (False, True, DRAFT["guidance"])

    # Said in words too: deleted again, restored again, it comes back as another new record.
    with psycopg.connect(database_url) as conn:
        conn.execute("delete from payrail.provider_methods where id = %s", (restored["recordId"],))
    text = run_cli(registry, "restore", str(history_id), "--yes")
    again = stored(database_url, "Reverse geocode")
    assert text.returncode == 0 and text.stdout.splitlines() == [
        f'Record {old_id} was deleted since: restoring version 1 (history entry {history_id}) brings "Acme Maps / Reverse geocode" back as a new record, a draft.',
        "No golden queries to compare (`payrail-embedder golden add` adds them).",
        f"record {old_id} was deleted since: restored as a new record, a draft until enabled",
        f'created "Acme Maps / Reverse geocode": record {again["id"]}, version 1, draft, embedded now',
    ], (text.stdout, text.stderr)


def test_restore_of_an_unknown_history_id_names_the_problem(registry):
    code, failure, _ = cli_json(registry, "restore", "999999", "--json")
    assert code == 2 and failure == {
        "error": "unknown_record",
        "detail": "there is no history entry 999999; `payrail-embedder history PROVIDER METHOD` lists them",
    }
    code, failure, _ = cli_json(registry, "restore", "0", "--json")
    assert code == 2 and failure["error"] == "invalid_input"


def test_restore_given_a_record_name_says_the_history_ids_of_its_versions(registry, database_url):
    """People type names; restore needs the version: it names the ids, and changes nothing."""
    run_cli(registry, "disable", "Acme Maps / Geocode an address", "--yes")
    code, found, _ = cli_json(registry, "history", "acme maps / GEOCODE AN ADDRESS", "--json")
    (only,) = found["history"]
    before = stored(database_url, "Geocode an address")
    for name in (["Acme Maps / Geocode an address"], ["acme maps", "geocode an address"]):
        code, failure, _ = cli_json(registry, "restore", *name, "--json")
        assert (code, failure["error"]) == (2, "invalid_input"), failure
        assert failure["detail"] == (
            "restore takes a history id, not a record; those of Acme Maps / Geocode an address, newest first: "
            f'{only["historyId"]} (version 1). `payrail-embedder history "Acme Maps / Geocode an address"` shows what each holds'
        )
    # A provider of several methods: which ones, as history says it.
    code, failure, _ = cli_json(registry, "restore", "Acme Maps", "--json")
    assert code == 2 and "Geocode an address" in failure["detail"] and "Reverse geocode" in failure["detail"], failure
    code, failure, _ = cli_json(registry, "restore", "Globex Weather / Current conditions", "--json")
    assert code == 2 and "newest first: none: it has no earlier version" in failure["detail"], failure
    assert stored(database_url, "Geocode an address") == before
