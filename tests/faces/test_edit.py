"""`payrail-embedder edit` in a real subprocess, with $EDITOR a program that edits as an operator would.

Every save goes through the write path: vectors are checked against the fake OpenAI server's
embedding of the stored text, history against what the database recorded.
"""

from __future__ import annotations

import json

import psycopg
import pytest
from psycopg.rows import dict_row

from payrail_embedder.embedders import record_text
from payrail_embedder.faces.edit import editable_text, parse_editor_text
from payrail_embedder.postgres.connection import connect
from payrail_embedder.registry.records import ProviderMethod
from payrail_test_support.cli import cli_import, command_line_author, run_cli
from payrail_test_support.cli import run_edit as edit
from payrail_test_support.openai_fake import fake_embedding

ENABLED = {
    "provider": "Acme Maps",
    "method": "Geocode an address",
    "urls": ["https://api.acme.example/v1/geocode"],
    "docsUrl": "https://docs.acme.example/geocode",
    "guidance": "Purpose: turn an address into coordinates.\nNotes: paid per call.",
    "enabled": True,
}
DRAFT = {**ENABLED, "method": "Reverse geocode", "guidance": "Purpose: turn coordinates into an address.", "enabled": False}


@pytest.fixture
def registry(cli_env, tmp_path):
    cli_import(cli_env, tmp_path / "catalog.jsonl", [ENABLED, DRAFT])
    return cli_env


def stored(database_url: str, method: str) -> dict:
    with connect(database_url) as conn:
        conn.row_factory = dict_row
        return conn.execute(
            """
            select id, version, provider, method, urls, docs_url, guidance, enabled, embedding,
                   embedding_content_hash = content_hash as current_vector
            from payrail.provider_methods where method = %s
            """,
            (method,),
        ).fetchone()


def body_of(shown: str) -> dict:
    """The record in a text the editor was shown, as the catalog's JSON."""
    return parse_editor_text(shown).to_json()


def test_a_word_fixed_in_an_enabled_record_is_embedded_and_saved_and_the_record_stays_enabled(registry, database_url, tmp_path):
    before = stored(database_url, ENABLED["method"])
    result, shown = edit(registry, tmp_path, [{"replace": ["paid per call", "paid per request"]}], "Acme Maps / Geocode an address")
    assert result.returncode == 0, result.stderr
    assert "updated" in result.stdout and "embedded now" in result.stdout and "enabled" in result.stdout, result.stdout

    # The editor showed help lines, then a header line per field and the guidance as plain lines.
    # The source (the file the registry fixture imported) is shown, and kept as it is.
    assert body_of(shown[0]) == {**ENABLED, "source": "catalog.jsonl"}
    assert shown[0].startswith("# payrail-embedder edit:")
    assert shown[0].split("\n# ")[-1].split("\n", 1)[1] == (
        "Provider: Acme Maps\nMethod: Geocode an address\nURL: https://api.acme.example/v1/geocode\n"
        "Docs URL: https://docs.acme.example/geocode\nEnabled: yes\nSource: catalog.jsonl\n\n"
        "Purpose: turn an address into coordinates.\nNotes: paid per call.\n"
    )

    after = stored(database_url, ENABLED["method"])
    guidance = ENABLED["guidance"].replace("paid per call", "paid per request")
    assert (after["guidance"], after["enabled"], after["current_vector"]) == (guidance, True, True)
    assert after["version"] == before["version"] + 1
    assert after["embedding"].to_numpy().tolist() == pytest.approx(
        fake_embedding(record_text(ENABLED["provider"], ENABLED["method"], guidance)).tolist(), abs=1e-6
    )
    with connect(database_url) as conn:
        history = conn.execute(
            "select guidance, changed_by, version from payrail.provider_method_history where provider_method_id = %s",
            (after["id"],),
        ).fetchall()
    user = psycopg.conninfo.conninfo_to_dict(database_url).get("user", "postgres")
    assert history == [(ENABLED["guidance"], command_line_author(user), before["version"])]

    # Agents get the new text at once.
    code = run_cli(registry, "search", "--json", "Acme Maps / Geocode an address")
    assert json.loads(code.stdout)["matches"][0]["guidance"] == guidance


