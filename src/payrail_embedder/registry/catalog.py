"""Catalog files: import JSON Lines through the write path, export every record in the same format."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace

import psycopg
from psycopg.rows import dict_row

from ..base.errors import CodedError, reason
from ..base.reports import Report
from ..base.safe_text import json_text
from ..embedders import OPENAI_MAX_BATCH, Embedder, EmbeddingUnavailable, made_once
from . import stored
from .advice import AdviceCount, summary_lines
from .changes import Change, Conflict, Outcome, Refused, Saved
from .embedding_model import RegistryModelMismatch
from .records import Line, Refusal
from .stored import record_of
from .write import TransientFailure, check_changes, save_changes


@dataclass
class ImportReport(Report):
    created: int = 0
    updated: int = 0
    unchanged: int = 0
    # Every refused line, in file order, whichever rule refused it.
    refused: list[Refusal] = field(default_factory=list)
    saved: bool = False
    # Lines no rule refused, left unsaved because another line was refused.
    not_imported: int = 0
    # What the registry holds after it (stored.counts), where the command asked: agents can find only its enabled records.
    registry: dict | None = None
    # The advice on the records it created or updated (advice.saved_since), where the command asked.
    advice: list[AdviceCount] | None = None

    def summary(self) -> str:
        """The report's last line, as `import` prints it."""
        outcome = "saved" if self.saved else "nothing saved"
        if self.not_imported:
            outcome += f": {self.not_imported} valid line{'s were' if self.not_imported != 1 else ' was'} not imported either"
        return f"{self.created} created, {self.updated} updated, {self.unchanged} unchanged, {len(self.refused)} refused: {outcome}"

    def to_json(self) -> dict:
        return {
            "created": self.created,
            "updated": self.updated,
            "unchanged": self.unchanged,
            "refused": [{"source": r.source, "line": r.line, "reason": r.reason} for r in self.refused],
            "saved": self.saved,
            "notImported": self.not_imported,
            **({"registry": self.registry} if self.registry is not None else {}),
            **({"advice": [count.to_json() for count in self.advice]} if self.advice is not None else {}),
        }

    def describe(self) -> list[str]:
        return [self.summary(), *stored.findable_lines(self.registry), *summary_lines(self.advice or [])]

    def warnings(self) -> list[str]:
        return [f"refused {refusal}" for refusal in self.refused]


# Lines checked, embedded and saved together: memory holds one batch (its vectors: 12 MB at 1,536
# dimensions) however long the file; one embedding request with OpenAI (its largest).
IMPORT_BATCH = OPENAI_MAX_BATCH


class ImportInterrupted(CodedError):
    """The save pass stopped after some batches were committed; a rerun of the same import finishes it."""

    code = "unavailable"

    def __init__(self, report: ImportReport, cause: BaseException | str) -> None:
        super().__init__(
            f"{reason(cause)}; the import stopped after saving {report.created + report.updated + report.unchanged} lines "
            f"({report.created} created, {report.updated} updated, {report.unchanged} unchanged): run the same import "
            "again to save the rest (lines already saved come back unchanged)"
        )
        self.report = report


def _batches(items: Iterable[Line | Refusal], size: int) -> Iterator[list[Line | Refusal]]:
    iterator = iter(items)
    while batch := list(itertools.islice(iterator, size)):
        yield batch


def import_records(
    conn: psycopg.Connection,
    embedder_factory: Callable[[], Embedder],
    items: Iterable[Line | Refusal] | Callable[[], Iterable[Line | Refusal]],
    *,
    skip_invalid: bool = False,
    progress: Callable[[int], None] = lambda done: None,
    batch_size: int = IMPORT_BATCH,
) -> ImportReport:
    """Upserts records by (provider, method) through the write path (write.save_changes).

    Every line is checked against every rule before anything is embedded; one refused line
    saves nothing unless skip_invalid, which saves the others. A file of one batch is saved by
    the write path's own statement, which judges every line first. items: the lines, or a function
    that reads them anew (read_lines of the files): then a longer file is streamed twice, a batch
    at a time, checked all (each batch judged in a transaction rolled back), then embedded and
    saved, and memory holds one batch whatever the length (plus 16 bytes a line, to find a record
    named twice). Each batch of the save is a transaction of its own: a file of more than one
    batch that stops midway (the embedding service or the database failed) raises
    ImportInterrupted, keeping the batches saved; rerunning it finishes. conn must be in
    autocommit mode.
    """
    if callable(items):
        read_items = items
    else:
        kept = items if isinstance(items, Sequence) else list(items)

        def read_items():
            return kept

    run = _ImportRun(conn, made_once(embedder_factory), skip_invalid, progress)  # one embedder (one model load) per import
    batches = _batches(read_items(), batch_size)
    first, second = next(batches, []), next(batches, None)
    if second is None and (skip_invalid or not any(isinstance(item, Refusal) for item in first)):
        return run.save_all([first])  # every line judged by the save's own statement
    if not skip_invalid and not run.check_all(itertools.chain([first], [second] if second is not None else [], batches)):
        return run.report
    return run.save_all(_batches(read_items(), batch_size))


