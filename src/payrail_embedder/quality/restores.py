"""A restore shown before it is made, as an edit's Save is: what it changes field by field, and
what it changes in the golden queries' top threes, measured exactly as an edit's preview is
(golden_rankings.measured_edit: the restore saved for real in a transaction, measured, rolled
back). The faces then save the same change (history.Restoring.change, which expects the version
that was stored when it was measured, so a save meanwhile makes it a Conflict) with the vector
the preview made, or nothing."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import psycopg

from ..base.reports import Report
from ..embedders import Embedder
from ..registry import history
from ..registry.changes import Embedding, Outcome, Saved
from .golden_answers import Effect
from .golden_rankings import measured_edit


@dataclass(frozen=True)
class RestorePreview(Report):
    """A restore measured before it is made: the restore, the effect its save would have, what the
    save answered in the preview's transaction (a refusal or conflict: then it cannot be made),
    and the vector made for it, which the restore reuses."""

    restoring: history.Restoring
    effect: Effect
    outcome: Outcome
    embedding: Embedding | None

    @property
    def label(self) -> str:
        return self.restoring.label

    @property
    def changes_nothing(self) -> bool:
        """The version holds what the record holds now: there is nothing to restore."""
        return isinstance(self.outcome, Saved) and self.outcome.outcome == "unchanged"

    def to_json(self) -> dict:
        entry, current = self.restoring.entry, self.restoring.current
        return {
            "historyId": entry["id"],
            "recordId": entry["provider_method_id"],
            "version": entry["version"],
            "currentVersion": current["version"] if current is not None else None,
            "deletedSince": current is None,
            "fields": [{"field": change.name, "before": change.before, "after": change.after} for change in self.restoring.fields],
            "effect": self.effect.to_json(),
        }

    def describe(self) -> list[str]:
        entry, current = self.restoring.entry, self.restoring.current
        restored = self.restoring.restored
        name = f'"{restored.provider} / {restored.method}"'
        if current is None:
            lines = [
                f"Record {entry['provider_method_id']} was deleted since: restoring {self.label} (history entry {entry['id']}) "
                f"brings {name} back as a new record, a draft."
            ]
        elif self.changes_nothing:
            return [f"Nothing to restore: {self.label} (history entry {entry['id']}) holds the same fields as the current version {current['version']}."]
        else:
            state = "enabled" if current["enabled"] else "a draft"
            lines = [
                f'Restoring {self.label} (history entry {entry["id"]}) into "{current["provider"]} / {current["method"]}" '
                f"(record {current['id']}, version {current['version']}, {state}) changes:"
            ]
            for change in self.restoring.fields:
                if change.lines:
                    lines.append(f"  {change.label}:")
                    lines += [f"    {'-' if kind == 'removed' else '+'} {line}" for kind, line in change.lines]
                else:
                    lines.append(f"  {change.label}: {change.before or 'none'} -> {change.after or 'none'}")
        return [*lines, *self.effect.describe()]


def preview_restore(
    conn: psycopg.Connection,
    embedder_factory: Callable[[], Embedder],
    history_id: int,
    *,
    as_draft: bool = False,
    record_id: int | None = None,
    expected_version: int | None = None,
) -> RestorePreview | None:
    """What restoring the history entry would change (history.restoring's arguments), measured as
    an edit's preview is; nothing is saved. None when there is no such entry (of record_id)."""
    restoring = history.restoring(conn, history_id, as_draft=as_draft, record_id=record_id, expected_version=expected_version)
    if restoring is None:
        return None
    preview = measured_edit(conn, embedder_factory, restoring.change)
    return RestorePreview(restoring, preview.effect, preview.outcome, preview.embedding)


@dataclass(frozen=True)
class Restored(Report):
    """`restore`'s answer: the restore as it was shown, and what its save did (None: the operator
    chose not to restore it)."""

    preview: RestorePreview
    saved: history.SavedRecord | None

    def to_json(self) -> dict:
        return {"preview": self.preview.to_json(), "restored": self.saved is not None, **(self.saved.to_json() if self.saved else {})}

    def describe(self) -> list[str]:
        return self.saved.describe() if self.saved is not None else ["nothing restored"]
