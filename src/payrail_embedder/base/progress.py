"""Progress of long work (import, sync, model switch) on standard error, where people and logs see it.

On a terminal: a progress bar. Elsewhere (a pipe, a log file, a service manager): one line per
interval, in the key=value form log collectors parse,

    progress task=embedding done=2048 total=10000 elapsed_s=31

the first once the work has run for an interval and the last when it ends, so a short job prints
nothing and a long one shows it is alive. PAYRAIL_PROGRESS_INTERVAL sets the interval in seconds
(default 10; 0: a line for every step).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterator
from typing import TextIO

import click

DEFAULT_INTERVAL_SECONDS = 10.0


class ProgressLines:
    """The lines of one task off a terminal: at most one per interval, and one at the end."""

    def __init__(self, task: str, total: int, stream: TextIO, interval: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.task, self.total, self.stream, self.interval, self.clock = task, total, stream, interval, clock
        self.done = 0
        self.started = self.last = clock()
        self.printed_done: int | None = None  # done, as the last line said it

    def update(self, steps: int) -> None:
        self.done += steps
        if self.clock() - self.last >= self.interval:
            self.line()

    def line(self) -> None:
        self.last = self.clock()
        self.stream.write(f"progress task={self.task} done={self.done} total={self.total} elapsed_s={self.last - self.started:.0f}\n")
        self.stream.flush()
        self.printed_done = self.done

    def finish(self) -> None:
        """The end of a task that printed lines, unless its last line said it already."""
        if self.printed_done is not None and self.printed_done != self.done:
            self.line()


def interval_from_env() -> float:
    raw = os.environ.get("PAYRAIL_PROGRESS_INTERVAL", "")
    try:
        return max(0.0, float(raw)) if raw else DEFAULT_INTERVAL_SECONDS
    except ValueError:
        return DEFAULT_INTERVAL_SECONDS


@contextlib.contextmanager
def progress(task: str, total: int, stream: TextIO | None = None) -> Iterator[Callable[[int], None]]:
    """A function to call with the number of steps done since the last call, for `total` steps."""
    stream = stream or sys.stderr
    if stream.isatty():
        with click.progressbar(length=total, label=task, file=stream) as bar:
            yield bar.update
        return
    lines = ProgressLines(task, total, stream, interval_from_env())
    yield lines.update
    lines.finish()
