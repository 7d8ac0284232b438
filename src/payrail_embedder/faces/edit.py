"""`payrail-embedder edit`: one record in $EDITOR, saved through the write path.

The text is written to be edited by hand, as a commit message or a `kubectl edit` manifest is:
help lines starting with # on top, then one header line per field ("Provider: ...", "URL: ..."
once per URL), a blank line, and the guidance as it reads, line breaks and all:

    # payrail-embedder edit: "Acme Maps / Geocode an address" (record 3, version 2, enabled).
    # ...
    Provider: Acme Maps
    Method: Geocode an address
    URL: https://api.acme.example/v1/geocode
    Docs URL: https://docs.acme.example/geocode
    Enabled: yes
    Source: acme.jsonl

    Purpose: turn an address into coordinates.
    Notes: paid per call.

A refusal, a conflict with someone else's save, or a failing embedding service opens the editor
again with the reason and the help on top and the operator's text kept, so nothing typed is lost.
Leaving the editor without saving after such a reopen is a failure (LeftUnsaved), so scripts can tell.

Before it saves, an edit's effect on the golden queries is measured (golden_rankings.measured_edit:
saved in a transaction, measured, rolled back; the save then reuses its vector): confirm sees it,
and answers to save it, edit it again (the editor reopens with the effect on top) or leave it unsaved.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import replace

import click
import psycopg

from ..base.errors import CodedError
from ..embedders import Embedder, EmbeddingUnavailable
from ..quality.golden_rankings import Effect, measured_edit
from ..registry import sources, stored
from ..registry.changes import Change, Conflict, Outcome, Refused, Saved
from ..registry.records import NEW_RECORD, ProviderMethod, lines_of
from ..registry.search import SearchError
from ..registry.write import save_change

COMMENT = "#"
# Header names, as the editor shows them; "URL" comes once per URL.
PROVIDER, METHOD, URL, DOCS_URL, ENABLED = "Provider", "Method", "URL", "Docs URL", "Enabled"
# Shown only where the record has it: the operator's word that its names mix scripts on purpose.
MIXED_SCRIPTS = "Mixed scripts"
# Where the record came from: kept as it is unless the operator changes it (left out: kept too).
SOURCE = "Source"
HEADER_NAMES = (PROVIDER, METHOD, URL, DOCS_URL, ENABLED, MIXED_SCRIPTS, SOURCE)
YES, NO = ("yes", "true"), ("no", "false")
# How a refusal names each field: by its header name.
HEADER_OF_FIELD = {
    "provider": PROVIDER,
    "method": METHOD,
    "urls": URL,
    "docsUrl": DOCS_URL,
    "guidance": "Guidance",
    "enabled": ENABLED,
    "mixedScripts": MIXED_SCRIPTS,
    "source": SOURCE,
}


class LeftUnsaved(CodedError):
    """The operator left the editor without saving after a refusal, a conflict or an outage."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(detail)
        self.code = code  # invalid_input (refused) or unavailable


class NoEditor(CodedError):
    """Neither $VISUAL nor $EDITOR names an editor, and none of FALLBACK_EDITORS is installed."""

    code = "misconfigured"


# Where neither $VISUAL nor $EDITOR names an editor: the ones git and most Unix tools fall back
# on, so an operator never lands in Debian's sensible-editor, which first asks them to choose one.
FALLBACK_EDITORS = ("vi", "nano")


def chosen_editor() -> str:
    """The editor `edit` opens: $VISUAL, else $EDITOR, else the first of FALLBACK_EDITORS on PATH."""
    for variable in ("VISUAL", "EDITOR"):
        if os.environ.get(variable, "").strip():
            return os.environ[variable]
    for name in FALLBACK_EDITORS:
        if shutil.which(name):
            return name
    raise NoEditor(f"no editor to open: set $EDITOR (for example: export EDITOR=nano); neither {' nor '.join(FALLBACK_EDITORS)} is installed")


def open_in_editor(text: str) -> str | None:
    """text in chosen_editor(), as a .txt file; the text saved, or None when it was left unsaved."""
    return click.edit(text, editor=chosen_editor(), extension=".txt", require_save=True)


