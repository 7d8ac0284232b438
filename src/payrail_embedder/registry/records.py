"""Provider-method records as JSON Lines: the format `import` reads and `export` writes."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import BinaryIO

import idna

from ..base.input_files import LineLimit, NumberedLine, UnreadableLine, json_lines, open_input

FIELDS = ("provider", "method", "urls", "docsUrl", "guidance", "enabled", "mixedScripts", "source")
REQUIRED = ("provider", "method", "guidance")
# The JSON name of each column of payrail.provider_methods that a record carries.
JSON_NAME_OF_COLUMN = {
    "provider": "provider",
    "method": "method",
    "urls": "urls",
    "docs_url": "docsUrl",
    "guidance": "guidance",
    "enabled": "enabled",
    "mixed_scripts": "mixedScripts",
    "source": "source",
}
# Each field's name for people, by JSON name: the backoffice form's labels (the accessible names
# DESIGN.md fixes), and how `edit` and the refusals name fields.
FIELD_LABELS = {
    "provider": "Provider",
    "method": "Method",
    "urls": "URLs",
    "docsUrl": "Docs URL",
    "guidance": "Guidance",
    "enabled": "Enabled",
    "mixedScripts": "Mixed scripts",
    "source": "Source",
}


# The longest line a record can take, whoever wrote it: the most characters its fields may hold
# (provider and method 120 each, 10 URLs of 2,048, docsUrl 2,048, guidance 8,000, source 255:
# 31,023, counted as PostgreSQL counts them, in code points), each written at its longest in JSON,
# 12 bytes (a character outside the Basic Multilingual Plane as an escaped surrogate pair,
# "\ud83d\ude00"; UTF-8 takes at most 4 bytes, a \u escape 6), and 4,096 bytes for the keys
# (escaped too), the punctuation and white space between them: 376,372 bytes. Names are stored trimmed and in NFC,
# so a valid name may be typed longer than 120 characters; the bound leaves it 1,440 bytes.
RECORD_CHARACTERS = 2 * 120 + 10 * 2_048 + 2_048 + 8_000 + 255
RECORD_LINE = LineLimit(12 * RECORD_CHARACTERS + 4_096, "more than any record can take (docs/operators.md, Catalog files)")


def lines_of(text: str) -> list[str]:
    """text's lines, each with its newline: split at "\n" alone (str.splitlines also splits at
    U+2028, U+0085, VT, ...), as JSON and the catalog format count lines."""
    return [line for line in re.split(r"(?<=\n)", text) if line]


@dataclass(frozen=True)
class ProviderMethod:
    provider: str
    method: str
    urls: list[str]
    docs_url: str | None
    guidance: str
    # None: keep an existing record's state; a new record starts disabled.
    enabled: bool | None = None
    # The operator's word that provider and method mix scripts on purpose (payrail's
    # provider_methods_scripts_check). None: keep an existing record's; a new record has it not.
    mixed_scripts: bool | None = None
    # Where the record came from (payrail's provider_methods.source): an import's file name,
    # "backoffice", "edit". None: keep an existing record's; a new record's is then "psql".
    source: str | None = None

    def to_json(self) -> dict:
        """The catalog line's fields; mixedScripts only where it is said (true), so the lines of
        every other record read as they always have; source where it is known (a stored record's)."""
        return (
            {
                "provider": self.provider,
                "method": self.method,
                "urls": list(self.urls),
                "docsUrl": self.docs_url,
                "guidance": self.guidance,
                "enabled": self.enabled,
            }
            | ({"mixedScripts": True} if self.mixed_scripts else {})
            | ({"source": self.source} if self.source is not None else {})
        )


# What a new record starts as, in the editor and the backoffice's form: a draft with guidance's three headings.
NEW_RECORD = ProviderMethod(
    provider="",
    method="",
    urls=[],
    docs_url=None,
    guidance="Purpose: \nInstructions: \nNotes: ",
    enabled=False,
)


@dataclass(frozen=True)
class Refusal:
    source: str
    line: int
    reason: str

    def __str__(self) -> str:
        return f"{self.source}:{self.line}: {self.reason}"


@dataclass(frozen=True)
class Line:
    source: str
    line: int
    record: ProviderMethod
    # The source a new record of this line gets when the line names none (its file's name); an
    # existing record keeps its own.
    new_source: str | None = None


def parse_record(data: object) -> ProviderMethod:
    """Checks the JSON shape; the field rules themselves are the database's (named constraints)."""
    if not isinstance(data, dict):
        raise ValueError("a line must be a JSON object")
    unknown = sorted(set(data) - set(FIELDS))
    if unknown:
        raise ValueError(f"unknown field(s) {', '.join(unknown)}; fields are {', '.join(FIELDS)}")
    missing = [name for name in REQUIRED if name not in data]
    if missing:
        raise ValueError(f"missing field(s) {', '.join(missing)}")
    for name in REQUIRED:
        if not isinstance(data[name], str):
            raise ValueError(f"{name} must be a string")
    urls = data.get("urls", [])
    if not isinstance(urls, list) or not all(isinstance(url, str) for url in urls):
        raise ValueError("urls must be an array of strings")
    docs_url = data.get("docsUrl")
    if docs_url is not None and not isinstance(docs_url, str):
        raise ValueError("docsUrl must be a string or null")
    enabled = data.get("enabled")
    if enabled is not None and not isinstance(enabled, bool):
        raise ValueError("enabled must be true or false")
    mixed_scripts = data.get("mixedScripts")
    if mixed_scripts is not None and not isinstance(mixed_scripts, bool):
        raise ValueError("mixedScripts must be true or false")
    source = data.get("source")
    if source is not None and not isinstance(source, str):
        raise ValueError("source must be a string or null")
    record = ProviderMethod(data["provider"], data["method"], urls, docs_url, data["guidance"], enabled, mixed_scripts, source)
    problems = unstorable_fields(record)
    if problems:
        raise ValueError(problems[0][1])
    return record


def unstorable_fields(record: ProviderMethod) -> list[tuple[str, str]]:
    """(JSON field name, reason) for each value PostgreSQL text cannot hold: NUL, and lone surrogates.

    JSON's \\u escapes and Python strings can spell both; refused here, naming the field, rather
    than failing a whole import in the driver.
    """
    values: list[tuple[str, str | None]] = [("provider", record.provider), ("method", record.method), ("guidance", record.guidance)]
    values += [("urls", url) for url in record.urls] + [("docsUrl", record.docs_url), ("source", record.source)]
    problems = []
    for name, value in values:
        if value is None:
            continue
        if "\x00" in value:
            problems.append((name, f"{name} contains the NUL character (\\u0000), which PostgreSQL text cannot hold"))
            continue
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as error:
            problems.append((name, f"{name} contains a lone surrogate (\\u{ord(value[error.start]):04x}), which is not a Unicode character"))
    return problems


# An https URL's host, after the scheme and before the port, path, query or fragment; user info
# (refused by the database) keeps the URL from matching.
URL_HOST = re.compile(r"^(https://)([^/?#@:\[\]]+)(.*)$", re.IGNORECASE | re.DOTALL)


def ascii_host_url(url: str) -> str:
    """url with an internationalized host in its ASCII form (IDNA, UTS #46: bücher.example is
    xn--bcher-kva.example), as the registry stores, shows and compares hosts. A host IDNA refuses
    is left as written, for the database's ASCII-host rule to refuse in words."""
    match = URL_HOST.match(url)
    if match is None or match.group(2).isascii():
        return url
    try:
        host = idna.encode(match.group(2), uts46=True).decode("ascii")
    except idna.IDNAError:
        return url
    return match.group(1) + host + match.group(3)


def with_ascii_hosts(record: ProviderMethod) -> ProviderMethod:
    """The record with every URL's host in its ASCII form (ascii_host_url)."""
    return replace(
        record,
        urls=[ascii_host_url(url) for url in record.urls],
        docs_url=None if record.docs_url is None else ascii_host_url(record.docs_url),
    )


def refuse_duplicate_keys(pairs: list[tuple[str, object]]) -> dict:
    """json.loads keeps the last of two equal keys; a catalog line that says two things is refused."""
    seen = set()
    for key, _ in pairs:
        if key in seen:
            raise ValueError(f"field {key!r} appears twice in the line")
        seen.add(key)
    return dict(pairs)


def read_lines(path: Path | str) -> Iterator[Line | Refusal]:
    """Each non-blank line of a catalog file as a record, or as a refusal saying why not (path:
    any input open_input takes, "-" included)."""
    with open_input(path, line_limit=RECORD_LINE) as opened:
        yield from parse_lines(opened.lines(), opened.source)


def catalog_lines(file: BinaryIO, source: str) -> Iterator[Line | Refusal]:
    """read_lines of a file already open (an upload's bytes in io.BytesIO), named source in refusals."""
    return parse_lines(json_lines(file, RECORD_LINE), source)


def parse_lines(lines: Iterable[NumberedLine | UnreadableLine], source: str) -> Iterator[Line | Refusal]:
    """Each line (input_files.json_lines) as a record or a refusal."""
    for line in lines:
        if isinstance(line, UnreadableLine):
            yield Refusal(source, line.number, line.problem)
            continue
        try:
            yield Line(source, line.number, parse_record(json.loads(line.text, object_pairs_hook=refuse_duplicate_keys)))
        except json.JSONDecodeError as error:
            yield Refusal(source, line.number, f"malformed JSON: {error.msg} at column {error.colno}")
        except ValueError as error:
            yield Refusal(source, line.number, str(error))
        except RecursionError:
            yield Refusal(source, line.number, "malformed JSON: nested too deeply")
