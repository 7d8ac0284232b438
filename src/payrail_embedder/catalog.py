"""Catalog files: import JSON Lines through the write path, export every record in the same format."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import psycopg
from psycopg.rows import dict_row

from .embedders import Embedder
from .records import Line, ProviderMethod, Refusal
from .write import Change, Conflict, Refused, Saved, check_changes, save_changes


@dataclass
class ImportReport:
    created: int = 0
    updated: int = 0
    unchanged: int = 0
    # Every refused line, in file order, whichever rule refused it.
    refused: list[Refusal] = field(default_factory=list)
    saved: bool = False

    def summary(self) -> str:
        """The report's last line, as `import` prints it."""
        outcome = "saved" if self.saved else "nothing saved"
        return (
            f"{self.created} created, {self.updated} updated, {self.unchanged} unchanged, "
            f"{len(self.refused)} refused: {outcome}"
        )

    def to_json(self) -> dict:
        return {
            "created": self.created,
            "updated": self.updated,
            "unchanged": self.unchanged,
            "refused": [{"source": r.source, "line": r.line, "reason": r.reason} for r in self.refused],
            "saved": self.saved,
        }


def import_records(
    conn: psycopg.Connection,
    embedder_factory: Callable[[], Embedder],
    items: Iterable[Line | Refusal],
    *,
    skip_invalid: bool = False,
    progress: Callable[[int], None] = lambda done: None,
) -> ImportReport:
    """Upserts records by (provider, method) through the write path (write.save_changes).

    Every line is checked against every rule before anything is embedded; one refused line
    saves nothing unless skip_invalid, which saves the others. conn must be in autocommit mode.
    """
    report = ImportReport()
    items = list(items)
    lines = [item for item in items if isinstance(item, Line)]
    changes = [Change(line.record) for line in lines]
    if skip_invalid or len(lines) == len(items):
        outcomes = (
            save_changes(conn, embedder_factory, changes, all_or_nothing=not skip_invalid, progress=progress) if lines else []
        )
    else:
        # A line the file format refuses already decides: check the others too, embed and save nothing.
        outcomes = check_changes(conn, changes)
    outcome_of_line = iter(outcomes)  # one per line, in file order
    for item in items:
        if isinstance(item, Refusal):
            report.refused.append(item)
            continue
        outcome = next(outcome_of_line)
        if isinstance(outcome, Saved):
            report.created += outcome.outcome == "created"
            report.updated += outcome.outcome == "updated"
            report.unchanged += outcome.outcome == "unchanged"
        elif isinstance(outcome, Refused) and outcome.same_as is not None:
            earlier = lines[outcome.same_as]
            report.refused.append(Refusal(item.source, item.line, f"same provider and method as {earlier.source}:{earlier.line}"))
        elif isinstance(outcome, (Refused, Conflict)):
            report.refused.append(Refusal(item.source, item.line, outcome.reason))
    report.saved = skip_invalid or not report.refused
    return report


def export_records(conn: psycopg.Connection) -> Iterable[str]:
    """Every record as a JSON line, in a stable order; `import` reads this back unchanged."""
    cursor = conn.cursor(row_factory=dict_row)
    cursor.execute(
        """
        select provider, method, urls, docs_url, guidance, enabled
        from payrail.provider_methods
        order by payrail._normalize_name(provider), payrail._normalize_name(method)
        """
    )
    for row in cursor:
        record = ProviderMethod(row["provider"], row["method"], row["urls"], row["docs_url"], row["guidance"], row["enabled"])
        yield json.dumps(record.to_json(), ensure_ascii=False)
