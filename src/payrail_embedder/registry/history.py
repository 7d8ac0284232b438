"""Earlier versions of a provider method (payrail.provider_method_history), who saved each, what
differs between two versions, and the change that restores one (quality.restores previews and saves
it), for operators (the CLI and the backoffice)."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass, replace

import psycopg
from psycopg.rows import dict_row

from ..base.reports import Report
from ..base.safe_text import escape_controls
from . import stored, undo
from .changes import Change, Saved
from .records import FIELD_LABELS, ProviderMethod
from .sources import SourceCount, registry_sources

UNKNOWN_AUTHOR = "unknown"


def author(saved_by: str | None, older: Mapping | None) -> str:
    """Who saved a version: as the registry recorded it (saved_by), else, for a version saved
    before it did, who replaced the version before it (the older history entry of the same
    record), else unknown."""
    return saved_by or (older["changed_by"] if older is not None else None) or UNKNOWN_AUTHOR


def _older_entries(versions: list[dict]) -> list[dict | None]:
    """For each history row (newest first), the next older row of the same record, or None."""
    return [next((o for o in versions[i + 1 :] if o["provider_method_id"] == v["provider_method_id"]), None) for i, v in enumerate(versions)]


@dataclass(frozen=True)
class ListedRecords(Report):
    """`list`: records by provider and method, each with its state, version, and when and by whom saved."""

    records: list[dict]

    def to_json(self) -> dict:
        return {"records": self.records}

    def describe(self) -> list[str]:
        lines = [
            f"{record['provider']} / {record['method']}  ({record['state']}, version {record['version']}, "
            f"from {record['source']}, saved {record['savedAt']} by {escape_controls(record['savedBy'])})"
            for record in self.records
        ]
        return [*lines, f"{len(self.records)} record{'' if len(self.records) == 1 else 's'}"]


@dataclass(frozen=True)
class ListedSources(Report):
    """`list --sources`: where the records came from, each source with its records and enabled ones."""

    sources: list[SourceCount]

    def to_json(self) -> dict:
        return {"sources": [{"source": s.source, "records": s.records, "enabled": s.enabled} for s in self.sources]}

    def describe(self) -> list[str]:
        lines = [f"{s.source}  ({s.records:,} record{'' if s.records == 1 else 's'}, {s.enabled:,} enabled)" for s in self.sources]
        return [*lines, f"{len(self.sources)} source{'' if len(self.sources) == 1 else 's'}"]


def listed_sources(conn: psycopg.Connection) -> ListedSources:
    """Every source of the registry's records (sources.registry_sources), as `list --sources` shows them."""
    return ListedSources(registry_sources(conn))


def listed_records(conn: psycopg.Connection, text: str, state: str | None, source: str | None = None) -> ListedRecords:
    """The records list's first page (stored.list_records: its filters), as `list` shows it."""
    return ListedRecords(
        [
            {
                "recordId": row["id"],
                "provider": row["provider"],
                "method": row["method"],
                "state": row["state"],
                "version": row["version"],
                "source": row["source"],
                "savedAt": row["updated_at"].isoformat(),
                "savedBy": author(row["saved_by"], None),
            }
            for row in stored.list_records(conn, text, state, source).rows
        ]
    )


