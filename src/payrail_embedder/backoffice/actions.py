"""What each page does with the session's connection, through the package's own functions (the
write path, stored, history, search, preview, catalog). Plain functions of a connection and an
embedder factory, run in a worker thread; they return what the page shows."""

from __future__ import annotations

import io
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import psycopg

from ..base import logs
from ..base.errors import CodedError, database_reason
from ..embedders import Embedder, EmbeddingUnavailable
from ..model import quality
from ..model.golden_rankings import Effect, Ranking, measured_edit, rank_golden_queries
from ..registry import advice, bulk, catalog, golden, history, stored, undo
from ..registry.advice import Advice, AdviceCount, AdvisedRecord
from ..registry.changes import Change, Conflict, Embedding, Outcome, Refused, Saved
from ..registry.embedding_model import RegistryModelMismatch
from ..registry.records import FIELD_LABELS, ProviderMethod, catalog_lines
from ..registry.search import InvalidQuery, SearchError, check_query, holding, search_provider_methods
from ..registry.write import TransientFailure, delete_record, save_change
from . import views

EmbedderFactory = Callable[[], Embedder]

EMBEDDING_UNAVAILABLE = "the embedding service is unavailable"


@dataclass(frozen=True)
class Preview:
    """What an edit would change in the golden queries' top threes, and the vector made for it
    (None: it keeps the record's), which its Save reuses."""

    effect: Effect
    embedding: Embedding | None


@dataclass
class SaveResult:
    """The outcome of saving a form, for the page: saved, or why not with the record as stored now."""

    saved: Saved | None = None
    # For a conflict: the record as someone else saved it meanwhile.
    row: dict | None = None
    problem: str | None = None
    field_errors: dict[str, str] = field(default_factory=dict)
    conflict: bool = False
    # A preview, or a save that waits for the operator to see what it changes.
    preview: Preview | None = None


def _not_saved(conn: psycopg.Connection, error: Exception, prefix: str = "Not saved") -> str:
    """Why nothing was saved, for an exception the write path raises instead of an outcome."""
    if isinstance(error, EmbeddingUnavailable):
        return f"{prefix}: {EMBEDDING_UNAVAILABLE} ({error}). Nothing was saved; try again when it is back."
    if isinstance(error, psycopg.Error):
        if conn.broken or conn.closed:
            raise error  # the session's connection is gone: the page signs the operator out
        return f"{prefix}: the database refused it: {database_reason(error)}"
    return f"{prefix}: {error}"


WRITE_FAILURES = (EmbeddingUnavailable, RegistryModelMismatch, TransientFailure, psycopg.Error)


def _log(event: str, conn: psycopg.Connection, *, failed: bool, **fields) -> None:
    """An operator's change for the log, as the session's role; a warning when it was not made."""
    logs.log(event, logging.WARNING if failed else logging.INFO, role=conn.info.user, **fields)


def save_record(
    conn: psycopg.Connection,
    embedder_factory: EmbedderFactory,
    record: ProviderMethod,
    record_id: int | None,
    version: int,
    *,
    previewed: Preview | None = None,
) -> SaveResult:
    """Saves the form's record through the write path; version is the one the form was read at
    (0 for a new record). Unless previewed (the operator saw its effect: its vector is reused), an
    edit that changes some golden query's top three is not saved: saved in a transaction and
    measured, it is rolled back, and the result carries its effect for the operator to see first."""
    result = _save_record(conn, embedder_factory, record, record_id, version, previewed)
    saved = result.saved
    if saved is not None:
        _log("save", conn, failed=False, outcome=saved.outcome, record=saved.record_id, version=saved.version, embedded=saved.embedded)
    elif result.preview is None:
        _log(
            "save",
            conn,
            failed=True,
            outcome="conflict" if result.conflict else "refused",
            record=record_id,
            version=version,
            fields=",".join(result.field_errors) or None,
            reason=result.problem,
        )
    return result


