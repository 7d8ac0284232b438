"""Reports that render themselves: what a command answers, as JSON for scripts and as lines for people.

Every command's answer is a Report made where its facts are (the registry's, the model's, the
database's modules), so the command line only parses options, calls, and emits the report.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import click

from .safe_text import json_text


class Report(ABC):
    """An answer with two renderings of the same facts: to_json() for --json (its keys are stable,
    scripts read them) and describe() for people."""

    @abstractmethod
    def to_json(self) -> dict:
        """The answer as --json prints it."""

    @abstractmethod
    def describe(self) -> list[str]:
        """The answer for people, line by line, on standard output."""

    def warnings(self) -> list[str]:
        """What people should notice beside the answer (refused lines, pending records), on
        standard error before it; --json carries the same facts in its answer."""
        return []


def duration(seconds: float) -> str:
    """5 s, 3 min 20 s, 1 h 05 min: a duration people read at a glance."""
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


def emit(report: Report, as_json: bool) -> None:
    """Prints report: its JSON on standard output, or its warnings on standard error and its lines."""
    if as_json:
        click.echo(json_text(report.to_json()))
        return
    for line in report.warnings():
        click.echo(line, err=True)
    for line in report.describe():
        click.echo(line)
