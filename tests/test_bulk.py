"""Bulk enable and disable (registry.bulk) on real PostgreSQL servers, as an operator's login:
counts, the rule that an enabled record needs a current vector, one transaction, history; and
what was confirmed is what is done, or nothing, while another operator writes on a second connection."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest
from psycopg.rows import dict_row

from payrail_embedder.registry import bulk
from payrail_test_support.backoffice import AGENT, OPERATOR, OTHER_OPERATOR, PASSWORD
from payrail_test_support.cli import cli_import, run_cli
from payrail_test_support.stored import insert_drafts


def rec(provider: str, method: str, *, enabled: bool) -> dict:
    return {"provider": provider, "method": method, "urls": [], "docsUrl": None, "guidance": f"Purpose: {method.lower()} with {provider}.", "enabled": enabled}


CATALOG = [
    rec("Acme Maps", "Geocode an address", enabled=True),
    rec("Acme Maps", "Reverse geocode", enabled=False),
    rec("Globex Weather", "Current conditions", enabled=False),
    rec("Initech Pay", "Create a refund", enabled=False),
]


@pytest.fixture
def registry(cli_env, operator_logins, tmp_path, database_url) -> dict[str, int]:
    """CATALOG imported (every record embedded; one enabled, three drafts) and two drafts without a
    vector inserted in SQL; the records' ids by "provider / method"."""
    cli_import(cli_env, tmp_path / "catalog.jsonl", CATALOG)
    insert_drafts(database_url, 2)
    with psycopg.connect(database_url) as conn:
        return {f"{p} / {m}": record_id for record_id, p, m in conn.execute("select id, provider, method from payrail.provider_methods")}


def as_operator(database_url: str, role: str = OPERATOR) -> psycopg.Connection:
    return psycopg.connect(database_url, user=role, password=PASSWORD, autocommit=True)


def records(database_url: str) -> dict[int, dict]:
    with psycopg.connect(database_url) as conn:
        rows = conn.cursor(row_factory=dict_row).execute("select id, enabled, version, saved_by from payrail.provider_methods").fetchall()
    return {row["id"]: row for row in rows}


def history(database_url: str) -> list[tuple]:
    with psycopg.connect(database_url) as conn:
        return conn.execute("select provider_method_id, version, enabled from payrail.provider_method_history order by id").fetchall()


def test_enabling_every_record_by_id_enables_the_embedded_drafts_and_names_the_rest_in_words(database_url, registry):
    before, history_before = records(database_url), history(database_url)
    drafts = [registry["Acme Maps / Reverse geocode"], registry["Globex Weather / Current conditions"], registry["Initech Pay / Create a refund"]]
    unembedded = [registry["Provider 0000 / Method 0000"], registry["Provider 0001 / Method 0001"]]
    enabled = registry["Acme Maps / Geocode an address"]
    with as_operator(database_url) as conn:
        previewed = bulk.set_enabled(conn, bulk.Selection.of_ids([*registry.values(), 987654]), True, preview=True)
        assert records(database_url) == before  # a preview writes nothing
        result = bulk.set_enabled(conn, bulk.Selection.of_ids([*registry.values(), 987654]), True)

    assert (result.changed, result.already, result.needing_embedding, result.missing) == (
        tuple(sorted(drafts)),
        (enabled,),
        tuple(sorted(unembedded)),
        (987654,),
    )
    assert previewed == bulk.BulkResult(True, result.changed, result.already, result.needing_embedding, result.missing, applied=False)
    assert result.in_words() == (
        "Enabled 3 records; 1 was enabled already. Not enabled: 2 drafts have no embedding of their current content yet, so agents could "
        "not find them: run `payrail-embedder sync` first, then enable them again (or save each from its page, which embeds it). "
        "Not enabled: 1 record named no record (deleted meanwhile, or never there)."
    )
    after = records(database_url)
    for record_id, row in after.items():
        if record_id in drafts:
            # A new version saved by the operator, the version before kept in the history, as a single save does.
            assert (row["enabled"], row["version"], row["saved_by"]) == (True, before[record_id]["version"] + 1, OPERATOR)
        else:
            assert row == before[record_id]
    added = history(database_url)[len(history_before) :]
    assert sorted(added) == sorted((record_id, before[record_id]["version"], False) for record_id in drafts)


def test_disabling_what_a_filter_matches_counts_what_was_already_a_draft(database_url, registry):
    with as_operator(database_url) as conn:
        selection = bulk.Selection.matching("acme")
        assert bulk.count(conn, selection) == 2
        result = bulk.set_enabled(conn, selection, False)
        assert (result.changed, result.already, result.needing_embedding, result.missing) == (
            (registry["Acme Maps / Geocode an address"],),
            (registry["Acme Maps / Reverse geocode"],),
            (),
            (),
        )
        assert result.in_words() == "Disabled 1 record; 1 was a draft already."
        # The state filter as the list has it: every draft needing an embedding, and nothing enabled now.
        assert bulk.count(conn, bulk.Selection.matching(state="draft needing an embedding")) == 2
        nothing = bulk.set_enabled(conn, bulk.Selection.matching(state="enabled"), False)
    assert nothing.selected == 0 and nothing.in_words() == "No record matched: nothing was disabled."
    assert not any(row["enabled"] for row in records(database_url).values())


