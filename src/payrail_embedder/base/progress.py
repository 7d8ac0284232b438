"""Progress of long work (import, sync, model switch) on standard error, where people and logs see it.

On a terminal: a progress bar. Elsewhere (a pipe, a log file, a service manager): a `progress`
event in the log (logs.py) per interval,

    ts=2026-05-04T09:12:33.120Z level=info event=progress task=sync done=2048 total=10000 elapsed_s=31

the first once the work has run for an interval and the last when it ends, so a short job logs
nothing and a long one shows it is alive. PAYRAIL_PROGRESS_INTERVAL sets the interval in seconds
(default 10; 0: an event for every step).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterator

import click

from . import logs

DEFAULT_INTERVAL_SECONDS = 10.0


class ProgressEvents:
    """The events of one task off a terminal: at most one per interval, and one at the end."""

    def __init__(self, task: str, total: int, interval: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.task, self.total, self.interval, self.clock = task, total, interval, clock
        self.done = 0
        self.started = self.last = clock()
        self.logged_done: int | None = None  # done, as the last event said it

    def update(self, steps: int) -> None:
        self.done += steps
        if self.clock() - self.last >= self.interval:
            self.event()

    def event(self) -> None:
        self.last = self.clock()
        logs.log("progress", task=self.task, done=self.done, total=self.total, elapsed_s=round(self.last - self.started))
        self.logged_done = self.done

    def finish(self) -> None:
        """The end of a task that logged events, unless its last event said it already."""
        if self.logged_done is not None and self.logged_done != self.done:
            self.event()


def interval_from_env() -> float:
    raw = os.environ.get("PAYRAIL_PROGRESS_INTERVAL", "")
    try:
        return max(0.0, float(raw)) if raw else DEFAULT_INTERVAL_SECONDS
    except ValueError:
        return DEFAULT_INTERVAL_SECONDS


@contextlib.contextmanager
def progress(task: str, total: int) -> Iterator[Callable[[int], None]]:
    """A function to call with the number of steps done since the last call, for `total` steps."""
    if sys.stderr.isatty():
        with click.progressbar(length=total, label=task, file=sys.stderr) as bar:
            yield bar.update
        return
    events = ProgressEvents(task, total, interval_from_env())
    yield events.update
    events.finish()
