"""`show`, `enable`, `disable` and `delete` from the command line (one record by name, id or
provider, or every record a filter matches, with a count and a confirmation), and names as
people type them (a provider's name) for `edit`, `history` and `show`. Real subprocess-equivalent
CLI runs against a real PostgreSQL, the fake OpenAI server embedding."""

from __future__ import annotations

import json

import pytest

from payrail_embedder.postgres.connection import connect
from payrail_test_support.agent_helpers import CATALOG, import_catalog
from payrail_test_support.cli import OnATerminal, cli_json, run_cli, run_cli_subprocess

# A bulk action doing what was confirmed on a terminal is an attacked boundary (docs/security.md): on every server.
pytestmark = pytest.mark.every_server


@pytest.fixture
def registry(cli_env, database_url, openai_fake, tmp_path):
    import_catalog(database_url, openai_fake, tmp_path)
    return cli_env


def states(database_url: str) -> dict[str, tuple[bool, int]]:
    with connect(database_url) as conn:
        rows = conn.execute("select provider || ' / ' || method, enabled, version from payrail.provider_methods").fetchall()
    return {name: (enabled, version) for name, enabled, version in rows}


def record_id(database_url: str, name: str) -> int:
    with connect(database_url) as conn:
        return conn.execute("select id from payrail.provider_methods where provider || ' / ' || method = %s", (name,)).fetchone()[0]


def test_show_says_what_a_record_is_to_agents_and_a_providers_name_finds_its_one_method(registry, database_url):
    shown = run_cli(registry, "show", "Amadeus / Hotel Search")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0] == "Amadeus / Hotel Search"
    assert lines[1].startswith(f"record {record_id(database_url, 'Amadeus / Hotel Search')}, version 1, draft: agents cannot find it: not enabled"), lines
    # A provider with one method: its name is enough (as the name path compares it).
    code, answer, _ = cli_json(registry, "show", "  TWILIO ", "--json")
    assert code == 0 and (answer["provider"], answer["method"], answer["state"]) == ("Twilio", "Send an SMS", "enabled"), answer
    # With several, they are listed, and the hint points to list.
    several = run_cli(registry, "show", "stripe")
    assert several.returncode == 2, several.stderr
    assert (
        '"Stripe" is a provider with 2 methods ("Create a PaymentIntent", "Create a refund"): name one, as "Stripe / Create a PaymentIntent"' in several.stderr
    )
    assert '`payrail-embedder list --text "Stripe"` lists them' in several.stderr
    nothing = run_cli(registry, "show", "Nobody")
    assert nothing.returncode == 2 and "nor a provider; `payrail-embedder list` lists every record" in nothing.stderr


def test_history_and_edit_take_a_providers_name_as_people_type_it(registry):
    history = run_cli(registry, "history", "booking.com")
    assert history.returncode == 0 and "Booking.com" in history.stdout, history.stderr
    edit = run_cli(registry, "edit", "Stripe")
    assert edit.returncode == 2 and '"Stripe" is a provider with 2 methods' in edit.stderr, edit.stderr


def test_enable_and_disable_one_record_by_name_or_id_without_asking(registry, database_url):
    code, result, _ = cli_json(registry, "enable", "Amadeus / Hotel Search", "--json")
    assert code == 0 and result["changed"] == [record_id(database_url, "Amadeus / Hotel Search")] and result["applied"], result
    assert states(database_url)["Amadeus / Hotel Search"] == (True, 2)
    again = run_cli(registry, "enable", str(record_id(database_url, "Amadeus / Hotel Search")))
    assert again.returncode == 0 and again.stdout == "Enabled 0 records; 1 was enabled already.\n", again.stdout
    assert states(database_url)["Amadeus / Hotel Search"] == (True, 2)  # no new version
    disabled = run_cli(registry, "disable", "Twilio")  # a provider: every method it has (one)
    assert disabled.returncode == 0 and disabled.stdout == "Disabled 1 record.\n", disabled.stdout
    assert states(database_url)["Twilio / Send an SMS"] == (False, 2)