def preview_record(
    conn: psycopg.Connection,
    embedder_factory: EmbedderFactory,
    record: ProviderMethod,
    record_id: int | None,
    version: int,
    prefix: str = "No preview",
) -> SaveResult:
    """What saving the form would change in the golden queries' top threes: saved in a
    transaction, measured, rolled back. The result says why not instead (after prefix) when the
    save is refused or conflicts."""
    try:
        preview = measured_edit(conn, embedder_factory, Change(record, record_id, version))
    except WRITE_FAILURES + (SearchError,) as error:
        return SaveResult(problem=_not_saved(conn, error, prefix))
    if not isinstance(preview.outcome, Saved):
        return _unsaved(conn, preview.outcome, record_id, prefix)
    return SaveResult(preview=Preview(preview.effect, preview.embedding))


def _save_record(
    conn: psycopg.Connection, embedder_factory: EmbedderFactory, record: ProviderMethod, record_id: int | None, version: int, previewed: Preview | None
) -> SaveResult:
    change = Change(record, record_id, version)
    outcome: Outcome
    try:
        if previewed is not None:
            outcome = save_change(conn, embedder_factory, change, previewed.embedding)
        elif not golden.any_golden_queries(conn):
            outcome = save_change(conn, embedder_factory, change)  # no golden query's top three to change
        else:
            measured = measured_edit(conn, embedder_factory, change, keep=lambda effect: not effect.changes)
            if isinstance(measured.outcome, Saved) and not measured.kept:
                return SaveResult(preview=Preview(measured.effect, measured.embedding))
            outcome = measured.outcome
    except WRITE_FAILURES + (SearchError,) as error:
        return SaveResult(problem=_not_saved(conn, error))
    if isinstance(outcome, Saved):
        return SaveResult(saved=outcome)
    return _unsaved(conn, outcome, record_id)


def _unsaved(conn: psycopg.Connection, outcome: Refused | Conflict, record_id: int | None, prefix: str = "Not saved") -> SaveResult:
    """Why the form was not saved (or previewed): every broken rule, or the conflict with the version saved meanwhile."""
    if isinstance(outcome, Refused):
        return refused(outcome, prefix)
    current = stored.get(conn, record_id) if record_id is not None else None
    if current is None:
        return SaveResult(problem=f"{prefix}: {outcome.reason}. Save again to create it anew with your text.", conflict=True)
    return SaveResult(
        problem=f"{prefix}: {outcome.reason}. Both versions are shown: merge what you need into your text and save again.",
        row=current,
        conflict=True,
    )


def refused(outcome: Refused, prefix: str = "Not saved") -> SaveResult:
    """Each broken rule next to each of its fields, all at once; a rule about no field on top."""
    field_errors: dict[str, str] = {}
    for rule in outcome.rules:
        for name in rule.fields:
            field_errors[name] = " ".join(filter(None, [field_errors.get(name), rule.in_words()]))
    general = [rule.describe(FIELD_LABELS) for rule in outcome.rules if not rule.fields] or ([] if outcome.rules else [outcome.reason])
    labels = [FIELD_LABELS[name] for name in FIELD_LABELS if name in field_errors]
    if labels:
        general.append(f"Fix the field{'s' if len(labels) > 1 else ''} marked below: {', '.join(labels)}.")
    return SaveResult(problem=" ".join([f"{prefix}.", *general]), field_errors=field_errors)


# Records per page of the list: a page stays small (tens of kB) at any size of registry.
PAGE_SIZE = 100


@dataclass
class RecordsList:
    page: stored.RecordsPage
    # What the registry holds (stored.counts), and how many records the filter matches (None: no filter).
    counts: dict
    matching: int | None
    # The operator's last bulk action, while it can be undone (not an undo, not undone).
    last_bulk: undo.BulkAction | None = None


def records_list(conn: psycopg.Connection, text: str, state: str | None, after: str | None, before: str | None) -> RecordsList:
    """A page of the records that match the filter (ValueError for a cursor that is not one)."""
    page = stored.list_records(conn, text, state, after=after, before=before, limit=PAGE_SIZE)
    last = undo.last_action(conn)
    undoable = last if last is not None and last.operation != "undo" and last.undone_by is None else None
    return RecordsList(page, stored.counts(conn), page.matching, undoable)


@dataclass
class RecordPage:
    row: dict
    versions: list[views.Version]
    # The golden queries that should find it, each with what search answers it now.
    golden: list[Ranking] = field(default_factory=list)
    golden_problem: str | None = None
    # How the saved version fits the editorial template: advice, never a refusal.
    advice: list[Advice] = field(default_factory=list)


