"""Provider-method records as JSON Lines: the format `import` reads and `export` writes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

FIELDS = ("provider", "method", "urls", "docsUrl", "guidance", "enabled")
REQUIRED = ("provider", "method", "guidance")


@dataclass(frozen=True)
class ProviderMethod:
    provider: str
    method: str
    urls: list[str]
    docs_url: str | None
    guidance: str
    # None: keep an existing record's state; a new record starts disabled.
    enabled: bool | None = None

    def to_json(self) -> dict:
        return {
            "provider": self.provider,
            "method": self.method,
            "urls": list(self.urls),
            "docsUrl": self.docs_url,
            "guidance": self.guidance,
            "enabled": self.enabled,
        }


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
    for name, value in [*((name, data[name]) for name in REQUIRED), *(("urls", url) for url in urls), ("docsUrl", docs_url)]:
        if value is not None:
            _check_storable(name, value)
    return ProviderMethod(data["provider"], data["method"], urls, docs_url, data["guidance"], enabled)


def _check_storable(name: str, value: str) -> None:
    """JSON's \\u escapes spell what PostgreSQL text cannot hold: NUL, and lone surrogates (not Unicode).

    Refused here, with the line's number, rather than failing the whole import in the driver.
    """
    if "\x00" in value:
        raise ValueError(f"{name} contains the NUL character (\\u0000), which PostgreSQL text cannot hold")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as error:
        raise ValueError(
            f"{name} contains a lone surrogate (\\u{ord(value[error.start]):04x}), which is not a Unicode character"
        ) from None


def read_lines(path: Path) -> Iterator[Line | Refusal]:
    """Each non-blank line of a JSON Lines file as a record, or as a refusal saying why not."""
    source = str(path)
    with path.open("rb") as file:
        for number, raw in enumerate(file, start=1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                yield Refusal(source, number, f"not valid UTF-8 (byte {error.start + 1} of the line)")
                continue
            if not text.strip():
                continue
            try:
                yield Line(source, number, parse_record(json.loads(text)))
            except json.JSONDecodeError as error:
                yield Refusal(source, number, f"malformed JSON: {error.msg} at column {error.colno}")
            except ValueError as error:
                yield Refusal(source, number, str(error))
            except RecursionError:
                yield Refusal(source, number, "malformed JSON: nested too deeply")
