"""Failures as every face reports them: a code callers branch on, a detail people read, and the
database's reason in one line.

An error a caller can act on derives from CodedError and names its code; the CLI prints it as
"Error: CODE: detail" (or {"error": CODE, "detail": ...} with --json) and exits with its
EXIT_STATUS, the Python API raises it, the MCP tool answers {"error", "detail"}, and the
backoffice shows "CODE: detail". A detail is one line made safe when the error is made
(safe_text.one_line): an upstream's error body or a database's message in it keeps saying what
failed, without a secret or a control character.
"""

from __future__ import annotations

import psycopg

from . import errcodes
from .safe_text import one_line

# Exit 2: the caller must fix something (the query, a name, a file, the configuration, a grant).
# Exit 1: the database or the embedding service failed; the same command may work later.
EXIT_STATUS = {
    "invalid_query": 2,
    "invalid_input": 2,
    "unknown_record": 2,
    "draft_not_embedded": 2,
    "misconfigured": 2,
    "not_permitted": 2,
    "search_unavailable": 1,
    "unavailable": 1,
}


def as_json(code: str, detail: str) -> dict:
    """A failure for machines: what --json prints and the MCP tool answers."""
    return {"error": code, "detail": one_line(detail)}


def as_text(code: str, detail: str) -> str:
    """A failure for people, after the CLI's "Error: "."""
    return f"{code}: {one_line(detail)}"


class CodedError(Exception):
    """A failure with a code (one of EXIT_STATUS) a caller branches on; its message is the detail,
    made safe as it is made, so str(error) holds no secret or control character either."""

    code = "unavailable"

    def __init__(self, *args: object) -> None:
        super().__init__(*(one_line(arg) if isinstance(arg, str) else arg for arg in args))

    @property
    def detail(self) -> str:
        return str(self)

    def to_json(self) -> dict:
        return as_json(self.code, self.detail)

    def describe(self) -> str:
        return as_text(self.code, self.detail)


def database_reason(error: psycopg.Error, *, with_sqlstate: bool = False) -> str:
    """The database's message, the constraint it names, optionally its SQLSTATE, and its hint, in one line."""
    diag = error.diag
    reason = diag.message_primary or str(error).strip()
    if diag.constraint_name and diag.constraint_name not in reason:
        reason += f" ({diag.constraint_name})"
    if with_sqlstate and error.sqlstate:
        reason += f" (SQLSTATE {error.sqlstate})"
    if diag.message_hint:
        reason += f". Hint: {diag.message_hint}"
    if error.sqlstate in errcodes.PREPARED_STATEMENT_LOST:
        reason += f". {PREPARED_STATEMENTS_HINT}"
    return one_line(reason)


PREPARED_STATEMENTS_HINT = (
    "Behind a transaction pooler that cannot carry prepared statements (PgBouncer in transaction mode "
    "before 1.21, or without max_prepared_statements), set PAYRAIL_PREPARED_STATEMENTS=off"
)


def reason(error: BaseException | str) -> str:
    """Why something failed, in one line: the database's reason for a database error."""
    return database_reason(error) if isinstance(error, psycopg.Error) else one_line(error)


def code_and_detail(error: BaseException) -> tuple[str, str] | None:
    """The code and detail a failure means to its caller, or None for one that is not the
    caller's to act on (a bug, which should be seen as one)."""
    if isinstance(error, CodedError):
        return error.code, error.detail
    if isinstance(error, psycopg.Error):
        code = "not_permitted" if error.sqlstate == errcodes.INSUFFICIENT_PRIVILEGE else "unavailable"
        return code, f"database: {database_reason(error)}"
    return None