def editable_text(record: ProviderMethod) -> str:
    """The record as the operator edits it (without the help lines)."""
    lines = [f"{PROVIDER}: {record.provider}", f"{METHOD}: {record.method}"]
    lines += [f"{URL}: {url}" for url in record.urls]
    lines += [f"{DOCS_URL}: {record.docs_url or ''}", f"{ENABLED}: {'yes' if record.enabled else 'no'}"]
    lines += [f"{MIXED_SCRIPTS}: yes"] if record.mixed_scripts else []
    lines += [f"{SOURCE}: {record.source}"] if record.source is not None else []
    return "\n".join(lines) + "\n\n" + record.guidance + "\n"


def commented(lines: list[str]) -> str:
    return "".join(f"{COMMENT} {line}\n" if line else f"{COMMENT}\n" for line in lines)


def split_help(text: str) -> tuple[str, str]:
    """(the help lines on top, the rest). Only the top is help: a guidance line may start with #.
    Lines end at newlines only (records.lines_of): U+2028 and the like are text."""
    lines = lines_of(text.replace("\r\n", "\n"))
    top = 0
    while top < len(lines) and lines[top].lstrip().startswith(COMMENT):
        top += 1
    return "".join(lines[:top]), "".join(lines[top:])


def parse_editor_text(text: str) -> ProviderMethod:
    """The record in the editor's text; ValueError saying what is wrong with it, and where."""
    help_lines, body = split_help(text)
    header_starts = body.lstrip("\n")  # blank lines between the help and the header are no part of it
    offset = help_lines.count("\n") + len(body) - len(header_starts)
    header, _, guidance = header_starts.partition("\n\n")
    fields: dict[str, str] = {}
    urls: list[str] = []
    by_lower = {name.lower(): name for name in HEADER_NAMES} | {"urls": URL}
    for number, line in enumerate(header.split("\n"), start=offset + 1):
        name, colon, value = line.partition(":")
        known = by_lower.get(name.strip().lower())
        if not colon or known is None:
            raise ValueError(
                f"line {number}: {line.strip()!r} is not a header line; the header is one line per field "
                f"({', '.join(f'{n}:' for n in HEADER_NAMES)}), then a blank line, then the guidance"
            )
        if known == URL:
            urls.append(value.strip())
        elif known in fields:
            raise ValueError(f"line {number}: {known} is given twice")
        else:
            fields[known] = value.strip()
    missing = [name for name in (PROVIDER, METHOD, ENABLED) if name not in fields]
    if missing:
        raise ValueError(f"the header has no {' and no '.join(missing)} line")
    yes = {name: _yes_or_no(name, fields[name]) for name in (ENABLED, MIXED_SCRIPTS) if name in fields}
    return ProviderMethod(
        provider=fields[PROVIDER],
        method=fields[METHOD],
        urls=[url for url in urls if url],
        docs_url=fields.get(DOCS_URL) or None,
        guidance=guidance.removesuffix("\n"),
        enabled=yes[ENABLED],
        # Left out: the record keeps its word (a new one has it not).
        mixed_scripts=yes.get(MIXED_SCRIPTS),
        # Left out: the record keeps its source (a new one's is the database's default).
        source=fields.get(SOURCE),
    )


def _yes_or_no(name: str, value: str) -> bool:
    if value.lower() not in YES + NO:
        raise ValueError(f'"{name}: {value}": write {name}: yes or {name}: no')
    return value.lower() in YES


def describe(row: dict | None) -> str:
    if row is None:
        return f"a new record (saved as a draft unless you write {ENABLED}: yes)"
    state = "enabled" if row["enabled"] else "draft"
    return f'"{row["provider"]} / {row["method"]}" (record {row["id"]}, version {row["version"]}, {state})'


def instructions(row: dict | None) -> list[str]:
    return [
        f"payrail-embedder edit: {describe(row)}.",
        "Save and close to apply; close without saving, or empty the file, to leave it as it is.",
        "Content changes are embedded before they are saved, and an enabled record stays enabled.",
        f"One header line per field ({URL}: once per URL, up to 10; {DOCS_URL}: empty for none;",
        f"{ENABLED}: yes or no; {MIXED_SCRIPTS}: yes for names that mix scripts on purpose;",
        f"{SOURCE}: where the record came from, a catalog's name, kept unless you change it),",
        "then a blank line, then the guidance as plain text to the end.",
        "Lines starting with # up here are ignored.",
    ]