def record_page(conn: psycopg.Connection, record_id: int, embedder_factory: EmbedderFactory | None = None) -> RecordPage | None:
    """The record with its history and the advice on it; with embedder_factory, also its golden queries, ranked."""
    row = stored.get(conn, record_id)
    if row is None:
        return None
    page = RecordPage(
        row,
        views.versions(row, history.record_history(conn, record_id), undo.changes_of(conn, [record_id])),
        advice=advice.advice_on(conn, stored.record_of(row)),
    )
    if embedder_factory is not None:
        try:
            page.golden, _ = rank_golden_queries(conn, embedder_factory, golden.golden_queries(conn, record_id=record_id))
        except (SearchError, RegistryModelMismatch) as error:
            page.golden_problem = f"The golden queries cannot be ranked now: {error}"
    return page


def golden_queries_of(conn: psycopg.Connection, record_id: int) -> list[golden.GoldenQuery]:
    """The golden queries that name the record (what its delete page lists)."""
    return golden.golden_queries(conn, record_id=record_id)


def add_golden(
    conn: psycopg.Connection, embedder_factory: EmbedderFactory, record_id: int, query: str, others: list[str], language: str | None = None
) -> str | None:
    """Adds a golden query that should find the record (and the records named in others, "Provider
    / Method" each), in language (a tag, or None); None when added, else why not, in words (nothing added)."""
    try:
        added = golden.add_golden_query(conn, embedder_factory, query, others, [record_id], language)
    except CodedError as error:
        why = f"{EMBEDDING_UNAVAILABLE} ({error}); try again when it is back" if isinstance(error, EmbeddingUnavailable) else error.detail
        problem = f"Not added: {why}"
        _log("golden_add", conn, failed=True, record=record_id, reason=problem)
        return problem
    _log("golden_add", conn, failed=False, record=record_id, golden_query=added.golden_query_id, relevant=len(added.relevant))
    return None


def remove_golden(conn: psycopg.Connection, record_id: int, query: str) -> str | None:
    """Removes the golden query query; None when removed, else why not."""
    try:
        (removed,) = golden.remove_golden_queries(conn, [query])
    except CodedError as error:
        _log("golden_remove", conn, failed=True, record=record_id, reason=error.detail)
        return f"Not removed: {error.detail}"
    _log("golden_remove", conn, failed=False, record=record_id, golden_query=removed.golden_query_id)
    return None


def quality_report(conn: psycopg.Connection, embedder_factory: EmbedderFactory) -> tuple[quality.QualityReport | None, str | None]:
    """The Quality page's report, or why it cannot be made now."""
    try:
        return quality.quality_report(conn, embedder_factory), None
    except (SearchError, RegistryModelMismatch) as error:
        return None, f"The golden queries cannot be ranked now: {error}"


def advice_counts(conn: psycopg.Connection) -> list[AdviceCount]:
    """How many records, enabled and drafts, get each piece of advice on the editorial template (the Quality page)."""
    return advice.counts(conn)


@dataclass
class AdvisedPage:
    """A page of the records that get one piece of advice."""

    count: AdviceCount
    records: list[AdvisedRecord]
    # This page's number, from 1, and whether there are pages after it.
    number: int
    more: bool

    @property
    def first(self) -> int:
        """The place of this page's first record in the whole list, from 1."""
        return (self.number - 1) * PAGE_SIZE + 1

    def advice_of(self, record: AdvisedRecord) -> Advice:
        """The record's advice of this page's code."""
        return next(item for item in record.advice if item.code == self.count.code)


def advised_page(conn: psycopg.Connection, code: str, number: int) -> AdvisedPage | None:
    """The number-th page (PAGE_SIZE records, by provider and method) of the records that get the
    advice code, enabled and drafts; None for a code the registry does not give."""
    count = next((count for count in advice.counts(conn) if count.code == code), None)
    if count is None:
        return None
    records = advice.advised_records(conn, code=code)
    first = (number - 1) * PAGE_SIZE
    return AdvisedPage(count, records[first : first + PAGE_SIZE], number, len(records) > first + PAGE_SIZE)


@dataclass
class Trial:
    """A query's answers: what agents get now, and with this record counted as enabled."""

    query: str
    agents: list[dict] = field(default_factory=list)
    agents_problem: str | None = None
    counted: list[dict] = field(default_factory=list)
    counted_problem: str | None = None