@pytest.mark.parametrize("text", ["'; update payrail.provider_methods set enabled = false; --", "%", "_", "\\", "acme' or 'a'='a"])
def test_a_filter_text_is_text_never_sql_nor_a_pattern(database_url, registry, text):
    before = records(database_url)
    with as_operator(database_url) as conn:
        assert bulk.count(conn, bulk.Selection.matching(text)) == 0
        result = bulk.set_enabled(conn, bulk.Selection.matching(text), False)
    assert result.selected == 0 and records(database_url) == before


def test_an_unknown_state_is_refused_before_any_statement(database_url, registry):
    with pytest.raises(ValueError, match="unknown state 'enabled; drop'"):
        bulk.Selection.matching("", "enabled; drop")


def test_a_failure_midway_changes_no_record_and_writes_no_history(database_url, registry):
    # A rule of the test's own refuses the update of one record, after others were updated in the same statement.
    last = max(registry[name] for name in ("Acme Maps / Reverse geocode", "Globex Weather / Current conditions", "Initech Pay / Create a refund"))
    with psycopg.connect(database_url, autocommit=True) as admin:
        admin.execute(
            f"""create function public.refuse_midway() returns trigger language plpgsql as $$
                begin if new.id = {last} then raise exception 'refused midway'; end if; return new; end $$;
                create trigger refuse_midway before update on payrail.provider_methods for each row execute function public.refuse_midway()"""
        )
        before, history_before = records(database_url), history(database_url)
        with as_operator(database_url) as conn, pytest.raises(psycopg.errors.RaiseException, match="refused midway"):
            bulk.set_enabled(conn, bulk.Selection.matching(state="draft"), True)
        assert (records(database_url), history(database_url)) == (before, history_before)


def test_an_agents_login_cannot_enable_disable_or_delete_anything(database_url, registry):
    before = records(database_url)
    with as_operator(database_url, AGENT) as conn:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            bulk.set_enabled(conn, bulk.Selection.of_ids(registry.values()), False)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            bulk.delete_records(conn, bulk.Selection.matching(), with_golden_queries=True)
    assert records(database_url) == before


def golden_queries(database_url: str) -> list[str]:
    with psycopg.connect(database_url) as conn:
        return [query for (query,) in conn.execute("select query from payrail.golden_queries order by id")]


def test_deleting_keeps_the_records_golden_queries_name_unless_told_and_the_history_keeps_the_rest(cli_env, database_url, registry):
    added = run_cli(cli_env, "golden", "add", "turn coordinates into an address", "--relevant", "Acme Maps / Reverse geocode")
    assert added.returncode == 0, added.stderr
    geocode, reverse = registry["Acme Maps / Geocode an address"], registry["Acme Maps / Reverse geocode"]
    before = records(database_url)
    with as_operator(database_url) as conn:
        previewed = bulk.delete_records(conn, bulk.Selection.matching("acme"), preview=True)
        assert records(database_url) == before
        result = bulk.delete_records(conn, bulk.Selection.of_ids([geocode, reverse, 987654]))
    assert previewed == bulk.BulkDeleteResult((geocode,), (reverse,), (), applied=False)
    assert result == bulk.BulkDeleteResult((geocode,), (reverse,), (987654,))
    assert result.in_words() == (
        "Deleted 1 record (the history keeps the last version of each). Not deleted: golden queries name 1 record, which search is measured on: "
        "remove it from those queries first, or delete with the golden queries too. Not deleted: 1 record named no record (deleted meanwhile, or never there)."
    )
    assert set(records(database_url)) == set(before) - {geocode}
    assert (geocode, before[geocode]["version"], True) in history(database_url)

    with as_operator(database_url) as conn:
        result = bulk.delete_records(conn, bulk.Selection.matching("acme"), with_golden_queries=True)
    assert result == bulk.BulkDeleteResult((reverse,), (), ())
    assert reverse not in records(database_url) and golden_queries(database_url) == []


# A bulk action does what was confirmed: the plan a question showed (its digest), under the
# records' locks, or nothing. The other writer is a second connection, as another operator.


def test_a_record_that_comes_to_match_between_question_and_answer_refuses_the_action_and_changes_nothing(database_url, registry):
    drafts = bulk.Selection.matching(state="draft")
    with as_operator(database_url) as conn, as_operator(database_url, OTHER_OPERATOR) as other:
        question = bulk.set_enabled(conn, drafts, True, preview=True)
        assert question.in_words() == "Would enable 3 records."
        # Meanwhile another operator disables the enabled record: a fourth embedded draft matches.
        bulk.set_enabled(other, bulk.Selection.of_ids([registry["Acme Maps / Geocode an address"]]), False)
        before, history_before = records(database_url), history(database_url)
        with pytest.raises(bulk.ChangedSinceAsked) as refused:
            bulk.set_enabled(conn, drafts, True, confirmed=question.digest())
    assert (records(database_url), history(database_url)) == (before, history_before)
    assert str(refused.value) == (
        "nothing was enabled: the records it would enable changed since you were asked (another writer's change); it would now enable 4 records"
    )
    assert refused.value.now.acting_on == tuple(sorted([*question.acting_on, registry["Acme Maps / Geocode an address"]]))
    assert bulk.moved_since(question, refused.value.now) == {
        "would be enabled now and were not when you were asked": [registry["Acme Maps / Geocode an address"]],
        "would not be enabled now (changed, deleted or no longer matching)": [],
    }


