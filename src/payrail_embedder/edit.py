"""`payrail-embedder edit`: one record in $EDITOR as a pretty-printed catalog line, saved through the write path.

A refusal, a conflict with someone else's save, or a failing embedding service opens the editor
again with the message on top and the operator's text kept, so nothing typed is lost.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import click
import psycopg

from . import stored
from .embedders import Embedder, EmbeddingUnavailable
from .records import ProviderMethod, json_text, lines_of, parse_record, refuse_duplicate_keys
from .write import Change, Conflict, Refused, Saved, save_changes

COMMENT = "#"
NEW_RECORD = ProviderMethod(
    provider="",
    method="",
    urls=[],
    docs_url=None,
    guidance="Purpose: \nInstructions: \nNotes: ",
    enabled=False,
)


def editor_text(record: ProviderMethod, notes: list[str]) -> str:
    """The record as the operator edits it: comment lines, then the catalog line pretty-printed."""
    body = json_text(record.to_json(), indent=2)
    return "".join(f"{COMMENT} {line}\n" if line else f"{COMMENT}\n" for line in notes) + body + "\n"


def _is_comment(line: str) -> bool:
    # A JSON string cannot hold a raw newline, so no line of the record itself starts with "#".
    return line.lstrip().startswith(COMMENT)


def without_comments(text: str) -> str:
    return "".join(line for line in lines_of(text) if not _is_comment(line))


def parse_editor_text(text: str) -> ProviderMethod:
    """The record in the editor's text; ValueError saying what is wrong with it."""
    # Comment lines become blank lines, so a JSON error's line number is the editor's.
    blanked = "".join("\n" if _is_comment(line) else line for line in lines_of(text))
    try:
        data = json.loads(blanked, object_pairs_hook=refuse_duplicate_keys)
    except json.JSONDecodeError as error:
        raise ValueError(f"not valid JSON: {error.msg} at line {error.lineno}, column {error.colno}") from None
    record = parse_record(data)
    if record.enabled is None:
        raise ValueError('"enabled" must be true or false')
    return record


def describe(row: dict | None) -> str:
    if row is None:
        return "a new record (saved as a draft unless you set \"enabled\": true)"
    state = "enabled" if row["enabled"] else "draft"
    return f'"{row["provider"]} / {row["method"]}" (record {row["id"]}, version {row["version"]}, {state})'


def instructions(row: dict | None) -> list[str]:
    return [
        f"payrail-embedder edit: {describe(row)}.",
        "Save and close to apply; close without saving, or empty the file, to leave it as it is.",
        "Content changes are embedded before they are saved, and an enabled record stays enabled.",
        "Lines starting with # are ignored.",
    ]


def edit_record(
    conn: psycopg.Connection,
    embedder_factory: Callable[[], Embedder],
    row: dict | None,
    *,
    open_editor: Callable[[str], str | None] = lambda text: click.edit(text, extension=".json", require_save=True),
) -> Saved | None:
    """Edits the stored record row (None: a new one) until it is saved or the operator gives up (None)."""
    record_id, version = (row["id"], row["version"]) if row else (None, 0)
    text = editor_text(stored.record_of(row) if row else NEW_RECORD, instructions(row))
    while True:
        edited = open_editor(text)
        if edited is None or not without_comments(edited).strip():
            return None
        body = without_comments(edited)
        try:
            record = parse_editor_text(edited)
            outcome = save_changes(conn, embedder_factory, [Change(record, record_id, version)])[0]
        except ValueError as error:
            problem = [f"NOT SAVED: {error}"]
        except EmbeddingUnavailable as error:
            problem = [f"NOT SAVED: the embedding service is unavailable: {error}", "Save again to retry."]
        else:
            if isinstance(outcome, Saved):
                return outcome
            if isinstance(outcome, Refused):
                fields = f" ({', '.join(outcome.fields)})" if outcome.fields else ""
                problem = [f"NOT SAVED, refused{fields}: {outcome.reason}"]
            else:
                current = stored.get(conn, record_id) if record_id else None
                problem = conflict_notes(outcome, current)
                version = current["version"] if current else 0
                record_id = current["id"] if current else None
        text = "".join(f"{COMMENT} {line}\n" for line in problem) + f"{COMMENT}\n" + body


def conflict_notes(conflict: Conflict, current: dict | None) -> list[str]:
    """What the operator reads above their own text when someone else saved the record meanwhile."""
    if current is None:
        return [
            f"NOT SAVED: {conflict.reason}.",
            "It was deleted meanwhile: save again to create it anew with your text.",
        ]
    saved_now = json_text(stored.record_of(current).to_json(), indent=2).split("\n")
    return [
        f"NOT SAVED: {conflict.reason}.",
        f"The record as saved now (version {current['version']}, {current['updated_at'].isoformat()}):",
        *saved_now,
        "Your text follows, unchanged: merge the two and save again to replace that version.",
    ]
