"""Agents searching and an operator editing, in threads of their own, while something else runs
(a deploy): every call recorded with when it started and ended and how it failed, if it did."""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass, field

import numpy as np
import psycopg
from pgvector.psycopg import register_vector

SEARCH = "select provider from payrail.search_provider_methods(%s, %s, %s)"
NAME_SEARCH = "select provider from payrail.search_provider_methods(%s)"
# An edit that keeps the vector (URLs only), as an operator makes it in psql.
EDIT = "update payrail.provider_methods set urls = array[%s] where id = %s"


@dataclass(frozen=True)
class Call:
    started: float
    ended: float
    # The SQLSTATE it failed with ("wrong answer" when it answered what it should not); None: it succeeded.
    error: str | None

    @property
    def milliseconds(self) -> float:
        return 1000 * (self.ended - self.started)


@dataclass
class Traffic:
    """`searchers` connections of the agent login search (autocommit, as the CLI, API and MCP
    server do): a semantic search with a new random unit vector, every 4th an exact provider name
    from `providers`; one connection of the editor login edits the URLs of records in `ids`.
    Every search of a registry of at least 3 enabled records answers 3 (the name path at least 1)."""

    url: str
    agent: str
    editor: str
    providers: list[str]
    ids: list[int]
    dimensions: int
    model: str
    searchers: int = 3
    searches: list[Call] = field(default_factory=list)
    edits: list[Call] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def _loop(self, user: str, calls: list[Call], step, seed: int) -> None:
        with psycopg.connect(self.url, user=user, autocommit=True, application_name=f"traffic {user}") as conn:
            register_vector(conn)
            rng = np.random.default_rng(seed)
            number = 0
            while not self._stop.is_set():
                number += 1
                started = time.perf_counter()
                error = None
                try:
                    step(conn, rng, number)
                except psycopg.Error as failure:
                    error = failure.sqlstate or type(failure).__name__
                except AssertionError:
                    error = "wrong answer"
                calls.append(Call(started, time.perf_counter(), error))

    def _search(self, conn, rng, number) -> None:
        if number % 4 == 0:
            rows = conn.execute(NAME_SEARCH, (self.providers[int(rng.integers(len(self.providers)))],)).fetchall()
            assert rows
        else:
            vector = rng.standard_normal(self.dimensions).astype(np.float32)
            rows = conn.execute(SEARCH, (f"traffic query {number}", vector / np.linalg.norm(vector), self.model)).fetchall()
            assert len(rows) == 3

    def _edit(self, conn, rng, number) -> None:
        conn.execute(EDIT, (f"https://api.example.com/v{number}", self.ids[int(rng.integers(len(self.ids)))]))

    @contextlib.contextmanager
    def running(self):
        threads = [threading.Thread(target=self._loop, args=(self.agent, self.searches, self._search, seed)) for seed in range(self.searchers)]
        threads.append(threading.Thread(target=self._loop, args=(self.editor, self.edits, self._edit, self.searchers)))
        for thread in threads:
            thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            for thread in threads:
                thread.join()


def overlapping(calls: list[Call], start: float, end: float) -> list[Call]:
    """The calls that ran at some moment between start and end."""
    return [c for c in calls if c.started < end and c.ended > start]
