"""Operators' logs: one line per event on standard error, with a level and stable keys.

    ts=2026-05-04T09:12:33.120Z level=info event=sign_in role=alice outcome=success

logfmt by default; with `--log-format json` (PAYRAIL_LOG_FORMAT=json) one JSON object per line
with the same keys. The package's processes (the CLI, hence the MCP server and the backoffice)
install the handler once (configure); the lines of the libraries they run (uvicorn, the MCP SDK)
go through it too, as event=log (or http_request) with the library's logger name and message.
A program using the Python API gets the events on the logger "payrail_embedder" and may call
configure itself, or route them as it likes: each record carries `event` and `fields`.

No key holds a secret: callers pass role names, record ids, counts and causes, never a password,
an API key, a session id or a CSRF token, and name a database by database.display_url. As a
second line of defence the handler replaces the secrets it was given (configure(secrets=...))
wherever they appear, in library messages too.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Iterable

LOGGER = logging.getLogger("payrail_embedder")
FORMATS = ("logfmt", "json")
HIDDEN = "[hidden]"
MIN_SECRET_LENGTH = 8
# An event's text fields are cut to this many characters: a user name typed at sign-in is the
# client's to choose, and a log line stays a line.
MAX_FIELD_CHARACTERS = 1000
# The line breaks JSON leaves as they are (json.dumps escapes the ASCII ones), which readers that
# split on Unicode's line breaks (Python's splitlines, some log shippers) would split a line at.
# They only ever occur inside a quoted value, where the escape reads back as the same character.
UNESCAPED_LINE_BREAKS = {ord(c): f"\\u{ord(c):04x}" for c in "\x85\u2028\u2029"}


def log(event: str, level: int = logging.INFO, **fields: object) -> None:
    """One event: its stable name and fields (None values are left out)."""
    LOGGER.log(level, event, extra={"event": event, "fields": fields})


def _timestamp(record: logging.LogRecord) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z"


def _bounded(value: object) -> object:
    if isinstance(value, str) and len(value) > MAX_FIELD_CHARACTERS:
        return f"{value[:MAX_FIELD_CHARACTERS]}... ({len(value) - MAX_FIELD_CHARACTERS} more characters)"
    return value


def _logfmt_value(value: object) -> str:
    text = ("true" if value else "false") if isinstance(value, bool) else str(value)
    if text and text.isprintable() and not any(c in text for c in ' ="\\'):
        return text
    return json.dumps(text, ensure_ascii=False)


class LineFormatter(logging.Formatter):
    """A record as one line of stable keys: ts, level, event, then the event's fields."""

    def __init__(self, log_format: str = "logfmt", secrets: Iterable[str] = ()) -> None:
        super().__init__()
        if log_format not in FORMATS:
            raise ValueError(f"log format must be one of {', '.join(FORMATS)}, not {log_format!r}")
        self.log_format = log_format
        # Shorter strings cannot be told from ordinary words: hiding them would garble lines.
        self.secrets = sorted({s for s in secrets if len(s) >= MIN_SECRET_LENGTH}, key=len, reverse=True)

    def fields(self, record: logging.LogRecord) -> dict[str, object]:
        keys: dict[str, object] = {"ts": _timestamp(record), "level": record.levelname.lower()}
        if hasattr(record, "event"):
            keys["event"] = record.event
            keys.update({key: _bounded(value) for key, value in record.fields.items()})
        elif record.name == "uvicorn.access" and isinstance(record.args, tuple) and len(record.args) == 5:
            client, method, path, _, status = record.args
            keys.update(event="http_request", client=client, method=method, path=path, status=status)
        else:
            keys.update(event="log", logger=record.name, message=record.getMessage())
        if record.exc_info:
            keys["traceback"] = self.formatException(record.exc_info)
        return {key: value for key, value in keys.items() if value is not None}

    def format(self, record: logging.LogRecord) -> str:
        keys = self.fields(record)
        if self.log_format == "json":
            line = json.dumps(keys, ensure_ascii=False, default=str)
        else:
            line = " ".join(f"{key}={_logfmt_value(value)}" for key, value in keys.items())
        for secret in self.secrets:
            line = line.replace(secret, HIDDEN)
        return line.translate(UNESCAPED_LINE_BREAKS)


class StandardError(logging.StreamHandler):
    """Writes to whatever sys.stderr is when a line is written (click's test runner swaps it)."""

    def __init__(self) -> None:
        logging.Handler.__init__(self)

    @property
    def stream(self):
        return sys.stderr


def configure(log_format: str = "logfmt", *, secrets: Iterable[str] = ()) -> None:
    """Sends every log line of this process to standard error in log_format: the package's
    events from INFO, other libraries' from WARNING (uvicorn's access lines where the backoffice
    asks for them). Replaces the handler an earlier call installed, and no other."""
    handler = StandardError()
    handler.setFormatter(LineFormatter(log_format, secrets))
    root = logging.getLogger()
    for earlier in [h for h in root.handlers if isinstance(h, StandardError)]:
        root.removeHandler(earlier)
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
    LOGGER.setLevel(logging.INFO)
