"""Operators' logs: one line per event on standard error, with a level and stable keys.

    ts=2026-05-04T09:12:33.120Z level=info event=sign_in role=alice outcome=success

logfmt by default; with `--log-format json` (PAYRAIL_LOG_FORMAT=json) one JSON object per line
with the same keys. The package's processes (the CLI, hence the MCP server and the backoffice)
install the handler once (configure); the lines of the libraries they run (uvicorn, the MCP SDK)
go through it too, as event=log (or http_request) with the library's logger name and message.
Which lines: `--log-level` (PAYRAIL_LOG_LEVEL), else info, but warning for a command a person
runs on a terminal, who reads its answer, not its log (default_level).

A program using the Python API gets the events on the logger "payrail_embedder", which has no
handler of its own (a NullHandler, so Python's last-resort handler prints nothing either): it may
call configure, or route them as it likes; each record carries `event` and `fields`, and its
message is the event and its fields as one line.

A library's line that repeats is written at most REPEATS_PER_WINDOW times in REPEAT_WINDOW
seconds (a line's kind: its logger, level and message before its values); the rest are counted,
and when the window ends one line says how many were left out (event=log_repeated). What an
outsider makes a server's libraries say (a malformed request, a refused upgrade, an accept that
failed) is so bounded per minute, however fast it comes; the package's own events are each written.

No key holds a secret: callers pass role names, record ids, counts and causes, never a password,
an API key, a session id or a CSRF token, and name a database by connection.display_url. As a
second line of defence the handler scrubs every value (safe_text.scrub: the secrets it was given,
configure(secrets=...), those the process was configured with, and whatever is shaped like one),
in library messages and tracebacks too, before a value is cut to length or encoded. A value
holding a control character (a role name, an upstream's error body) is quoted, the character
escaped as JSON escapes it, so no value can break a line, forge one or reach a terminal raw.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from collections.abc import Iterable, Mapping

from .safe_text import JSON_ESCAPES, hide, scrub

LOGGER = logging.getLogger("payrail_embedder")
LOGGER.addHandler(logging.NullHandler())
FORMATS = ("logfmt", "json")
LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}
# An event's text fields are cut to this many characters: a user name typed at sign-in is the
# client's to choose, and a log line stays a line.
MAX_FIELD_CHARACTERS = 1000


def log(event: str, level: int = logging.INFO, **fields: object) -> None:
    """One event: its stable name and fields (None values are left out)."""
    LOGGER.log(level, _EventLine(event, fields), extra={"event": event, "fields": fields})


def log_failure(event: str, failure: BaseException, **fields: object) -> None:
    """An error event that carries the failure's traceback (key traceback): a bug, seen as one."""
    LOGGER.error(_EventLine(event, fields), exc_info=failure, extra={"event": event, "fields": fields})


def tell(message: str, event: str, fields: Mapping[str, object], level: int = logging.INFO) -> None:
    """What a person should know: the message on standard error when this process's own (the
    package's processes configure it) is a terminal; elsewhere, and in a program using the Python
    API, the event."""
    if sys.stderr.isatty() and any(isinstance(handler, StandardError) for handler in logging.getLogger().handlers):
        print(message, file=sys.stderr, flush=True)
    else:
        log(event, level, **fields)


class _EventLine:
    """An event's message for handlers other than the package's: `event key=value ...`, scrubbed,
    made only if a handler prints it."""

    def __init__(self, event: str, fields: dict[str, object]) -> None:
        self.event, self.fields = event, fields

    def __str__(self) -> str:
        pairs = (f"{key}={_logfmt_value(_bounded(_scrubbed(value)))}" for key, value in self.fields.items() if value is not None)
        return " ".join((self.event, *pairs)).translate(JSON_ESCAPES)


def _timestamp(record: logging.LogRecord) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z"