@dataclass(frozen=True)
class RecordHistory(Report):
    """`history`: the record now named provider / method, or None, and the earlier versions of
    every record so named, newest first (each a dict of the JSON's names)."""

    provider: str
    method: str
    record: dict | None
    versions: list[dict]

    def to_json(self) -> dict:
        return {"record": self.record, "history": self.versions}

    def describe(self) -> list[str]:
        record = self.record
        if record is None:
            lines = [f"{self.provider} / {self.method}: no such record now (deleted or renamed)"]
        else:
            state = ("enabled" if record["enabled"] else "draft") + (", embedded" if record["embedded"] else ", no vector")
            lines = [
                f"{record['provider']} / {record['method']}: record {record['recordId']}, version {record['version']}, "
                f"{state}, from {record['source']}, saved {record['savedAt']} by {escape_controls(record['savedBy'])}"
            ]
        if record is not None and record.get("bulkAction"):
            lines.append(f"  saved in {record['bulkAction']['inWords']}")
        for version in self.versions:
            # Role names are the database's to allow: any character but NUL.
            saved_by, changed_by, session_user = (escape_controls(version[key]) for key in ("savedBy", "changedBy", "changedBySessionUser"))
            in_bulk = f", in {version['bulkAction']['inWords']}" if version["bulkAction"] else ""
            lines += [
                f"\nhistory {version['historyId']}: version {version['version']} of record {version['recordId']}, saved "
                f"{version['savedAt']} by {saved_by}; {version['operation']}d {version['changedAt']} by "
                f"{changed_by} (session {session_user}){in_bulk}",
                f"  {version['provider']} / {version['method']} ({'enabled' if version['enabled'] else 'draft'}, from {version['source']})",
                f"  docs: {version['docsUrl'] or '-'}",
                *(f"  url:  {url}" for url in version["urls"]),
                *(f"  {line}" for line in version["guidance"].split("\n")),
            ]
        if self.versions:
            lines.append("\nrestore one with: payrail-embedder restore HISTORY_ID   (--as-draft: as a draft)")
        return lines


def provider_method_history(conn: psycopg.Connection, provider: str, method: str) -> RecordHistory:
    """The record now named provider / method (None if there is none) and its earlier versions, newest first.

    Versions of records once so named (renamed or deleted since) are included; see
    payrail.get_provider_method_history.
    """
    cursor = conn.cursor(row_factory=dict_row)
    current = cursor.execute(
        f"""
        select {stored.RECORD_COLUMNS} from {stored.RECORDS} as pm
        where payrail._normalize_name(pm.provider) = payrail._normalize_name(%s)
          and payrail._normalize_name(pm.method) = payrail._normalize_name(%s)
        """,
        (provider, method),
    ).fetchone()
    versions = cursor.execute("select * from payrail.get_provider_method_history(%s, %s)", (provider, method)).fetchall()
    changes = undo.changes_of(conn, {v["provider_method_id"] for v in versions} | ({current["id"]} if current else set()))
    # The bulk action that saved a version (by the version it left) and the one that replaced it (by the version it found).
    saved_in = {(c.record_id, c.version_after): c.action for c in changes}
    replaced_in = {(c.record_id, c.version_before): c.action for c in changes}
    record = None
    if current:
        newest = next((v for v in versions if v["provider_method_id"] == current["id"]), None)
        record = stored.as_json(current) | {
            "savedBy": author(current["saved_by"], newest),
            "bulkAction": _bulk_json(saved_in.get((current["id"], current["version"]))),
        }
    return RecordHistory(
        provider,
        method,
        record,
        [
            {
                "historyId": v["id"],
                "recordId": v["provider_method_id"],
                "operation": v["operation"],
                "changedAt": v["changed_at"].isoformat(),
                "changedBy": v["changed_by"],
                "changedBySessionUser": v["changed_by_session_user"],
                "version": v["version"],
                "savedAt": v["version_saved_at"].isoformat(),
                "savedBy": author(v["version_saved_by"], older),
                "bulkAction": _bulk_json(replaced_in.get((v["provider_method_id"], v["version"]))),
                **stored.record_of(v).to_json(),
            }
            for v, older in zip(versions, _older_entries(versions), strict=True)
        ],
    )


def _bulk_json(action: undo.BulkAction | None) -> dict | None:
    """A bulk action as the history's JSON names it, with its words; None for none."""
    return action.to_json() | {"inWords": action.in_words()} if action else None


def record_history(conn: psycopg.Connection, record_id: int) -> list[dict]:
    """The earlier versions of one record (rows of payrail.provider_method_history), newest first."""
    return (
        conn.cursor(row_factory=dict_row)
        .execute(
            "select * from payrail.provider_method_history where provider_method_id = %s order by id desc",
            (record_id,),
        )
        .fetchall()
    )