def try_query(conn: psycopg.Connection, embedder_factory: EmbedderFactory, row: dict, query: str) -> Trial:
    trial = Trial(query)
    try:
        checked = check_query(query)
    except InvalidQuery as error:
        trial.agents_problem = trial.counted_problem = error.describe()
        return trial
    draft = (row["provider"], row["method"])
    for answer, problem, counted_draft in (("agents", "agents_problem", None), ("counted", "counted_problem", draft)):
        try:
            setattr(trial, answer, search_provider_methods(holding(conn), embedder_factory, checked, counted_draft=counted_draft))
        except SearchError as error:
            # E.g. a draft without a vector of its current content: the database says so, with a hint.
            setattr(trial, problem, error.describe())
    return trial


def restore(conn: psycopg.Connection, embedder_factory: EmbedderFactory, record_id: int, history_id: int, version: int) -> tuple[str, str, int | None]:
    """Brings back the public fields a history entry kept, through the write path (history.restore).
    Returns (kind, message, the record to show next): kind "info" or "error"; the record is the one
    restored, which is a new one when the record was deleted meanwhile, or None when there is none."""
    kind, message, saved = _restore(conn, embedder_factory, record_id, history_id, version)
    _log(
        "restore",
        conn,
        failed=saved is None,
        outcome=saved.outcome if saved else "refused",
        record=saved.record_id if saved else record_id,
        history=history_id,
        version=saved.version if saved else version,
        reason=None if saved else message,
    )
    shown = saved.record_id if saved else (record_id if stored.get(conn, record_id) is not None else None)
    return kind, message, shown


def _restore(conn: psycopg.Connection, embedder_factory: EmbedderFactory, record_id: int, history_id: int, version: int) -> tuple[str, str, Saved | None]:
    try:
        restored = history.restore(conn, embedder_factory, history_id, record_id=record_id, expected_version=version)
    except WRITE_FAILURES as error:
        return "error", _not_saved(conn, error, "Not restored"), None
    if restored is None:
        return "error", f"Not restored: this record has no history entry {history_id}.", None
    entry, outcome = restored
    label = f"version {entry['version']}" if entry["version"] is not None else f"history entry {history_id}"
    if isinstance(outcome, Saved):
        if outcome.outcome == "unchanged":
            return "info", f"Nothing to restore: {label} holds the same fields as the current version.", outcome
        if stored.get(conn, outcome.record_id) is None:
            return "error", f"Restored {label} as version {outcome.version}, but another session has deleted the record since.", None
        if outcome.record_id != record_id:  # history.restore brings a deleted record back as a new draft
            return "info", views.restored_anew_message(outcome, label), outcome
        return "info", views.saved_message(outcome, verb=f"Restored {label} into"), outcome
    if isinstance(outcome, Conflict):
        return "error", f"Not restored: {outcome.reason}. Look at the history again before restoring.", None
    return "error", f"Not restored: {outcome.reason}", None


def delete(conn: psycopg.Connection, record_id: int, version: int, with_golden_queries: bool = False) -> tuple[dict | None, Conflict | Refused | None]:
    """Deletes the record if it is still at version: (the record as it was, None), else (the record
    as it is now or None, the Conflict, or the refusal while golden queries name it, unless
    with_golden_queries: then it leaves them, and those that named it alone go with it)."""
    row, problem = delete_record(conn, record_id, version, with_golden_queries=with_golden_queries)
    outcome = "deleted" if problem is None else "conflict" if isinstance(problem, Conflict) else "refused"
    _log(
        "delete",
        conn,
        failed=problem is not None,
        outcome=outcome,
        record=record_id,
        version=version,
        with_golden_queries=with_golden_queries or None,
        reason=problem.reason if problem else None,
    )
    return (stored.get(conn, record_id) if problem else row), problem


# The records a bulk action's confirmation page names, at most: the count says the rest.
NAMES_SHOWN = 100


@dataclass
class BulkQuestion:
    """A bulk Enable / Disable's confirmation page: what it would do (bulk.set_enabled's preview,
    whose digest the page's form carries) and the names of the first records it changes."""

    plan: bulk.BulkResult
    names: dict[int, str]
    # Why it is asked again: the records changed since the page before was shown.
    problem: str | None = None

    @property
    def shown(self) -> list[tuple[int, str]]:
        return [(record_id, self.names.get(record_id, f"record {record_id}")) for record_id in self.plan.acting_on[:NAMES_SHOWN]]