def test_a_record_that_stops_matching_refuses_it_too_and_the_plan_asked_again_is_done(database_url, registry):
    drafts = bulk.Selection.matching(state="draft")
    weather = registry["Globex Weather / Current conditions"]
    with as_operator(database_url) as conn, as_operator(database_url, OTHER_OPERATOR) as other:
        question = bulk.set_enabled(conn, drafts, True, preview=True)
        bulk.set_enabled(other, bulk.Selection.of_ids([weather]), True)  # enabled meanwhile: no longer a draft
        before = records(database_url)
        with pytest.raises(bulk.ChangedSinceAsked) as refused:
            bulk.set_enabled(conn, drafts, True, confirmed=question.digest())
        assert records(database_url) == before
        assert bulk.moved_since(question, refused.value.now)["would not be enabled now (changed, deleted or no longer matching)"] == [weather]
        # Asked again, the answer does what the new question showed.
        done = bulk.set_enabled(conn, drafts, True, confirmed=refused.value.now.digest())
    assert done.changed == refused.value.now.acting_on and len(done.changed) == 2
    assert all(records(database_url)[record_id]["enabled"] for record_id in done.changed)


def test_a_delete_whose_record_golden_queries_came_to_name_refuses_and_deletes_nothing(cli_env, database_url, registry):
    acme = bulk.Selection.matching("acme")
    with as_operator(database_url) as conn:
        question = bulk.delete_records(conn, acme, preview=True)
        assert len(question.deleted) == 2
        added = run_cli(cli_env, "golden", "add", "turn coordinates into an address", "--relevant", "Acme Maps / Reverse geocode")
        assert added.returncode == 0, added.stderr
        with pytest.raises(bulk.ChangedSinceAsked, match="nothing was deleted: .* it would now delete 1 record$"):
            bulk.delete_records(conn, acme, confirmed=question.digest())
    assert set(registry.values()) <= set(records(database_url))


def waiting_for_a_lock(database_url: str, pid: int) -> bool:
    with psycopg.connect(database_url) as conn:
        return conn.execute("select wait_event_type = 'Lock' from pg_stat_activity where pid = %s", (pid,)).fetchone() == (True,)


def run_while_locked(database_url: str, conn: psycopg.Connection, work):
    """work() in a thread, until it waits for a row lock; returns a function that waits for its outcome (a result or the exception)."""
    outcome: dict = {}

    def run():
        try:
            outcome["result"] = work()
        except Exception as error:  # the test asserts on it
            outcome["error"] = error

    thread = threading.Thread(target=run)
    thread.start()
    deadline = time.monotonic() + 30
    while not waiting_for_a_lock(database_url, conn.info.backend_pid):
        assert thread.is_alive() and time.monotonic() < deadline, outcome
        time.sleep(0.02)

    def finish():
        thread.join(30)
        return outcome

    return finish


@pytest.mark.parametrize("confirm", [True, False], ids=["confirmed", "without-a-question"])
def test_a_record_another_transaction_takes_out_of_the_filter_while_the_action_waits_for_its_lock_is_left_alone(database_url, registry, confirm):
    """The lock waits for the other writer's commit, and the filter is read again after it: the
    record that stopped matching is not changed (and, confirmed, the plan shown is no longer the
    plan: nothing is)."""
    weather, reverse = registry["Globex Weather / Current conditions"], registry["Acme Maps / Reverse geocode"]
    with psycopg.connect(database_url, autocommit=True) as admin:
        admin.execute("update payrail.provider_methods set urls = '{https://acme.example/weather}' where id = %s", (weather,))
    acme = bulk.Selection.matching("acme")
    with as_operator(database_url) as conn, psycopg.connect(database_url, user=OTHER_OPERATOR, password=PASSWORD) as other:
        question = bulk.set_enabled(conn, acme, True, preview=True)
        assert question.changed == tuple(sorted([weather, reverse]))
        other.execute("update payrail.provider_methods set urls = '{}' where id = %s", (weather,))  # not committed yet
        finish = run_while_locked(database_url, conn, lambda: bulk.set_enabled(conn, acme, True, confirmed=question.digest() if confirm else None))
        other.commit()
        outcome = finish()
    after = records(database_url)
    assert after[weather]["enabled"] is False
    if confirm:
        assert isinstance(outcome.get("error"), bulk.ChangedSinceAsked) and outcome["error"].now.changed == (reverse,), outcome
        assert after[reverse]["enabled"] is False
    else:
        assert outcome["result"].changed == (reverse,), outcome
        assert after[reverse]["enabled"] is True