def test_a_filter_asks_first_and_a_script_says_yes(registry, database_url):
    before = states(database_url)
    # Standard input is no terminal here: without --yes nothing changes, and it says how to go on.
    asked = run_cli_subprocess(registry, "disable", "--text", "stripe")
    assert asked.returncode == 2 and "this would disable 2 records: add --yes to do it without asking" in asked.stderr, asked.stderr
    assert states(database_url) == before
    done = run_cli(registry, "disable", "--text", "stripe", "--yes")
    assert done.returncode == 0 and done.stdout == "Disabled 2 records.\n", done.stdout
    assert [states(database_url)[f"Stripe / {m}"][0] for m in ("Create a PaymentIntent", "Create a refund")] == [False, False]
    code, result, _ = cli_json(registry, "enable", "--state", "draft", "--yes", "--json")
    assert code == 0 and len(result["changed"]) == 3 and result["refusals"] == [], result  # Amadeus and the two Stripe records
    assert all(enabled for enabled, _ in states(database_url).values())


def test_on_a_terminal_the_answer_does_what_the_question_named_or_nothing(registry, database_url):
    before = states(database_url)
    asked = OnATerminal(registry, "disable", "--text", "stripe", answering=True)
    shown = asked.wait_for("Disable these 2 records? [y/N]")
    assert "Would disable 2 records.\n  Stripe / Create a PaymentIntent\n  Stripe / Create a refund\n" in shown, shown
    with connect(database_url) as other:  # another writer, before the answer: a third record comes to match
        other.execute("update payrail.provider_methods set urls = '{https://stripe.example/sms}' where provider = 'Twilio'")
    asked.type("y\n")
    refused = asked.finish()
    assert refused.returncode == 1, refused.stderr
    assert refused.stderr.endswith(
        "Error: unavailable: nothing was disabled: the records it would disable changed since you were asked (another writer's change); "
        "it would now disable 3 records: 1 would be disabled now and were not when you were asked (Twilio / Send an SMS). "
        "Run it again to be asked again\n"
    ), refused.stderr
    assert states(database_url) == {**before, "Twilio / Send an SMS": (True, 2)}

    # One of those it names stops matching before the answer: refused the same way.
    asked = OnATerminal(registry, "disable", "--text", "stripe", answering=True)
    asked.wait_for("Disable these 3 records? [y/N]")
    with connect(database_url) as other:
        other.execute("update payrail.provider_methods set enabled = false where method = 'Create a refund'")
    asked.type("y\n")
    refused = asked.finish()
    assert refused.returncode == 1 and "1 would not be disabled now (changed, deleted or no longer matching) (Stripe / Create a refund)" in refused.stderr
    assert states(database_url)["Stripe / Create a PaymentIntent"] == (True, 1)

    # No answer but yes does anything; asked again and nothing moved, the answer does what was asked.
    asked = OnATerminal(registry, "disable", "--text", "stripe", answering=True)
    asked.wait_for("Disable these 2 records? [y/N]")
    asked.type("n\n")
    declined = asked.finish()
    assert (declined.returncode, declined.stdout, declined.stderr.endswith("nothing changed\n")) == (0, "", True), declined
    asked = OnATerminal(registry, "disable", "--text", "stripe", answering=True)
    asked.wait_for("Disable these 2 records? [y/N]")
    asked.type("y\n")
    done = asked.finish()
    assert (done.returncode, done.stdout) == (0, "Disabled 2 records; 1 was a draft already.\n"), done
    assert [states(database_url)[name][0] for name in ("Stripe / Create a PaymentIntent", "Twilio / Send an SMS")] == [False, False]


