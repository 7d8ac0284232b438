"""A save measured in its transaction: what an edit's preview runs (golden_rankings.measured_edit).

save_measured saves one change for real, through the write path's statement, in a transaction:
the measure reads what it needs before the save and after it, then the transaction commits (the
caller keeps what was measured) or rolls back (a preview). A change that needs a vector is
embedded between two such transactions, holding nothing. There is no separate check, tentative
save or second plan: a measure that reads more (exact ranks, a restore's effect) adds to before
and after (db/WRITES.md, "The preview of an edit").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

import psycopg

from ..embedders import Embedder, made_once
from .changes import Change, Embedding, Outcome, Saved, saved_of, unsaved_of
from .write import MOST_CALLS, SAVED, TransientFailure, answered, embedded, retry_transient, storable

M = TypeVar("M")
M_co = TypeVar("M_co", covariant=True)


class Measure(Protocol[M_co]):
    """What save_measured measures around a save, in its transaction."""

    def prepare(self, conn: psycopg.Connection, embedding: Embedding | None) -> None:
        """Before the transaction (it may embed): with the vector the save will bring, if any."""

    def before(self, conn: psycopg.Connection) -> None:
        """In the transaction, before the save."""

    def after(self, conn: psycopg.Connection, saved: Saved) -> M_co:
        """In the transaction, after the save: what was measured."""


@dataclass(frozen=True)
class Measured(Generic[M]):
    """A save_measured save: its outcome, what was measured (None when it was not saved), whether
    it was committed, and the vector made for it (to save it again after a preview)."""

    outcome: Outcome
    measured: M | None
    committed: bool
    embedding: Embedding | None


def save_measured(
    conn: psycopg.Connection,
    embedder_factory: Callable[[], Embedder],
    change: Change,
    measure: Measure[M],
    keep: Callable[[M], bool],
    embedding: Embedding | None = None,
) -> Measured[M]:
    """Saves one change in a transaction: measure.before, the save (payrail.save_provider_methods,
    the real one), measure.after; then commits when keep(what it measured), else rolls back. A
    change that needs a vector is embedded between transactions, holding nothing, and saved
    again; a refusal or conflict saves nothing (its outcome says why). conn in autocommit mode."""
    embedder_factory = made_once(embedder_factory)
    (sent,), refused = storable([change])
    if refused:
        return Measured(refused[0], None, False, None)
    for _ in range(MOST_CALLS):
        measure.prepare(conn, embedding)

        def once() -> tuple[dict, M | None, bool]:
            with conn.transaction() as transaction:
                measure.before(conn)
                (answer,) = answered(conn, [sent], [embedding])
                measured = measure.after(conn, saved_of(answer, embedding)) if answer["outcome"] in SAVED else None
                kept = measured is not None and keep(measured)
                if not kept:
                    raise psycopg.Rollback(transaction)  # the block ends here, rolled back
            return answer, measured, kept

        answer, measured, committed = retry_transient(once)
        if answer["outcome"] != "needs_embedding":
            outcome = saved_of(answer, embedding) if answer["outcome"] in SAVED else unsaved_of(answer, [0])
            return Measured(outcome, measured, committed, embedding)
        (embedding,) = embedded(embedder_factory, [answer], lambda done: None)
    raise TransientFailure("the record kept changing while it was embedded and saved; nothing was saved, run it again")