def bulk_question(conn: psycopg.Connection, selection: bulk.Selection, enabled: bool, problem: str | None = None) -> BulkQuestion:
    plan = bulk.set_enabled(conn, selection, enabled, preview=True)
    return BulkQuestion(plan, bulk.names(conn, plan.acting_on[:NAMES_SHOWN]), problem)


@dataclass
class BulkOutcome:
    """What a bulk Enable / Disable did: the message's kind ("info", or "error" when some record
    was refused or nothing could be done) and its words; or, when the records changed since its
    confirmation page was shown, that page again with what it would do now."""

    kind: str
    text: str
    asked_again: BulkQuestion | None = None


def set_enabled(conn: psycopg.Connection, selection: bulk.Selection, enabled: bool, confirmed: str | None = None) -> BulkOutcome:
    """The list's bulk Enable / Disable (bulk.set_enabled, one transaction): of the ticked records
    as they are, or (confirmed: the digest of the plan its confirmation page showed) of exactly
    the records that page named, or nothing."""
    try:
        result = bulk.set_enabled(conn, selection, enabled, confirmed=confirmed)
    except (TransientFailure, bulk.ChangedSinceAsked) as error:
        _log("bulk_enable", conn, failed=True, enabled=enabled, reason=str(error))
        if isinstance(error, bulk.ChangedSinceAsked):
            problem = f"Nothing was changed: the records changed since this page was shown (another writer's change). It would now {error.now.verb} {_records(len(error.now.acting_on))}, below: confirm again to do that."
            return BulkOutcome("error", problem, bulk_question(conn, selection, enabled, problem))
        return BulkOutcome("error", f"Nothing was changed: {error}")
    _log("bulk_enable", conn, **result.log_fields())
    return BulkOutcome("error" if result.refusals() else "info", result.in_words())


def undo_last(conn: psycopg.Connection, embedder_factory: EmbedderFactory, action_id: int) -> tuple[str, str]:
    """Undoes the operator's last bulk action, the one the list showed (undo.undo): the message's kind and its words."""
    try:
        result = undo.undo(conn, embedder_factory, action_id)
    except WRITE_FAILURES + (undo.NoSuchBulkAction,) as error:
        problem = _not_saved(conn, error, "Not undone") if isinstance(error, WRITE_FAILURES) else f"Not undone: {error}."
        _log("bulk_undo", conn, failed=True, bulk_action=action_id, reason=problem)
        return "error", problem
    _log("bulk_undo", conn, **result.log_fields())
    return ("error" if result.refusals else "info"), result.in_words()


def _records(n: int) -> str:
    return f"{n:,} record{'' if n == 1 else 's'}"


def import_upload(
    conn: psycopg.Connection, embedder_factory: EmbedderFactory, data: bytes, source: str, skip_invalid: bool
) -> tuple[catalog.ImportReport | None, str | None]:
    """Imports an uploaded JSON Lines file as `payrail-embedder import` does; (report, problem)."""
    started = time.monotonic()
    items = list(catalog_lines(io.BytesIO(data), source))
    if not items:
        _log("import", conn, failed=True, source=source, saved=False, reason="no records")
        return None, f"Not imported: {source} holds no records (it is empty, or its lines are blank)."
    try:
        started_at = advice.clock(conn)
        report = catalog.import_records(conn, embedder_factory, items, skip_invalid=skip_invalid)
        report = replace(report, registry=stored.registry_held(conn), advice=advice.saved_since(conn, started_at))
    except WRITE_FAILURES as error:
        problem = _not_saved(conn, error, "Nothing imported")
        _log("import", conn, failed=True, source=source, saved=False, reason=problem)
        return None, problem
    _log(
        "import",
        conn,
        failed=bool(report.refused),
        source=source,
        created=report.created,
        updated=report.updated,
        unchanged=report.unchanged,
        refused=len(report.refused),
        saved=report.saved,
        duration_ms=round((time.monotonic() - started) * 1000),
    )
    return report, None


def export(conn: psycopg.Connection) -> bytes:
    return "".join(line + "\n" for line in catalog.export_records(conn)).encode("utf-8")