def _scrubbed(value: object) -> object:
    """A value without secrets: numbers and booleans as they are, anything else as scrubbed text."""
    return value if value is None or isinstance(value, (bool, int, float)) else scrub(str(value))


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
        hide(secrets)

    def fields(self, record: logging.LogRecord) -> dict[str, object]:
        """The line's keys and values, every value scrubbed (before an event's is cut to length,
        so no part of a secret is left at the cut)."""
        keys: dict[str, object] = {"ts": _timestamp(record), "level": record.levelname.lower()}
        if hasattr(record, "event") and hasattr(record, "fields"):
            keys["event"] = record.event
            keys.update({key: _bounded(_scrubbed(value)) for key, value in record.fields.items()})
        elif record.name == "uvicorn.access" and isinstance(record.args, tuple) and len(record.args) == 5:
            client, method, path, _, status = map(_scrubbed, record.args)
            keys.update(event="http_request", client=client, method=method, path=path, status=status)
        else:
            keys.update(event="log", logger=record.name, message=scrub(record.getMessage()))
        if record.exc_info:
            keys["traceback"] = scrub(self.formatException(record.exc_info))
        return {key: value for key, value in keys.items() if value is not None}

    def format(self, record: logging.LogRecord) -> str:
        keys = self.fields(record)
        if self.log_format == "json":
            line = json.dumps(keys, ensure_ascii=False)
        else:
            line = " ".join(f"{key}={_logfmt_value(value)}" for key, value in keys.items())
        # The control characters JSON leaves raw (C1, DEL, U+2028, ...) only ever occur inside a
        # quoted value (logfmt leaves a value bare only if it is printable), where JSON's escape
        # reads back as the same character.
        return line.translate(JSON_ESCAPES)


class RepeatedLines(logging.Filter):
    """Lets a library's line of one kind through at most REPEATS_PER_WINDOW times in REPEAT_WINDOW
    seconds, counts the rest, and writes their number through `handler` when the window ends.

    A kind is the logger, the level and the message before its values are put in (uvicorn's
    "Invalid HTTP request received.", asyncio's "socket.accept() out of system resource"); past
    MAX_KINDS kinds (a library that puts values in the message itself), any other shares one."""

    REPEATS_PER_WINDOW = 10
    REPEAT_WINDOW = 60.0
    MAX_KINDS = 100

    def __init__(self, handler: logging.Handler) -> None:
        super().__init__()
        self.handler = handler
        self._lock = threading.Lock()
        self._windows: dict[tuple[str, int, str], _Window] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if hasattr(record, "event") or record.name == "uvicorn.access":
            return True  # the package's events and the backoffice's request lines: each one counts
        kind = (record.name, record.levelno, str(record.msg))
        with self._lock:
            if kind not in self._windows and len(self._windows) >= self.MAX_KINDS:
                kind = (record.name, record.levelno, "(other messages)")
            window = self._windows.get(kind)
            if window is None:
                window = self._windows[kind] = _Window(threading.Timer(self.REPEAT_WINDOW, self._close, (kind,)))
                window.timer.daemon = True
                window.timer.start()
            window.seen += 1
            return window.seen <= self.REPEATS_PER_WINDOW

    def _close(self, kind: tuple[str, int, str]) -> None:
        with self._lock:
            window = self._windows.pop(kind)
        left_out = window.seen - self.REPEATS_PER_WINDOW
        if left_out > 0:
            logger, level, message = kind
            fields = {"logger": logger, "message": message, "left_out": left_out, "seconds": self.REPEAT_WINDOW}
            extra = {"event": "log_repeated", "fields": fields}
            self.handler.handle(LOGGER.makeRecord(LOGGER.name, level, __file__, 0, _EventLine("log_repeated", fields), (), None, extra=extra))


class _Window:
    def __init__(self, timer: threading.Timer) -> None:
        self.timer = timer
        self.seen = 0


class StandardError(logging.StreamHandler):
    """Writes to whatever sys.stderr is when a line is written (click's test runner swaps it)."""

    def __init__(self) -> None:
        logging.Handler.__init__(self)

    @property
    def stream(self):
        return sys.stderr


def default_level(*, server: bool) -> str:
    """info for a server and wherever standard error is not a terminal (a pipe, a file, a service
    manager: the log); warning for a command a person runs on a terminal."""
    return "info" if server or not sys.stderr.isatty() else "warning"


def configure(log_format: str = "logfmt", level: str = "info", *, secrets: Iterable[str] = ()) -> None:
    """Sends the log lines of this process from level up to standard error in log_format: the
    package's events, uvicorn's access lines where the backoffice asks for them, and other
    libraries' from warning (from debug with level debug). Replaces the handler an earlier call
    installed, and no other."""
    threshold = LEVELS[level]
    handler = StandardError()
    handler.setFormatter(LineFormatter(log_format, secrets))
    handler.addFilter(RepeatedLines(handler))
    # On the handler too: uvicorn sets its own loggers' levels.
    handler.setLevel(threshold)
    root = logging.getLogger()
    for earlier in [h for h in root.handlers if isinstance(h, StandardError)]:
        root.removeHandler(earlier)
    root.addHandler(handler)
    root.setLevel(threshold if threshold == logging.DEBUG else max(threshold, logging.WARNING))
    LOGGER.setLevel(threshold)
