"""The SQLSTATEs the package branches on: a mirror of db/ERRCODES.md (tests/test_docs.py checks it)."""

INVALID_PARAMETER_VALUE = "22023"
QUERY_EMBEDDING_REQUIRED = "PYE01"
EMBEDDING_MODEL_MISMATCH = "PYE02"
RECORD_CHANGED = "PYE03"
# payrail.save_provider_methods undoes its judgment's draft writes with it; it never reaches a client.
JUDGMENT_UNDONE = "PYW01"
SESSION_LIMIT_LIFTED = "PYS01"
EXCLUSIVE_LOCK_NEEDED = "PYD01"
CHECK_VIOLATION = "23514"
UNIQUE_VIOLATION = "23505"
FOREIGN_KEY_VIOLATION = "23503"
NO_DATA_FOUND = "P0002"
OBJECT_NOT_IN_PREREQUISITE_STATE = "55000"
INSUFFICIENT_PRIVILEGE = "42501"
LOCK_NOT_AVAILABLE = "55P03"

# PostgreSQL's own, not the registry's: another transaction got in the way, and redoing the
# whole unit of work succeeds. Never a refusal of the caller's input.
SERIALIZATION_FAILURE = "40001"
DEADLOCK_DETECTED = "40P01"
TRANSIENT = frozenset({SERIALIZATION_FAILURE, DEADLOCK_DETECTED})

# PostgreSQL's own too: what a transaction pooler that cannot carry prepared statements makes of
# one. The server connection it handed over lacks the statement (invalid_sql_statement_name) or
# holds another client's of the same name (duplicate_prepared_statement).
PREPARED_STATEMENT_LOST = frozenset({"26000", "42P05"})


def refuses_input(sqlstate: str | None) -> bool:
    """Whether an error is the database refusing what was written (a data exception or an
    integrity rule), rather than the database failing (connection, privileges, resources)."""
    return sqlstate is not None and sqlstate[:2] in ("22", "23")