def test_a_url_only_edit_keeps_the_vector_byte_for_byte(registry, database_url, tmp_path):
    before = stored(database_url, ENABLED["method"])
    result, _ = edit(
        registry,
        tmp_path,
        [{"replace": ["https://docs.acme.example/geocode", "https://docs.acme.example/v2/geocode"]}],
        "Acme Maps",
        "Geocode an address",
    )
    assert result.returncode == 0, result.stderr
    assert "vector kept" in result.stdout, result.stdout
    after = stored(database_url, ENABLED["method"])
    assert after["docs_url"] == "https://docs.acme.example/v2/geocode"
    assert after["embedding"].to_numpy().tobytes() == before["embedding"].to_numpy().tobytes()


def test_a_refused_value_reopens_the_editor_with_the_reason_and_the_operators_text(registry, database_url, tmp_path, openai_fake):
    before = stored(database_url, ENABLED["method"])
    requests = len(openai_fake.requests)
    steps = [
        {"replace": ["https://api.acme.example/v1/geocode", "http://api.acme.example/v1/geocode"]},
        # The second time round, the operator's own text is there: fix the URL and save.
        {"replace": ["http://api.acme.example", "https://api.acme.example/v3"]},
    ]
    result, shown = edit(registry, tmp_path, steps, "acme maps / geocode an address")
    assert result.returncode == 0, result.stderr

    assert len(shown) == 2
    notes = shown[1].splitlines()
    assert notes[0] == "# NOT SAVED: a rule refused it:", shown[1]
    assert notes[1].startswith("#   URL: each must be an absolute https:// URL"), shown[1]
    # Which URL of the list, by its text.
    assert '; not so: "http://api.acme.example/v1/geocode". Write each in full, starting with https://, one per line. ' in notes[1], notes[1]
    assert notes[1].endswith("Write each in full, starting with https://, one per line. (provider_methods_urls_https_check)")
    assert "violates" not in shown[1]  # the rule in words, never PostgreSQL's constraint text
    assert "# payrail-embedder edit:" in shown[1]  # the help is kept on a reopen
    assert body_of(shown[1])["urls"] == ["http://api.acme.example/v1/geocode"]  # what the operator typed
    assert stored(database_url, ENABLED["method"])["urls"] == ["https://api.acme.example/v3/v1/geocode"]
    # A URL is not content: neither the refused nor the saved edit asked for an embedding.
    assert len(openai_fake.requests) == requests
    assert stored(database_url, ENABLED["method"])["version"] == before["version"] + 1


def test_someone_elses_save_meanwhile_is_shown_beside_the_operators_text_and_never_overwritten(registry, database_url, tmp_path):
    other = "Purpose: turn an address into coordinates, edited in psql meanwhile.\nNotes: paid per call."
    steps = [
        {
            "meanwhile_sql": f"update payrail.provider_methods set enabled = false, guidance = '{other}' where method = '{ENABLED['method']}'",
            "replace": ["paid per call", "paid per request"],
        },
        {"quit": True},
    ]
    result, shown = edit(registry, tmp_path, steps, "Acme Maps / Geocode an address")
    # Left after the conflict: a failure scripts can tell from "nothing to save".
    assert result.returncode == 1 and "Error: unavailable: nothing saved" in result.stderr, result.stdout + result.stderr
    assert stored(database_url, ENABLED["method"])["guidance"] == other  # not overwritten

    notes = [line for line in shown[1].splitlines() if line.startswith("#")]
    assert notes[0].startswith("# NOT SAVED: ") and "changed since it was read" in notes[0], notes
    assert any("edited in psql meanwhile" in line for line in notes), notes  # their version, shown
    assert "paid per request" in body_of(shown[1])["guidance"]  # the operator's text, kept


def test_after_a_conflict_the_operator_saves_their_merged_text_over_the_version_they_saw(registry, database_url, tmp_path):
    steps = [
        {
            "meanwhile_sql": f"update payrail.provider_methods set docs_url = 'https://docs.acme.example/new' where method = '{ENABLED['method']}'",
            "replace": ["paid per call", "paid per request"],
        },
        {"replace": ["https://docs.acme.example/geocode", "https://docs.acme.example/new"]},
    ]
    result, _ = edit(registry, tmp_path, steps, "Acme Maps / Geocode an address")
    assert result.returncode == 0, result.stderr
    after = stored(database_url, ENABLED["method"])
    assert (after["docs_url"], after["guidance"].endswith("paid per request."), after["current_vector"]) == ("https://docs.acme.example/new", True, True)


