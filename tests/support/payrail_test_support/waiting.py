"""Waiting for what another process or thread does: the one polling loop of the tests."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import psycopg

T = TypeVar("T")


def wait_until(condition: Callable[[], T], what: str | Callable[[], str], *, timeout: float = 60, interval: float = 0.05) -> T:
    """condition()'s first true value, asked every interval seconds; after timeout seconds the test
    fails saying what it waited for (what: a text, or a function giving one then, e.g. a log).
    condition may fail the test sooner itself (an assertion that the process it waits on still runs)."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout:g} s for {what() if callable(what) else what}")
        time.sleep(interval)
    return value


def waits_for_a_lock(conn: psycopg.Connection, application_name: str = "") -> bool:
    """Whether a backend of conn's database (of an application whose name starts with
    application_name: the command line's names its user too) waits for a lock now."""
    return conn.execute(
        "select exists (select from pg_stat_activity where wait_event_type = 'Lock' and datname = current_database() and starts_with(application_name, %s))",
        (application_name,),
    ).fetchone()[0]