class _ImportRun:
    """One import's state across its passes: the report, where each line is, and the keys of the
    lines checked so far (a record named twice is refused across batches too)."""

    def __init__(self, conn: psycopg.Connection, embedder_factory: Callable[[], Embedder], skip_invalid: bool, progress: Callable[[int], None]) -> None:
        self.conn, self.embedder_factory, self.skip_invalid, self.progress = conn, embedder_factory, skip_invalid, progress
        self.report = ImportReport()
        # Where each line is, for "same provider and method as source:line": (source number, line) packed in an int.
        self.sources: list[str] = []
        self.source_number: dict[str, int] = {}
        self.seen: dict[bytes, int] = {}
        # Every line checked already (check_all passed, or save checks each batch first): the save's
        # first call of a batch does not judge it again.
        self.checked = skip_invalid

    def position(self, line: Line) -> int:
        number = self.source_number.setdefault(line.source, len(self.source_number))
        if number == len(self.sources):
            self.sources.append(line.source)
        return number << 32 | line.line

    def refusal(self, item: Line | Refusal, outcome: Outcome | Refusal | None) -> Refusal | None:
        """How the report names a refused line: the file format's refusal, or the write path's."""
        if isinstance(outcome, Refused) and outcome.same_as is not None:
            earlier = f"{self.sources[outcome.same_as >> 32]}:{outcome.same_as & 0xFFFFFFFF}"
            return Refusal(item.source, item.line, f"same provider and method as {earlier}")
        if isinstance(outcome, (Refused, Conflict)):
            return Refusal(item.source, item.line, outcome.reason)
        return outcome if isinstance(outcome, Refusal) else None

    def outcomes_of(self, batch: list[Line | Refusal], run) -> Iterator[tuple[Line | Refusal, Outcome | Refusal | None]]:
        """Each item of the batch with its outcome; run gets the changes and positions of its lines."""
        lines = [item for item in batch if isinstance(item, Line)]
        outcomes = iter(run([Change(line.record) for line in lines], [self.position(line) for line in lines]) if lines else [])
        for item in batch:
            yield item, item if isinstance(item, Refusal) else next(outcomes)

    def check(self, changes: list[Change], positions: list[int]) -> list[Refused | Conflict | None]:
        return check_changes(self.conn, changes, seen=self.seen, positions=positions)

    def save(self, changes: list[Change], positions: list[int]) -> list[Outcome | None]:
        """The batch saved, all or nothing; with skip_invalid, checked first (a record named in an
        earlier batch too is refused) and its other lines saved."""
        outcomes: list[Outcome | None] = list(self.check(changes, positions)) if self.skip_invalid else [None] * len(changes)
        valid = [i for i, outcome in enumerate(outcomes) if outcome is None]
        saved = save_changes(
            self.conn,
            self.embedder_factory,
            [changes[i] for i in valid],
            all_or_nothing=not self.skip_invalid,
            checked=self.checked,
            progress=self.progress,
        )
        for i, outcome in zip(valid, saved):
            if isinstance(outcome, Refused) and outcome.same_as is not None:
                # A change of the same record as another of the batch: named by that one's position.
                outcome = replace(outcome, same_as=positions[valid[outcome.same_as]])
            outcomes[i] = outcome
        return outcomes

    def check_all(self, batches: Iterable[list[Line | Refusal]]) -> bool:
        """The first pass: checks every line, embedding and saving nothing; whether all passed
        (else the report names the refused lines and how many would have been imported)."""
        valid = 0
        for batch in batches:
            for item, outcome in self.outcomes_of(batch, self.check):
                if refused_line := self.refusal(item, outcome):
                    self.report.refused.append(refused_line)
                else:
                    valid += 1
        if self.report.refused:
            self.report.not_imported = valid
            return False
        self.seen.clear()  # every line was checked; the save checks none again
        self.checked = True
        return True

    def save_all(self, batches: Iterable[list[Line | Refusal]]) -> ImportReport:
        """The save: each batch embedded, then saved in a transaction of its own (with
        skip_invalid, checked first, and its refused lines left out)."""
        report, saved_a_batch = self.report, False
        for batch in batches:
            try:
                outcomes = list(self.outcomes_of(batch, self.save))
            except (EmbeddingUnavailable, RegistryModelMismatch, TransientFailure, psycopg.Error) as error:
                if saved_a_batch:
                    raise ImportInterrupted(report, error) from error
                raise
            refused = [r for item, outcome in outcomes if (r := self.refusal(item, outcome))]
            for _, outcome in outcomes:
                if isinstance(outcome, Saved):
                    report.created += outcome.outcome == "created"
                    report.updated += outcome.outcome == "updated"
                    report.unchanged += outcome.outcome == "unchanged"
            report.refused += refused
            if refused and not self.skip_invalid:
                # Refused at the save (a file of one batch is judged there; a longer one passed its
                # check, so another writer changed something meanwhile).
                if saved_a_batch:
                    raise ImportInterrupted(report, "; ".join(str(r) for r in refused))
                report.not_imported = sum(outcome is None for _, outcome in outcomes)
                return report
            saved_a_batch = True
        report.saved = True
        return report


def export_records(conn: psycopg.Connection) -> Iterable[str]:
    """Every record as a JSON line, in a stable order; `import` reads this back unchanged."""
    cursor = conn.cursor(row_factory=dict_row)
    cursor.execute(
        """
        select provider, method, urls, docs_url, guidance, enabled, mixed_scripts
        from payrail.provider_methods
        order by payrail._normalize_name(provider), payrail._normalize_name(method)
        """
    )
    for row in cursor:
        yield json_text(record_of(row).to_json())
