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
from ..quality import quality_page, restores
from ..quality.golden_rankings import Effect, Ranking, measured_edit, rank_golden_queries
from ..registry import advice, bulk, catalog, golden, history, sources, stored, undo
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
    # Every source of the records, for the Source filter.
    source_counts: list[sources.SourceCount] = field(default_factory=list)


def records_list(conn: psycopg.Connection, shown: views.ListFilter, after: str | None, before: str | None) -> RecordsList:
    """A page of the records that match the filter (ValueError for a cursor that is not one)."""
    page = stored.list_records(conn, shown.text, shown.state, shown.source, after=after, before=before, limit=PAGE_SIZE)
    last = undo.last_action(conn)
    undoable = last if last is not None and last.operation != "undo" and last.undone_by is None else None
    return RecordsList(page, stored.counts(conn), page.matching, undoable, sources.registry_sources(conn))


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


def quality_report(conn: psycopg.Connection, embedder_factory: EmbedderFactory) -> tuple[quality_page.QualityReport | None, str | None]:
    """The Quality page's report, or why it cannot be made now."""
    try:
        return quality_page.quality_report(conn, embedder_factory), None
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


@dataclass
class RestoreQuestion:
    """A Restore's confirmation page: what restoring the version changes (fields, golden queries'
    top threes: restores.preview_restore), the version of the record it was measured on, which
    its form carries, and why it is asked (again), if it is."""

    preview: restores.RestorePreview
    version: int
    problem: str | None = None


@dataclass
class RestoreOutcome:
    """What a Restore did, or why there is nothing to ask: the message's kind ("info" or "error"),
    its words and the record to show next (the one restored, a new one when it was deleted
    meanwhile; None: the list); or, when the record changed since its confirmation page, that
    page again, for the record as it is now."""

    kind: str
    text: str
    shown: int | None = None
    asked_again: RestoreQuestion | None = None


def restore_question(
    conn: psycopg.Connection, embedder_factory: EmbedderFactory, record_id: int, history_id: int, version: int, problem: str | None = None
) -> RestoreQuestion | RestoreOutcome:
    """What restoring the history entry into the record would change, measured on the record as it
    is now (version: the one the page showed; a page older than the record says so), saving
    nothing; or the outcome when there is nothing to ask (no such entry of this record, nothing to
    restore, a refusal, or an effect that cannot be measured now)."""
    try:
        preview = restores.preview_restore(conn, embedder_factory, history_id, record_id=record_id)
    except WRITE_FAILURES + (SearchError,) as error:
        return _restore_refused(conn, record_id, history_id, version, _not_saved(conn, error, "Not restored"))
    if preview is None:
        return _restore_refused(conn, record_id, history_id, version, f"Not restored: this record has no history entry {history_id}.")
    current = preview.restoring.current
    if preview.changes_nothing:
        return RestoreOutcome("info", f"Nothing to restore: {preview.label} holds the same fields as the current version.", record_id)
    if isinstance(preview.outcome, (Refused, Conflict)):
        return _restore_refused(conn, record_id, history_id, version, f"Not restored: {preview.outcome.reason}")
    if problem is None and current is not None and current["version"] != version:
        problem = f"The record was saved since its page was shown (version {version} then, {current['version']} now): this is what restoring does now."
    return RestoreQuestion(preview, current["version"] if current is not None else version, problem)


def restore(
    conn: psycopg.Connection, embedder_factory: EmbedderFactory, record_id: int, history_id: int, version: int, embedding: Embedding | None
) -> RestoreOutcome:
    """The restore its confirmation page showed: the history entry's fields into the record at
    version (the one the page measured), with the vector the page's preview made (None: made
    now), through the write path; nothing when the record changed since (asked again)."""
    restoring = history.restoring(conn, history_id, record_id=record_id, expected_version=version)
    if restoring is None:
        return _restore_refused(conn, record_id, history_id, version, f"Not restored: this record has no history entry {history_id}.")
    try:
        outcome = save_change(conn, embedder_factory, restoring.change, embedding)
    except WRITE_FAILURES as error:
        return _restore_refused(conn, record_id, history_id, version, _not_saved(conn, error, "Not restored"))
    label = restoring.label
    if isinstance(outcome, Conflict):
        problem = f"Not restored: {outcome.reason}. Nothing was changed. Below is what restoring {label} does now: Restore to do that."
        asked = restore_question(conn, embedder_factory, record_id, history_id, version, problem)
        if isinstance(asked, RestoreOutcome):
            return asked
        _log("restore", conn, failed=True, outcome="conflict", record=record_id, history=history_id, version=version, reason=outcome.reason)
        return RestoreOutcome("error", problem, record_id, asked)
    if isinstance(outcome, Refused):
        return _restore_refused(conn, record_id, history_id, version, f"Not restored: {outcome.reason}")
    _log("restore", conn, failed=False, outcome=outcome.outcome, record=outcome.record_id, history=history_id, version=outcome.version)
    if outcome.outcome == "unchanged":
        return RestoreOutcome("info", f"Nothing to restore: {label} holds the same fields as the current version.", outcome.record_id)
    if stored.get(conn, outcome.record_id) is None:
        return RestoreOutcome("error", f"Restored {label} as version {outcome.version}, but another session has deleted the record since.")
    if outcome.record_id != record_id:  # a deleted record comes back as a new draft
        return RestoreOutcome("info", views.restored_anew_message(outcome, label), outcome.record_id)
    return RestoreOutcome("info", views.saved_message(outcome, verb=f"Restored {label} into"), outcome.record_id)


def _restore_refused(conn: psycopg.Connection, record_id: int, history_id: int, version: int, problem: str) -> RestoreOutcome:
    """A restore that changed nothing, logged: shown on the record's page, or the list's when it has none."""
    _log("restore", conn, failed=True, outcome="refused", record=record_id, history=history_id, version=version, reason=problem)
    return RestoreOutcome("error", problem, record_id if stored.get(conn, record_id) is not None else None)


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
    conn: psycopg.Connection, embedder_factory: EmbedderFactory, data: bytes, source: str, skip_invalid: bool, records_source: str | None = None
) -> tuple[catalog.ImportReport | None, str | None]:
    """Imports an uploaded JSON Lines file as `payrail-embedder import` does; (report, problem).
    source: the file's name as uploaded; records_source: the Source given for every record, which
    overrides the lines' own (none: a line's own, else the file's name without its folders)."""
    started = time.monotonic()
    items = list(catalog_lines(io.BytesIO(data), source))
    if not items:
        _log("import", conn, failed=True, source=source, saved=False, reason="no records")
        return None, f"Not imported: {source} holds no records (it is empty, or its lines are blank)."
    try:
        if records_source is not None:
            sources.check(conn, records_source, "the Source given")
        else:
            sources.check(conn, sources.of_upload(source), "the file's name", " Or give one in Source.")
        items = list(catalog.sourced(items, sources.of_upload(source), records_source))
    except sources.InvalidSource as error:
        _log("import", conn, failed=True, source=source, saved=False, reason=str(error))
        return None, f"Not imported: {error}"
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
