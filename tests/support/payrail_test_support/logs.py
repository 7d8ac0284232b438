"""Reading the package's log lines (payrail_embedder.base.logs) back: logfmt or JSON, one event per line."""

from __future__ import annotations

import json
import re

LOGFMT_PAIR = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|\S+)')


def parse_line(line: str) -> dict:
    """One log line as a dict; a line that is neither JSON nor logfmt fails the test."""
    if line.startswith("{"):
        return json.loads(line)
    pairs = LOGFMT_PAIR.findall(line)
    assert pairs and " ".join(f"{k}={v}" for k, v in pairs) == line, f"not a logfmt line: {line!r}"
    return {key: json.loads(value) if value.startswith('"') else value for key, value in pairs}


def events(stderr: str, name: str | None = None) -> list[dict]:
    """Every line of stderr as an event (each must be one), or only those of event name."""
    parsed = [parse_line(line) for line in stderr.splitlines() if line]
    return [event for event in parsed if name is None or event["event"] == name]


def events_among(output: str, name: str | None = None) -> list[dict]:
    """The log lines among a process's other output (the backoffice's lines for people), as events."""
    return events("\n".join(line for line in output.splitlines() if line.startswith("ts=")), name)


def embedded_start(output: str) -> dict:
    """The one event among output that says the embedded PostgreSQL was started (off a terminal)."""
    (started,) = events_among(output, "embedded_postgres_start")
    return started