# What confirm answers after seeing an edit's effect.
SAVE, EDIT_AGAIN, LEAVE = "save", "edit", "leave"


def edit_record(
    conn: psycopg.Connection,
    embedder_factory: Callable[[], Embedder],
    row: dict | None,
    *,
    open_editor: Callable[[str], str | None] = open_in_editor,
    confirm: Callable[[Effect], str] = lambda effect: SAVE,
) -> Saved | None:
    """Edits the stored record row (None: a new one) until it is saved, or the operator leaves
    without a change (None). Raises LeftUnsaved when they leave after a reopen that said why not.
    confirm sees what the edit changes for the golden queries before it is saved, and answers
    SAVE, EDIT_AGAIN or LEAVE (nothing saved: None)."""
    record_id, version = (row["id"], row["version"]) if row else (None, 0)
    body = editable_text(stored.record_of(row) if row else replace(NEW_RECORD, source=sources.EDIT))
    problem: list[str] = []
    left = None  # (code, why) of the last reopen: what leaving now fails with
    while True:
        edited = open_editor(commented(problem + ([""] if problem else []) + instructions(row)) + body)
        if edited is None or not split_help(edited)[1].strip():
            if left:
                raise LeftUnsaved(left[0], f"nothing saved: you left the editor after this: {left[1]}")
            return None
        body = split_help(edited)[1]
        try:
            change = Change(parse_editor_text(edited), record_id, version)
            preview = measured_edit(conn, embedder_factory, change)
            outcome: Outcome = preview.outcome
            if isinstance(outcome, Saved):  # saved in the preview's transaction, and rolled back
                answer = confirm(preview.effect)
                if answer == LEAVE:
                    return None
                if answer == EDIT_AGAIN:
                    left, problem = None, ["NOT SAVED YET: you chose to edit it again. Saving it would change this:", *preview.effect.describe()]
                    continue
                outcome = save_change(conn, embedder_factory, change, preview.embedding)
        except ValueError as error:
            left, problem = ("invalid_input", str(error)), [f"NOT SAVED: {error}"]
        except (EmbeddingUnavailable, SearchError) as error:
            why = f"the embedding service is unavailable: {error.detail}"
            left, problem = ("unavailable", why), [f"NOT SAVED: {why}", "Save again to retry."]
        else:
            if isinstance(outcome, Saved):
                return outcome
            if isinstance(outcome, Refused):
                left, problem = ("invalid_input", outcome.reason), refusal_notes(outcome)
            else:
                row = stored.get(conn, record_id) if record_id else None
                left, problem = ("unavailable", outcome.reason), conflict_notes(outcome, row)
                record_id, version = (row["id"], row["version"]) if row else (None, 0)


def refusal_notes(refused: Refused) -> list[str]:
    """One line per broken rule, each naming its field as the header does."""
    if not refused.rules:
        return [f"NOT SAVED: {refused.reason}"]
    count = len(refused.rules)
    return [
        f"NOT SAVED: {'a rule' if count == 1 else f'{count} rules'} refused it:",
        *(f"  {rule.describe(HEADER_OF_FIELD)}" for rule in refused.rules),
    ]


def conflict_notes(conflict: Conflict, current: dict | None) -> list[str]:
    """What the operator reads above their own text when someone else saved the record meanwhile."""
    if current is None:
        return [
            f"NOT SAVED: {conflict.reason}.",
            "It was deleted meanwhile: save again to create it anew with your text.",
        ]
    return [
        f"NOT SAVED: {conflict.reason}.",
        f"The record as saved now (version {current['version']}, {current['updated_at'].isoformat()}):",
        *("  " + line for line in editable_text(stored.record_of(current)).rstrip("\n").split("\n")),
        "Your text follows, unchanged: merge the two and save again to replace that version.",
    ]