def test_a_failing_embedding_service_saves_nothing_and_keeps_the_text(registry, database_url, tmp_path, openai_fake):
    openai_fake.behaviour = "500"
    before = stored(database_url, ENABLED["method"])
    result, shown = edit(registry, tmp_path, [{"replace": ["paid per call", "paid per request"]}], "Acme Maps / Geocode an address")
    assert result.returncode == 1 and "nothing saved" in result.stderr, result.stdout + result.stderr
    assert shown[1].startswith("# NOT SAVED: the embedding service is unavailable"), shown[1]
    assert "paid per request" in body_of(shown[1])["guidance"]
    after = stored(database_url, ENABLED["method"])
    assert (after["version"], after["guidance"]) == (before["version"], before["guidance"])


def test_text_that_is_not_a_record_reopens_the_editor_naming_the_problem(registry, database_url, tmp_path):
    steps = [{"replace": ["Enabled: yes", "Enabled: maybe"]}, {"replace": ["Enabled: maybe", "Enabled: no"]}]
    result, shown = edit(registry, tmp_path, steps, "Acme Maps / Geocode an address")
    assert result.returncode == 0, result.stderr
    assert shown[1].splitlines()[0] == '# NOT SAVED: "Enabled: maybe": write Enabled: yes or Enabled: no'
    assert stored(database_url, ENABLED["method"])["enabled"] is False  # disabling keeps the vector
    assert stored(database_url, ENABLED["method"])["current_vector"] is True

    broken = [{"write": "{not a record\n"}, {"quit": True}]
    result, shown = edit(registry, tmp_path, broken, "Acme Maps / Geocode an address")
    assert result.returncode == 2 and "Error: invalid_input: nothing saved" in result.stderr, result.stderr
    assert shown[1].startswith("# NOT SAVED: line 1: '{not a record' is not a header line"), shown[1]
    assert shown[1].endswith("\n{not a record\n"), shown[1]


def test_closing_without_saving_changes_nothing(registry, database_url, tmp_path):
    before = stored(database_url, ENABLED["method"])
    result, shown = edit(registry, tmp_path, [{"quit": True}], "Acme Maps / Geocode an address")
    assert (result.returncode, result.stdout.strip(), len(shown)) == (0, "nothing saved", 1)
    assert stored(database_url, ENABLED["method"]) == before


def test_new_starts_a_draft_which_is_refused_until_it_has_a_name_and_is_embedded_when_saved(registry, database_url, tmp_path):
    steps = [
        {"replace": ["Purpose: \n", "Purpose: look up a parcel by its tracking number.\n"]},
        {"replace": ["Provider: \n", "Provider: Parcelly\n"]},
        {"replace": ["Method: \n", "Method: Track a parcel\n"]},
    ]
    result, shown = edit(registry, tmp_path, steps, "--new")
    assert result.returncode == 0, result.stderr
    assert "created" in result.stdout and "draft" in result.stdout and "embedded now" in result.stdout, result.stdout
    # Every rule broken at once: both empty names in one reopen, then the one still empty.
    assert shown[1].splitlines()[:3] == [
        "# NOT SAVED: 2 rules refused it:",
        "#   Provider: must be 1 to 120 characters, without control characters or invisible ones (zero-width "
        "spaces, bidi controls). Shorten it, or retype it to drop hidden characters that came with pasted text. "
        "(provider_methods_provider_check)",
        "#   Method: must be 1 to 120 characters, without control characters or invisible ones (zero-width "
        "spaces, bidi controls). Shorten it, or retype it to drop hidden characters that came with pasted text. "
        "(provider_methods_method_check)",
    ], shown[1]
    assert shown[2].splitlines()[:2] == ["# NOT SAVED: a rule refused it:", shown[1].splitlines()[2]], shown[2]
    record = stored(database_url, "Track a parcel")
    assert (record["provider"], record["enabled"], record["current_vector"], record["version"]) == ("Parcelly", False, True, 1)
    # A new record's source is said where it can be changed, and kept.
    assert "\nEnabled: no\nSource: edit\n" in shown[0], shown[0]
    with psycopg.connect(database_url) as conn:
        assert conn.execute("select source from payrail.provider_methods where method = 'Track a parcel'").fetchone() == ("edit",)


