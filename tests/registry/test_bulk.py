"""Bulk enable and disable (registry.bulk) on real PostgreSQL servers, as an operator's login:
counts, the rule that an enabled record needs a current vector, one transaction, history; and
what was confirmed is what is done, or nothing, while another operator writes on a second connection."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest
from psycopg.rows import dict_row

from payrail_embedder.embedders import OpenAIEmbedder
from payrail_embedder.postgres.connection import connect
from payrail_embedder.registry import bulk, undo
from payrail_test_support.backoffice import AGENT, OPERATOR, OTHER_OPERATOR, PASSWORD
from payrail_test_support.cli import cli_import, run_cli
from payrail_test_support.openai_fake import FAKE_MODEL
from payrail_test_support.stored import assert_whole_or_nothing, insert_drafts, rows
from payrail_test_support.waiting import wait_until, waits_for_a_lock

# Bulk actions doing what was confirmed is an attacked boundary (docs/security.md): on every server.
pytestmark = pytest.mark.every_server


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
    """A connection as the package opens one (its search path, pgvector's types), as role."""
    return connect(database_url, user=role, password=PASSWORD, autocommit=True)


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
    assert result == bulk.BulkDeleteResult((geocode,), (reverse,), (987654,), bulk_action=result.bulk_action) and result.bulk_action is not None
    assert result.in_words() == (
        "Deleted 1 record (the history keeps the last version of each). Not deleted: golden queries name 1 record, which search is measured on: "
        "remove it from those queries first, or delete with the golden queries too. Not deleted: 1 record named no record (deleted meanwhile, or never there)."
    )
    assert set(records(database_url)) == set(before) - {geocode}
    assert (geocode, before[geocode]["version"], True) in history(database_url)

    with as_operator(database_url) as conn:
        result = bulk.delete_records(conn, bulk.Selection.matching("acme"), with_golden_queries=True)
    assert result == bulk.BulkDeleteResult((reverse,), (), (), bulk_action=result.bulk_action)
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
        with ThreadPoolExecutor(1) as thread, psycopg.connect(database_url) as watcher:
            answer = thread.submit(bulk.set_enabled, conn, acme, True, confirmed=question.digest() if confirm else None)
            wait_until(lambda: waits_for_a_lock(watcher), "the bulk action to wait for the record's lock")
            other.commit()
            if confirm:
                with pytest.raises(bulk.ChangedSinceAsked) as refused:
                    answer.result(30)
                assert refused.value.now.changed == (reverse,)
            else:
                assert answer.result(30).changed == (reverse,)
    after = records(database_url)
    assert (after[weather]["enabled"], after[reverse]["enabled"]) == (False, not confirm)


# Each bulk action is one action of the history, and the last one of an operator is undone in one step.


def bulk_changes(database_url: str) -> list[tuple]:
    """(bulk action, its operation, record, version found, version left) of every record a bulk action changed."""
    with psycopg.connect(database_url) as conn:
        return conn.execute(
            """select a.id, a.operation, r.record_id, r.version_before, r.version_after
               from payrail.bulk_actions as a join payrail.bulk_action_records as r on r.bulk_action_id = a.id order by a.id, r.record_id"""
        ).fetchall()


def test_an_enable_is_one_bulk_action_and_its_undo_disables_the_same_records_again_as_new_versions(database_url, registry, openai_fake):
    with as_operator(database_url) as conn:
        enabled = bulk.set_enabled(conn, bulk.Selection.matching(state="draft"), True)
        drafts = enabled.changed
        assert len(drafts) == 3 and enabled.bulk_action is not None
        assert bulk_changes(database_url) == [(enabled.bulk_action, "enable", record_id, 1, 2) for record_id in drafts]
        last = undo.last_action(conn)
        assert (last.id, last.operation, last.selection, last.done_by, last.records, last.undone_by) == (
            enabled.bulk_action,
            "enable",
            "state draft",
            OPERATOR,
            3,
            None,
        )
        asked = undo.undo(conn, embedder_of(openai_fake), last.id, preview=True)
        assert asked.in_words().startswith(f"Would disable 3 records again, undoing bulk action {last.id}: {OPERATOR} enabled 3 records (state draft) at ")
        history_before = history(database_url)
        undone = undo.undo(conn, embedder_of(openai_fake), last.id)
        assert undone.in_words() == f"Disabled 3 records again: bulk action {last.id} is undone (as bulk action {undone.undone_as})."
        after = records(database_url)
        assert all((after[record_id]["enabled"], after[record_id]["version"]) == (False, 3) for record_id in drafts)
        # New versions with history entries, recorded as the undo: the history is added to, never rewritten.
        assert history(database_url)[: len(history_before)] == history_before
        assert sorted(history(database_url)[len(history_before) :]) == [(record_id, 2, True) for record_id in drafts]
        assert bulk_changes(database_url)[3:] == [(undone.undone_as, "undo", record_id, 2, 3) for record_id in drafts]
        # An undo is not undone, and the action it undid is undone once.
        again = undo.undo(conn, embedder_of(openai_fake), undo.last_action(conn).id)
        assert again.refusals == (
            f"your last bulk action ({undone.undone_as}) was the undo of bulk action {last.id}; an undo is not undone: do it again instead",
        )
        assert undo.undo(conn, embedder_of(openai_fake), last.id).refusals == (
            f"bulk action {last.id} is not your last bulk action (yours is bulk action {undone.undone_as}): only your last is undone",
        )
    assert records(database_url) == after


def embedder_of(openai_fake):
    return lambda: OpenAIEmbedder(FAKE_MODEL, api_key="test-key", base_url=openai_fake.base_url)


def test_an_undo_refuses_in_words_and_changes_nothing_when_a_record_changed_since_or_it_is_not_yours(database_url, registry, openai_fake):
    acme = [registry["Acme Maps / Geocode an address"], registry["Acme Maps / Reverse geocode"]]
    with as_operator(database_url) as conn, as_operator(database_url, OTHER_OPERATOR) as other:
        disabled = bulk.set_enabled(conn, bulk.Selection.matching("acme"), False)
        # Another operator has no bulk action of theirs: this one is not theirs to undo.
        assert undo.last_action(other) is None
        assert undo.undo(other, embedder_of(openai_fake), disabled.bulk_action).refusals == (
            f"bulk action {disabled.bulk_action} is not your last bulk action (you have none): only your last is undone",
        )
        other.execute("update payrail.provider_methods set urls = '{https://acme.example/v2}' where id = %s", (acme[0],))
        before, history_before = records(database_url), history(database_url)
        refused = undo.undo(conn, embedder_of(openai_fake), disabled.bulk_action)
        assert refused.in_words() == (
            "Not undone: Acme Maps / Geocode an address was saved since (version 3 now; the action left version 2). Nothing was changed."
        )
        assert (records(database_url), history(database_url)) == (before, history_before)
        with pytest.raises(undo.NoSuchBulkAction, match="there is no bulk action 987654"):
            undo.undo(conn, embedder_of(openai_fake), 987654)


def test_an_undo_of_a_delete_brings_the_records_back_as_they_were_embedded_first_or_none_when_a_name_is_taken(
    cli_env, database_url, registry, openai_fake, tmp_path
):
    geocode, reverse = registry["Acme Maps / Geocode an address"], registry["Acme Maps / Reverse geocode"]
    with as_operator(database_url) as conn:
        deleted = bulk.delete_records(conn, bulk.Selection.matching("acme"))
        assert sorted(deleted.deleted) == sorted([geocode, reverse])
        # Someone creates one of the names again meanwhile: nothing is restored, and it says why.
        cli_import(cli_env, tmp_path / "again.jsonl", [rec("Acme Maps", "Reverse geocode", enabled=False)])
        before = records(database_url)
        asked = undo.undo(conn, embedder_of(openai_fake), deleted.bulk_action, preview=True)
        refused = undo.undo(conn, embedder_of(openai_fake), deleted.bulk_action)
        assert asked.refusals == refused.refusals and len(refused.refusals) == 1
        assert refused.refusals[0].startswith("Acme Maps / Reverse geocode cannot come back: "), refused.refusals
        assert records(database_url) == before
        conn.execute("delete from payrail.provider_methods where provider = 'Acme Maps'")

        undone = undo.undo(conn, embedder_of(openai_fake), deleted.bulk_action)
    assert undone.in_words() == (
        f"Restored 2 records that bulk action {deleted.bulk_action} deleted, as new records {', '.join(map(str, undone.restored))} "
        "(1 enabled again, content embedded first): "
        f"bulk action {deleted.bulk_action} is undone (as bulk action {undone.undone_as})."
    )
    restored = {(row["provider"], row["method"]): row for row in rows(database_url) if row["id"] in undone.restored}
    assert set(restored) == {("Acme Maps", "Geocode an address"), ("Acme Maps", "Reverse geocode")}
    assert [restored[key]["enabled"] for key in sorted(restored)] == [True, False]
    assert all(assert_whole_or_nothing(row) for row in restored.values())  # embedded by the registry's model, from their content
    assert bulk_changes(database_url)[-2:] == [(undone.undone_as, "undo", record_id, None, 1) for record_id in sorted(undone.restored)]


def test_two_undos_of_one_action_at_once_undo_it_once(database_url, registry, openai_fake):
    with as_operator(database_url) as conn:
        deleted = bulk.delete_records(conn, bulk.Selection.matching("globex"))
        with (
            psycopg.connect(database_url, user=OTHER_OPERATOR, password=PASSWORD) as other,
            ThreadPoolExecutor(1) as thread,
            psycopg.connect(database_url) as watcher,
        ):
            # Another session's undo of it, not committed yet when this one begins.
            other.execute("select payrail.begin_bulk_action('undo', 'by hand', %s)", (deleted.bulk_action,))
            answer = thread.submit(undo.undo, conn, embedder_of(openai_fake), deleted.bulk_action)
            wait_until(lambda: waits_for_a_lock(watcher), "the second undo to wait for the first")
            other.commit()
            refused = answer.result(30)
    assert refused.refusals == (f"bulk action {deleted.bulk_action} was undone by another session meanwhile",)
    assert "Globex Weather / Current conditions" not in {f"{row['provider']} / {row['method']}" for row in rows(database_url)}