def test_a_draft_without_an_embedding_is_named_and_the_others_are_enabled(registry, database_url):
    with connect(database_url) as conn:  # a psql edit of a draft's content drops its vector
        conn.execute("update payrail.provider_methods set guidance = guidance || ' More.' where provider = 'Amadeus'")
        conn.execute("update payrail.provider_methods set enabled = false where provider = 'Duffel'")
    result = run_cli(registry, "enable", "--all", "--yes")
    assert result.returncode == 2, result.stderr
    assert result.stdout.startswith("Enabled 1 record; 5 were enabled already. Not enabled: 1 draft has no embedding of its current content yet"), result.stdout
    assert "run `payrail-embedder sync` first" in result.stdout
    assert states(database_url)["Duffel / Stays: Search accommodation"][0] is True
    assert states(database_url)["Amadeus / Hotel Search"][0] is False


def test_delete_keeps_what_golden_queries_name_unless_told_and_the_history_keeps_them(registry, database_url):
    added = run_cli(registry, "golden", "add", "send a text message", "--relevant", "Twilio / Send an SMS")
    assert added.returncode == 0, added.stderr
    kept = run_cli(registry, "delete", "Twilio", "OpenWeather", "--yes")
    assert kept.returncode == 2, kept.stderr
    assert kept.stdout.startswith("Deleted 1 record (the history keeps the last version of each). Not deleted: golden queries name 1 record"), kept.stdout
    assert "Twilio / Send an SMS" in states(database_url) and "OpenWeather / Current weather data" not in states(database_url)
    gone = run_cli(registry, "delete", "Twilio / Send an SMS", "--with-golden-queries")
    assert gone.returncode == 0, gone.stderr
    assert "Twilio / Send an SMS" not in states(database_url)
    assert json.loads(run_cli(registry, "golden", "list", "--json").stdout)["goldenQueries"] == []
    assert "delete" in run_cli(registry, "history", "Twilio / Send an SMS").stdout


@pytest.mark.parametrize(
    "args, message",
    [
        ((), 'name records (an id, "Provider / Method" or a provider), or give --text / --state / --source, or --all: one of them'),
        (("Stripe", "--all"), "one of them"),
        (("--text", "x", "--all"), "one of them"),
    ],
)
def test_a_selection_must_be_one_thing_and_changes_nothing_otherwise(registry, database_url, args, message):
    before = states(database_url)
    for command in ("enable", "disable", "delete"):
        result = run_cli(registry, command, *args)
        assert result.returncode == 2 and message in result.stderr, (command, result.stderr)
    assert states(database_url) == before


def test_names_and_filters_are_text_never_sql(registry, database_url):
    before = states(database_url)
    for hostile in ("'; delete from payrail.provider_methods; --", "%", "q_q", "Stripe') or ('1'='1"):
        result = run_cli(registry, "disable", "--text", hostile, "--yes")
        assert result.returncode == 0 and result.stdout == "No record matched: nothing was disabled.\n", (hostile, result.stdout)
        named = run_cli(registry, "disable", hostile)
        assert named.returncode == 2 and "unknown_record" in named.stderr, (hostile, named.stderr)
    assert states(database_url) == before == {f"{r['provider']} / {r['method']}": (r["enabled"], 1) for r in CATALOG}
    missing = run_cli(registry, "enable", "999999")
    assert missing.returncode == 2 and "1 record named no record" in missing.stdout, missing.stdout


def test_an_import_says_what_agents_can_find_and_import_enable_enables_a_trusted_catalog(cli_env, database_url, tmp_path):
    drafts = [{**record, "enabled": False} for record in CATALOG]
    path = tmp_path / "drafts.jsonl"
    path.write_text("".join(json.dumps(record) + "\n" for record in drafts), encoding="utf-8")
    imported = run_cli(cli_env, "import", path)
    assert imported.returncode == 0, imported.stderr
    assert (
        f"agents can find 0 of {len(CATALOG)} records; {len(CATALOG)} are drafts: {len(CATALOG)} not enabled (`payrail-embedder enable`)\n" in imported.stdout
    )
    # Every search then finds nothing, and says why on standard error; the answer keeps its shape.
    searched = run_cli(cli_env, "search", "--json", "Stripe")
    assert json.loads(searched.stdout) == {"matches": []}, searched.stdout
    assert f"note: the registry holds {len(CATALOG)} records and every one is a draft: agents find none" in searched.stderr
    code, report, _ = cli_json(cli_env, "import", "--enable", "--json", path)
    assert code == 0 and report["updated"] == len(CATALOG), report
    assert report["registry"]["enabled"] == len(CATALOG) and report["registry"]["drafts"] == 0, report
    assert all(enabled for enabled, _ in states(database_url).values())
    again = run_cli(cli_env, "search", "--json", "Stripe")
    assert len(json.loads(again.stdout)["matches"]) == 2 and "note:" not in again.stderr