def history_entry(conn: psycopg.Connection, history_id: int) -> dict | None:
    """One history row by its id, or None."""
    return conn.cursor(row_factory=dict_row).execute("select * from payrail.provider_method_history where id = %s", (history_id,)).fetchone()


@dataclass(frozen=True)
class Restoring:
    """A restore of a history entry, as the write path takes it: the entry, the record as it is
    stored now (None: deleted since), and the change that brings the entry's fields back."""

    entry: dict
    current: dict | None
    change: Change

    @property
    def label(self) -> str:
        """The version restored, in words (an entry kept before versions were numbered has none)."""
        version = self.entry["version"]
        return f"version {version}" if version is not None else f"history entry {self.entry['id']}"

    @property
    def fields(self) -> tuple[FieldChange, ...]:
        """What the restore changes, field by field (none for a deleted record: it comes back whole)."""
        return changes(stored.record_of(self.current), self.restored) if self.current is not None else ()

    @property
    def restored(self) -> ProviderMethod:
        """The record as the restore leaves it: the entry's fields, in the state it keeps or gets."""
        kept = self.current["enabled"] if self.current is not None else False
        return replace(self.change.record, enabled=kept if self.change.record.enabled is None else self.change.record.enabled)


def restoring(
    conn: psycopg.Connection, history_id: int, *, as_draft: bool = False, record_id: int | None = None, expected_version: int | None = None
) -> Restoring | None:
    """The restore of a history entry (None when there is none, of record_id if given), saved
    through the write path by the caller.

    The record keeps its enabled state (a draft with as_draft), so other content restored into
    an enabled record is embedded first; a deleted record comes back as a new draft.
    expected_version: the version the caller showed (a Conflict if it moved); None: the version
    stored now, so the save is the restore that was read, or a Conflict.
    """
    entry = history_entry(conn, history_id)
    if entry is None or (record_id is not None and entry["provider_method_id"] != record_id):
        return None
    current = stored.get(conn, entry["provider_method_id"])
    record = replace(stored.record_of(entry), enabled=False if as_draft or current is None else None)
    if current is None:
        return Restoring(entry, None, Change(record, None, 0))
    version = current["version"] if expected_version is None else expected_version
    return Restoring(entry, current, Change(record, entry["provider_method_id"], version))


@dataclass(frozen=True)
class FieldChange:
    """What differs in one field between two versions of a record, as the history shows it."""

    # The field's JSON name, and its label on the record form.
    name: str
    label: str
    before: str
    after: str
    # For multi-line text: the lines removed and added, in order, as ("removed" | "added", line).
    lines: tuple[tuple[str, str], ...] = ()


def _shown(record: ProviderMethod, name: str) -> str:
    if name == "urls":
        return "\n".join(record.urls)
    if name == "enabled":
        return "enabled" if record.enabled else "draft"
    if name == "mixedScripts":
        return "yes" if record.mixed_scripts else "no"
    if name == "source":
        return record.source or ""
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
        found.append(FieldChange(name, label, old, new, lines))
    return tuple(found)


@dataclass(frozen=True)
class SavedRecord(Report):
    """What a save through the write path did to one record (edit, restore), and the record as it is stored now."""

    saved: Saved
    # stored.get's row of the record.
    record: dict
    # The record a restore meant to bring back, deleted since: the save made a new one.
    deleted_since: int | None = None

    def to_json(self) -> dict:
        return {"outcome": self.saved.outcome, "embeddedNow": self.saved.embedded, **stored.as_json(self.record)}

    def describe(self) -> list[str]:
        saved, record = self.saved, self.record
        lines = [] if self.deleted_since is None else [f"record {self.deleted_since} was deleted since: restored as a new record, a draft until enabled"]
        vector = "embedded now" if saved.embedded else ("vector kept" if record["embedded"] else "no vector")
        lines.append(
            f'{saved.outcome} "{record["provider"]} / {record["method"]}": record {saved.record_id}, '
            f"version {saved.version}, {'enabled' if record['enabled'] else 'draft'}, {vector}"
        )
        return lines
