"""What the command line's modules share: the failure every face reports, the options several
commands take, the change log line, and reading a query for search.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Iterator

import click
import psycopg

from ..base import logs
from ..base.errors import as_json, as_text
from ..base.safe_text import one_line
from ..embedders import OPENAI_MAX_BATCH, tuned_models
from ..model.switch import SwitchReport
from ..postgres import connection
from ..registry.search import Connections, SearchUnavailable
from ..registry.sync import SyncReport
from ..settings import Settings


class Failure(click.ClickException):
    """A failure with a code: `{"error": code, "detail": ...}` with --json, "Error: code: detail" without (errors.py)."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(detail)
        self.code = code

    def format_message(self) -> str:
        return as_text(self.code, self.message)

    def to_json(self) -> dict:
        return as_json(self.code, self.message)


# The signals that stop a command: Ctrl-C, the terminal's hangup, and kill's default.
STOPPING_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def scratch_removed_on_signals() -> Iterator[None]:
    """While the block runs, SIGINT, SIGTERM and SIGHUP remove the scratch directories the process
    holds (tuned_models.remove_held_scratch), say so, and end it as the signal would have. Not by
    raising KeyboardInterrupt to unwind: one raised while a finalizer (__del__) runs is printed
    and dropped, and the command would go on. A signal the process was started ignoring (nohup,
    a background job's Ctrl-C) stays ignored."""
    if threading.current_thread() is not threading.main_thread():  # only the main thread handles signals
        yield
        return
    previous = {number: signal.getsignal(number) for number in STOPPING_SIGNALS}
    for number, handler in previous.items():
        if handler in (signal.SIG_DFL, signal.default_int_handler):
            signal.signal(number, _remove_scratch_and_stop)
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def _remove_scratch_and_stop(number: int, frame: object) -> None:
    removed = "".join(f"; removed {scratch}" for scratch in tuned_models.remove_held_scratch())
    os.write(2, one_line(f"Aborted! (stopped by {signal.Signals(number).name}{removed})").encode() + b"\n")
    signal.signal(number, signal.SIG_DFL)
    os.kill(os.getpid(), number)


def log_change(event: str, conn: psycopg.Connection, started: float, *, failed: bool = False, **fields) -> None:
    """The summary line of a command that changed the registry: which database, as which role,
    what it did and how long it took; a warning when part of it failed."""
    logs.log(
        event,
        logging.WARNING if failed else logging.INFO,
        database=connection.connected_to(conn),
        role=conn.info.user,
        **fields,
        duration_ms=round((time.monotonic() - started) * 1000),
    )


def embedding_run_fields(report: SyncReport | SwitchReport) -> dict:
    """The log fields of a run that embeds batch by batch (sync, model switch): what it left pending, and why."""
    return {"pending": len(report.pending), "golden_queries": report.golden_queries or None, "error": report.error}


JSON_OPTION = click.option("--json", "as_json", is_flag=True, help='Print JSON; a failure prints {"error", "detail"}.')

BATCH_SIZE_OPTION = click.option(
    "--batch-size",
    type=click.IntRange(min=1, max=OPENAI_MAX_BATCH),
    help="Records per embedding request and per commit (default: the backend's batch, 2,048 for openai, 64 for local).",
)


QUERY_ARGUMENT = click.argument("query", metavar="QUERY")


def read_query(query: str) -> str:
    """QUERY, or standard input for "-" (a query with quotes or newlines needs no shell quoting)."""
    if query != "-":
        return query
    with click.open_file("-", "rb") as stdin:
        data = stdin.read()
    try:
        return data.decode("utf-8").removesuffix("\n")
    except UnicodeDecodeError as error:
        raise Failure("invalid_query", f"standard input is not UTF-8 text (byte {error.start + 1})") from None


def connect_for_search(settings: Settings) -> psycopg.Connection:
    try:
        return settings.connect()
    except (psycopg.Error, connection.DatabaseUnavailable) as error:
        raise SearchUnavailable(f"cannot reach the database: {error}", "database_unreachable") from error


def one_connection_at_a_time(settings: Settings) -> Connections:
    """A connection for each of search's database steps, closed after it: none is held while the
    query is embedded, so searches waiting on a slow embedding service never use up the
    connections (a login's connection limit, a pooler's) that exact names need."""

    def run(work):
        with connect_for_search(settings) as conn:
            return work(conn)

    return run


NAME_ARGUMENT = click.argument("name", nargs=-1, metavar="PROVIDER METHOD")
