"""Reports render themselves (base/reports.py): every Report of the package is a dataclass whose two
renderings, to_json() for --json and describe() for people, carry the same facts, and emit prints
one or the other, warnings on standard error."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
import pkgutil
from datetime import UTC, datetime
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

import payrail_embedder
from payrail_embedder.base.reports import Report, duration, emit
from payrail_embedder.base.safe_text import json_text
from payrail_embedder.faces import status
from payrail_embedder.model import switch
from payrail_embedder.postgres import deploy, logins
from payrail_embedder.quality import evaluation, golden_rankings, restores, tuning, tuning_data, tuning_plan
from payrail_embedder.registry import advice, bulk, catalog, golden, history, search, sources, stored, sync, undo
from payrail_embedder.registry.changes import Change
from payrail_embedder.registry.embedding_model import EmbeddingModel
from payrail_embedder.registry.records import Refusal
from payrail_embedder.registry.write import Saved

SAVED_AT = datetime(2026, 12, 6, 5, 30, tzinfo=UTC)
METRICS = {metric: 0.5 for metric in evaluation.METRICS}
BETTER = {metric: 0.75 for metric in evaluation.METRICS}
MISS = {
    "line": 4,
    "query": "refund a card payment",
    "relevant": [["Stripe", "Refund"]],
    "returned": [["Adyen", "Cancel"]],
    "ranks": [{"provider": "Stripe", "method": "Refund", "recordId": 3, "enabled": True, "rank": 41, "fromTopThree": 38}],
}
STORED = {
    "id": 7,
    "version": 3,
    "provider": "Stripe",
    "method": "Create refund",
    "urls": ["https://api.stripe.com/v1/refunds"],
    "docs_url": "https://docs.stripe.com/api/refunds",
    "guidance": "Purpose: refunds a charge",
    "enabled": True,
    "mixed_scripts": False,
    "source": "stripe.jsonl",
    "embedded": True,
    "updated_at": SAVED_AT,
}


def all_report_classes() -> set[type]:
    """Every Report subclass the package defines, its modules imported (but the __main__ ones, which run)."""
    for module in pkgutil.walk_packages(payrail_embedder.__path__, "payrail_embedder."):
        if not module.name.endswith("__main__"):
            importlib.import_module(module.name)
    found, todo = set(), [Report]
    while todo:
        for subclass in todo.pop().__subclasses__():
            if subclass.__module__.startswith("payrail_embedder."):
                found.add(subclass)
            todo.append(subclass)
    return found


# Version 2 of STORED's record, in the history, and restoring it into version 3.
HISTORY_ENTRY = {**STORED, "id": 41, "provider_method_id": 7, "version": 2, "guidance": "Purpose: refunds"}
RESTORING = history.Restoring(HISTORY_ENTRY, STORED, Change(dataclasses.replace(stored.record_of(HISTORY_ENTRY), enabled=None), 7, 3))
RESTORE_PREVIEW = restores.RestorePreview(RESTORING, golden_rankings.Effect(None, True, golden_queries=17), Saved(7, 4, "updated", True), None)

BULK_ACTION = undo.BulkAction(9, "delete", 'text "stripe"', None, True, SAVED_AT, "carol", 2, None)


def golden_query(query_id: int, query: str, language: str | None = None) -> golden.GoldenQuery:
    return golden.GoldenQuery(query_id, query, (golden.RelevantRecord(7, "Stripe", "Create refund", False),), language, "alice", SAVED_AT)


NO_DOCS = advice.Advice("no_docs_url", "The record has no docs URL.", "Set the Docs URL.")
NO_DOCS_COUNT = advice.AdviceCount("no_docs_url", "no docs URL", "Set the Docs URL.", 1, 2)


def tune_report() -> tuning.TuneReport:
    split = tuning_data.Split([], [], [], 12, frozenset({"stripe"}))
    data = tuning_data.TuneData("eval.jsonl", 40, [], [], split, Path("golden/eval.jsonl"))
    plan = tuning_plan.TunePlan("all-MiniLM-L6-v2", data, 80, 6, 100, 8, 2, 1.5, 0.001, 300, 0.04, 0.01, 12.0)
    before, after = evaluation.EvaluationReport(40, METRICS), evaluation.EvaluationReport(40, BETTER)
    final = tuning.FinalModel(100, 8, 30.0, evaluation.EvaluationReport(40, METRICS), evaluation.EvaluationReport(40, BETTER))
    model = "all-MiniLM-L6-v2-tuned-0123abcd"
    return tuning.TuneReport(plan, tuning_data.TuneOptions(), [], before, after, model, Path("/models") / model, final, 25.0, 95.0)


# Each report class: an example, and facts both renderings must show (as text in describe(), as a
# value in to_json()).
EXAMPLES: list[tuple[Report, list[object]]] = [
    (deploy.ApplyResult("postgresql://registry@db/payrail", True, "shared", 31, ["003"], seconds=2.5), ["postgresql://registry@db/payrail", 31, "003"]),
    (deploy.Roles(["payrail_agent"], ["payrail_operator"]), ["payrail_agent", "payrail_operator"]),
    (logins.OperatorAdded("alice", True), ["alice"]),
    (
        logins.AgentAdded(logins.AgentLogin("booking_agent", None, 7, "2s", "10s"), False, "postgresql://booking_agent@db:5432/registry", ("hba_agents",)),
        ["booking_agent", 7, "2s", "10s", "hba_agents", "postgresql://booking_agent@db:5432/registry"],
    ),
    (
        stored.ShownRecord({**STORED, "enabled": False, "embedded": False, "saved_by": "bob"}, (NO_DOCS,)),
        [7, "draft needing an embedding", "bob", "Purpose: refunds a charge", "stripe.jsonl", "no_docs_url", "The record has no docs URL."],
    ),
    (
        advice.AdviceReport([advice.AdvisedRecord(9, "Globex", "Weather now", True, [NO_DOCS])], [NO_DOCS_COUNT], 3),
        ["Globex", "Weather now", "no_docs_url", "The record has no docs URL.", "Set the Docs URL.", 3],
    ),
    (advice.AdviceReport([], [NO_DOCS_COUNT], 14, summary_only=True), ["no_docs_url", "no docs URL", 14]),
    (bulk.BulkResult(True, (1, 2), (3,), (4,), (99,)), ["run `payrail-embedder sync` first", "named no record"]),
    (bulk.BulkDeleteResult((5,), (6,), (), applied=False), ["golden queries name 1 record"]),
    (
        status.status("postgresql://nobody@127.0.0.1:1/payrail?connect_timeout=2", None),
        ["user=nobody connect_timeout=2 dbname=payrail host=127.0.0.1 port=1", "Connection refused"],
    ),
    (catalog.ImportReport(5, 2, 11, [Refusal("catalog.jsonl", 9, "the method is empty")], False, 18), [5, 11, 18, "the method is empty"]),
    (catalog.ImportReport(5, 2, 11, saved=True, advice=[NO_DOCS_COUNT]), [5, 11, "no_docs_url", "no docs URL"]),
    (golden.ImportReport(6, 4, [], True), [6, 4]),
    (golden.ImportReport(6, 4, [], True, {"source": 296}), [6, 4, "source", 296]),
    (
        golden.GoldenQueries([golden_query(21, "refund a card payment"), golden_query(22, "payout to a bank", "pt-br")]),
        [21, 22, "payout to a bank", "alice", "pt-br"],
    ),
    (golden.GoldenQueries([golden_query(23, "refund a card payment")], "added"), [23, "refund a card payment", "Create refund"]),
    (golden.GoldenQueries([golden_query(24, "cancel a subscription")], "removed"), [24, "cancel a subscription"]),
    (sync.SyncReport(12, 3, ["Stripe / Create refund"], "the embedder timed out", 4), [12, 3, 4]),
    (sync.WouldSync(["Stripe / Create refund", "Adyen / Cancel"]), ["Stripe / Create refund", "Adyen / Cancel"]),
    (
        search.Matches([search.Match("Stripe", "Create refund", ["https://api.stripe.com/v1/refunds"], "https://docs.stripe.com", "Purpose: refunds")]),
        ["Stripe", "Create refund", "https://api.stripe.com/v1/refunds", "https://docs.stripe.com", "Purpose: refunds"],
    ),
    (search.Matches([]), []),
    (
        history.ListedRecords(
            [
                {
                    "recordId": 7,
                    "provider": "Stripe",
                    "method": "Create refund",
                    "state": "draft",
                    "version": 3,
                    "source": "stripe.jsonl",
                    "savedAt": "2026-12-06",
                    "savedBy": "bob",
                }
            ]
        ),
        ["Stripe", "Create refund", "draft", 3, "stripe.jsonl", "2026-12-06", "bob"],
    ),
    (
        history.ListedSources([sources.SourceCount("bulk.jsonl", 479, 401), sources.SourceCount("curated", 66, 63)]),
        ["bulk.jsonl", 479, 401, "curated", 66, 63],
    ),
    (
        history.RecordHistory(
            "Stripe",
            "Refund",
            None,
            [
                {
                    "historyId": 41,
                    "recordId": 7,
                    "operation": "delete",
                    "changedAt": "2026-12-06T05:00",
                    "changedBy": "carol",
                    "changedBySessionUser": "carol_login",
                    "version": 2,
                    "savedAt": "2026-12-05T05:00",
                    "savedBy": "bob",
                    "provider": "Stripe",
                    "method": "Refund",
                    "urls": ["https://api.stripe.com/v1/refunds"],
                    "docsUrl": None,
                    "guidance": "Purpose: refunds",
                    "enabled": False,
                    "source": "stripe.jsonl",
                    "bulkAction": BULK_ACTION.to_json() | {"inWords": BULK_ACTION.in_words()},
                }
            ],
        ),
        [
            41,
            "carol",
            "carol_login",
            "2026-12-05T05:00",
            "bob",
            "https://api.stripe.com/v1/refunds",
            "Purpose: refunds",
            "stripe.jsonl",
            "bulk action 9: carol deleted 2",
        ],
    ),
    (
        undo.UndoResult(BULK_ACTION, (7, 8), {7: "Stripe / Refund", 8: "Stripe / Charge"}, restored=(12, 13), reenabled=1, undone_as=10),
        [9, 10, 12, 13, 1],
    ),
    (
        undo.UndoResult(BULK_ACTION, (), {}, ("Stripe / Refund cannot come back: a record has its name",), applied=False),
        ["cannot come back: a record has its name"],
    ),
    (history.SavedRecord(Saved(7, 3, "updated", True), STORED, deleted_since=5), [7, 3, "updated", "Stripe", "Create refund"]),
    (
        evaluation.Evaluation(
            evaluation.EvaluationReport(40, METRICS, [MISS]),
            "all-MiniLM-L6-v2",
            [],
            ("other-model", evaluation.EvaluationReport(40, BETTER)),
            [sources.SourcePlaces("bulk.jsonl", 2_401, 57, 12, 9)],
            [sources.SourcePlaces("curated", 63, 31, 29, 4)],
        ),
        [40, "other-model", "refund a card payment", 0.5, 0.75, "bulk.jsonl", 2401, 57, 12, 45, 9, "curated", 63, 31, 29, 4],
    ),
    (golden_rankings.Effect(None, True, golden_queries=17), [17]),
    (RESTORE_PREVIEW, [41, 7, 2, 3, "Purpose: refunds a charge", "Purpose: refunds", 17]),
    (restores.Restored(RESTORE_PREVIEW, history.SavedRecord(Saved(7, 4, "updated", True), {**STORED, "version": 4})), [7, 4, "updated", "Stripe"]),
    (restores.Restored(RESTORE_PREVIEW, None), []),
    (
        switch.SwitchReport("text-embedding-3-small", EmbeddingModel("all-MiniLM-L6-v2", 384), 1536, 250, 0, True, 240, 10, 6),
        ["text-embedding-3-small", 1536, 250, 240, 10, 6],
    ),
    (switch.ModelInfo("all-MiniLM-L6-v2", 384, "2026-12-06T05:30", 90, 80, 85, {"text-embedding-3-small": 12}), ["all-MiniLM-L6-v2", 384, 90, 80, 85, 12]),
    # Its split has no validation query: forced, it says the least that can decide.
    (tune_report(), ["all-MiniLM-L6-v2-tuned-0123abcd", "/models/all-MiniLM-L6-v2-tuned-0123abcd", "all-MiniLM-L6-v2", 40, 100, tuning.MIN_VALIDATION_QUERIES]),
    (tuning.InstalledModel(Path("/models/all-MiniLM-L6-v2-tuned-0123abcd")), ["all-MiniLM-L6-v2-tuned-0123abcd", "/models/all-MiniLM-L6-v2-tuned-0123abcd"]),
    (
        tuning.TunedModels(Path("/models"), [{"name": "m-tuned-1", "path": "/models/m-tuned-1", "exported": True, "tuning": None, "tuningProblem": None}]),
        ["m-tuned-1", "/models/m-tuned-1"],
    ),
]


def leaves(value: object) -> list[object]:
    if isinstance(value, dict):
        return [leaf for item in value.values() for leaf in leaves(item)]
    if isinstance(value, list | tuple):
        return [leaf for item in value for leaf in leaves(item)]
    return [value]


def test_every_report_class_is_a_dataclass_that_can_be_made_and_has_an_example():
    classes = all_report_classes()
    assert {type(example) for example, _ in EXAMPLES} == classes
    for cls in classes:
        assert dataclasses.is_dataclass(cls), cls
        assert not inspect.isabstract(cls), cls


@pytest.mark.parametrize(("report", "facts"), EXAMPLES, ids=lambda item: type(item).__name__ if isinstance(item, Report) else "")
def test_describe_and_to_json_tell_the_same_facts(report, facts):
    answer = report.to_json()
    assert json.loads(json_text(answer)) == json.loads(json.dumps(answer))  # JSON all the way down
    lines = report.describe()
    assert lines and all(isinstance(line, str) for line in lines)
    text = "\n".join(report.warnings() + lines)
    values = leaves(answer)
    for fact in facts:
        assert str(fact) in text, f"{type(report).__name__}.describe() does not say {fact!r}"
        assert fact in values or any(isinstance(v, str) and str(fact) in v for v in values), f"{type(report).__name__}.to_json() lacks {fact!r}"


def emitted(report: Report, as_json: bool):
    @click.command()
    def command():
        emit(report, as_json)

    return CliRunner().invoke(command, [])


def test_emit_prints_json_alone_or_the_warnings_on_standard_error_and_the_lines():
    report = sync.SyncReport(2, 0, ["Stripe / Create refund"], "the embedder timed out")
    as_json = emitted(report, True)
    assert (as_json.stdout, as_json.stderr) == (json_text(report.to_json()) + "\n", "")
    assert json.loads(as_json.stdout)["pending"] == ["Stripe / Create refund"]
    for_people = emitted(report, False)
    assert for_people.stdout == "2 embedded, 0 changed meanwhile, 1 pending\n"
    assert for_people.stderr == "pending: Stripe / Create refund\nError: the embedder timed out\n"


def test_emit_writes_no_line_for_a_report_without_one_and_escapes_what_ends_lines_in_json():
    assert emitted(golden.GoldenQueries([], "removed"), False).stdout == ""
    separated = emitted(golden.GoldenQueries([golden_query(3, "refund\u2028payment")], "added"), True).stdout
    assert "\\u2028" in separated and "\u2028" not in separated
    assert json.loads(separated)["query"] == "refund\u2028payment"


def test_a_report_without_both_renderings_cannot_be_made():
    class OnlyJson(Report):
        def to_json(self) -> dict:
            return {}

    with pytest.raises(TypeError, match="describe"):
        OnlyJson()


@pytest.mark.parametrize(("seconds", "text"), [(4.6, "5 s"), (200, "3 min 20 s"), (3900, "1 h 05 min")])
def test_duration(seconds, text):
    assert duration(seconds) == text