def test_sync_says_what_agents_can_find_when_drafts_remain(registry, database_url):
    with connect(database_url) as conn:
        conn.execute("update payrail.provider_methods set guidance = guidance || ' More.' where provider = 'Amadeus'")
    synced = run_cli(registry, "sync")
    assert synced.returncode == 0 and synced.stdout.startswith("1 embedded"), synced.stdout
    assert f"agents can find {len(CATALOG) - 1} of {len(CATALOG)} records; 1 is a draft: 1 not enabled" in synced.stdout, synced.stdout
    code, report, _ = cli_json(registry, "sync", "--json")
    assert code == 0 and report["registry"]["draftsNeedingEmbedding"] == 0, report


def test_undo_sets_the_last_bulk_action_back_in_one_step_and_the_history_shows_it_as_one_action(registry, database_url):
    nothing = run_cli(registry, "undo", "--yes")
    assert nothing.returncode == 2 and "you have no bulk action to undo" in nothing.stderr, nothing.stderr
    before = states(database_url)
    code, disabled, _ = cli_json(registry, "disable", "--text", "stripe", "--yes", "--json")
    assert code == 0 and len(disabled["changed"]) == 2 and disabled["bulkAction"], disabled
    action = disabled["bulkAction"]
    code, history, _ = cli_json(registry, "history", "Stripe / Create a refund", "--json")
    assert history["history"][0]["bulkAction"]["bulkAction"] == action and history["record"]["bulkAction"]["operation"] == "disable", history
    shown = run_cli(registry, "history", "Stripe / Create a refund").stdout
    assert f"  saved in bulk action {action}: " in shown and 'disabled 2 records (text "stripe") at ' in shown, shown
    assert f"(session postgres), in bulk action {action}: " in shown, shown

    # Off a terminal, more than one record needs --yes.
    asked = run_cli_subprocess(registry, "undo")
    assert asked.returncode == 2 and "this would enable 2 records: add --yes" in asked.stderr, asked.stderr
    code, undone, _ = cli_json(registry, "undo", "--yes", "--json")
    assert code == 0 and undone["applied"] and sorted(undone["records"]) == sorted(disabled["changed"]) and undone["undone"]["bulkAction"] == action, undone
    assert states(database_url) == {**before, "Stripe / Create a PaymentIntent": (True, 3), "Stripe / Create a refund": (True, 3)}
    again = run_cli(registry, "undo", "--yes")
    assert again.returncode == 2 and f"was the undo of bulk action {action}; an undo is not undone" in again.stdout, again.stdout


def test_undo_of_a_delete_asks_on_a_terminal_and_brings_the_records_back(registry, database_url):
    deleted = run_cli(registry, "delete", "--text", "stripe", "--yes")
    assert deleted.returncode == 0 and "Stripe / Create a refund" not in states(database_url), deleted.stdout
    asked = OnATerminal(registry, "undo", answering=True)
    shown = asked.wait_for("restore these 2 deleted records? [y/N]")
    assert "  Stripe / Create a PaymentIntent\n  Stripe / Create a refund\n" in shown, shown
    asked.type("y\n")
    done = asked.finish()
    assert done.returncode == 0 and done.stdout.startswith("Restored 2 records that bulk action "), done
    assert {name: state for name, state in states(database_url).items() if name.startswith("Stripe")} == {
        "Stripe / Create a PaymentIntent": (True, 1),
        "Stripe / Create a refund": (True, 1),
    }