def test_a_source_typed_is_saved_and_one_the_rule_refuses_is_named_by_its_header(registry, database_url, tmp_path):
    steps = [{"replace": ["Source: catalog.jsonl\n", "Source: curated\u202e\n"]}, {"replace": ["Source: curated\u202e\n", "Source: curated\n"]}]
    result, shown = edit(registry, tmp_path, steps, "Acme Maps / Geocode an address")
    assert result.returncode == 0, result.stderr
    assert shown[1].splitlines()[:2] == [
        "# NOT SAVED: a rule refused it:",
        "#   Source: must be 1 to 255 characters, without control characters, invisible ones or spaces at either end. Name the catalog as you "
        'would recognise it in a list: its file\'s name ("records.jsonl"), or a word of your own ("curated"). (provider_methods_source_check)',
    ], shown[1]
    with psycopg.connect(database_url) as conn:
        assert conn.execute("select version, source from payrail.provider_methods where method = %s", (ENABLED["method"],)).fetchone() == (2, "curated")
        assert conn.execute("select source from payrail.provider_method_history").fetchall() == [("catalog.jsonl",)]


def test_new_refuses_a_name_that_exists(registry, database_url, tmp_path):
    text = "Provider:  acme  MAPS\nMethod: geocode an address\nEnabled: no\n\nAnother.\n"
    result, shown = edit(registry, tmp_path, [{"write": text}, {"quit": True}], "--new")
    assert result.returncode == 2 and "nothing saved" in result.stderr, result.stderr
    assert shown[1].splitlines()[1].startswith("#   Provider and Method: another record already has this provider and method"), shown[1]
    # The record it collides with, by its id and its names as stored.
    taken = stored(database_url, ENABLED["method"])
    assert f': record {taken["id"]}, "Acme Maps / Geocode an address". Edit that record instead' in shown[1], shown[1]
    assert taken["guidance"] == ENABLED["guidance"]


@pytest.mark.parametrize(
    "args, message",
    [
        (("Nobody / Nothing",), 'no provider method is named "Nobody / Nothing"'),
        ((), "name one record to edit"),
        (("--new", "Acme Maps / Geocode an address"), "name one record to edit"),
        (("a", "b", "c"), "name a record as PROVIDER METHOD"),
    ],
)
def test_edit_refuses_a_name_that_names_no_record(registry, tmp_path, args, message):
    result, shown = edit(registry, tmp_path, [], *args)
    assert result.returncode == 2
    assert message in result.stderr and shown == [], result.stderr


def test_edit_accepts_the_name_paths_pair_without_a_slash(registry, database_url, tmp_path):
    result, _ = edit(registry, tmp_path, [{"replace": ["paid per call", "paid per use"]}], "acme maps geocode an address")
    assert result.returncode == 0, result.stderr
    assert stored(database_url, ENABLED["method"])["guidance"].endswith("paid per use.")


def test_the_editor_text_reads_back_as_written_whatever_the_guidance_holds():
    """Guidance lines that start with #, blank lines in or before it, and the header as a person
    types it (any case, URL once per line, blank lines after the help) all read back as meant."""
    tricky = ProviderMethod("Acme", "Geocode", ["https://a.example", "https://b.example"], None, "\n# Purpose\n\nNotes: #1.\n\n", True)
    assert parse_editor_text("# help\n" + editable_text(tricky)) == tricky
    typed = "# help\n\n\nprovider:  Acme \nMETHOD: Geocode\nurls: https://a.example\nurl: https://b.example\nDocs url:\nenabled: YES\n\nG.\n"
    assert parse_editor_text(typed) == ProviderMethod("Acme", "Geocode", ["https://a.example", "https://b.example"], None, "G.", True)
    with pytest.raises(ValueError, match="line 3: Method is given twice"):
        parse_editor_text("Provider: A\nMethod: B\nMethod: C\nEnabled: no\n\nG.\n")
    with pytest.raises(ValueError, match="the header has no Method line"):
        parse_editor_text("Provider: A\nEnabled: no\n\nG.\n")


def test_with_no_editor_to_open_it_says_how_to_set_one_and_changes_nothing(registry, database_url, tmp_path):
    before = stored(database_url, ENABLED["method"])
    nothing_installed = tmp_path / "bin"
    nothing_installed.mkdir()
    env = {k: v for k, v in registry.items() if k not in ("EDITOR", "VISUAL")} | {"PATH": str(nothing_installed)}
    result = run_cli(env, "edit", "Acme Maps / Geocode an address")
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "Error: misconfigured: no editor to open: set $EDITOR (for example: export EDITOR=nano); neither vi nor nano is installed"
    )
    assert stored(database_url, ENABLED["method"]) == before
