"""What the pages show, and what their forms mean: plain data and functions, no requests, no SQL."""

from __future__ import annotations

import difflib
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from ..registry.changes import Saved
from ..registry.history import author
from ..registry.records import FIELD_LABELS, ProviderMethod
from ..registry.stored import record_of
from ..registry.undo import BulkAction, BulkChange
from .sessions import duration


def _text(form: Mapping[str, object], name: str) -> str:
    # Browsers send a textarea's line breaks as CR LF; the registry keeps plain newlines.
    return str(form.get(name, "")).replace("\r\n", "\n")


# What the form's URL fields lose at their ends: spaces and tabs a person types around a URL. Not
# str.strip()'s Unicode white space: a URL holding a line separator (U+2028) is refused by the
# database, never silently cut.
TYPED_SPACE = " \t"


def record_from_form(form: Mapping[str, object]) -> ProviderMethod:
    """The record as the operator typed it: URLs one per line (blank lines ignored), an empty Docs
    URL is none, Enabled is the checkbox. Values are not judged here: the database does."""
    urls = lines(str(form.get("urls", "")))
    return ProviderMethod(
        provider=_text(form, "provider"),
        method=_text(form, "method"),
        urls=urls,
        docs_url=_text(form, "docsUrl").strip(TYPED_SPACE) or None,
        guidance=_text(form, "guidance"),
        enabled="enabled" in form,
        mixed_scripts="mixedScripts" in form,
    )


def form_digest(record: ProviderMethod, record_id: int | None, version: int) -> str:
    """What a previewed form held: its Save is the save the operator saw the effect of while the
    form still holds the same (the hidden field "previewed" carries it)."""
    form = json.dumps([record.to_json(), record.mixed_scripts, record_id, version], ensure_ascii=False, sort_keys=True)
    return hashlib.sha256(form.encode("utf-8", "surrogatepass")).hexdigest()


def lines(text: str) -> list[str]:
    """The lines of a textarea that hold something, without the spaces and tabs around them."""
    return [line.strip(TYPED_SPACE) for line in _text({"text": text}, "text").split("\n") if line.strip(TYPED_SPACE)]


def last_seen(idle_seconds: float) -> str:
    """When a session was last used, as the Sessions page says it."""
    return "just now" if idle_seconds < 60 else f"{duration(idle_seconds)} ago"


def record_name(record: ProviderMethod | Mapping) -> str:
    """How a record is linked and titled: Provider / Method."""
    if isinstance(record, ProviderMethod):
        return f"{record.provider} / {record.method}"
    return f"{record['provider']} / {record['method']}"


def _vector(saved: Saved) -> str:
    if saved.embedded:
        return "its content was embedded before it was saved"
    if saved.has_current_vector:
        return "its vector was kept"
    return "it has no vector yet (enabling it embeds it)"


def saved_message(saved: Saved, verb: str = "Saved") -> str:
    if saved.outcome == "unchanged":
        return "Nothing to save: the record already holds these values."
    state = "enabled" if saved.enabled else "a draft"
    return f'{verb} "{saved.provider} / {saved.method}" as version {saved.version}: {state}, {_vector(saved)}.'


def restored_anew_message(saved: Saved, label: str) -> str:
    """A restore of a record deleted since its history was opened: it came back as a new draft."""
    return (
        f'"{saved.provider} / {saved.method}" was deleted meanwhile: {label} is restored as a new record {saved.record_id}, a draft '
        f"(agents find it once it is enabled); {_vector(saved)}."
    )


@dataclass(frozen=True)
class FieldChange:
    label: str
    before: str
    after: str
    # For multi-line text: the lines removed and added, in order, as ("removed" | "added", line).
    lines: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Version:
    number: int | None  # None: an entry written before records had versions
    record: ProviderMethod
    saved_at: datetime
    # Who saved it (history.author: "unknown" for a first version saved before authors were kept).
    saved_by: str
    saved_by_session: str | None
    changes: tuple[FieldChange, ...]
    # The history entry that keeps this version; None for the current version.
    history_id: int | None
    # The bulk action that saved it, if one did.
    bulk_action: BulkAction | None = None


def _shown(record: ProviderMethod, name: str) -> str:
    if name == "urls":
        return "\n".join(record.urls)
    if name == "enabled":
        return "enabled" if record.enabled else "draft"
    if name == "mixedScripts":
        return "yes" if record.mixed_scripts else "no"
    return record.to_json().get(name) or ""


def differing(first: ProviderMethod, second: ProviderMethod) -> list[str]:
    """The fields (form names, in the form's order) whose values differ, as the page shows them."""
    return [name for name in FIELD_LABELS if _shown(first, name) != _shown(second, name)]


def changes(before: ProviderMethod, after: ProviderMethod) -> tuple[FieldChange, ...]:
    """What differs from before to after, field by field, in the form's order."""
    found = []
    for name in differing(before, after):
        label, old, new = FIELD_LABELS[name], _shown(before, name), _shown(after, name)
        lines: tuple[tuple[str, str], ...] = ()
        if name in ("guidance", "urls"):
            old_lines, new_lines = old.split("\n"), new.split("\n")
            matcher = difflib.SequenceMatcher(a=old_lines, b=new_lines, autojunk=False)
            lines = tuple(
                item
                for tag, i1, i2, j1, j2 in matcher.get_opcodes()
                if tag != "equal"
                for item in [("removed", line) for line in old_lines[i1:i2]] + [("added", line) for line in new_lines[j1:j2]]
            )
        found.append(FieldChange(label, old, new, lines))
    return tuple(found)


def versions(current: Mapping, history: Sequence[Mapping], bulk_changes: Sequence[BulkChange] = ()) -> list[Version]:
    """The record's versions newest first: the current one, then each one the history keeps.

    history: the record's history rows newest first. Each row keeps a version and says who
    replaced it, i.e. who saved the next newer version. bulk_changes: the bulk actions' part in
    the record (undo.changes_of), which name the versions they saved.
    """
    saved_in = {change.version_after: change.action for change in bulk_changes}
    rows = [current, *history]
    found = []
    for index, row in enumerate(rows):
        older = rows[index + 1] if index + 1 < len(rows) else None
        is_current = index == 0
        found.append(
            Version(
                number=row["version"],
                record=record_of(row),
                saved_at=row["updated_at"] if is_current else row["version_saved_at"],
                saved_by=author(row["saved_by"] if is_current else row["version_saved_by"], older),
                saved_by_session=older["changed_by_session_user"] if older else None,
                changes=changes(record_of(older), record_of(row)) if older else (),
                history_id=None if is_current else row["id"],
                bulk_action=saved_in.get(row["version"]),
            )
        )
    return found
