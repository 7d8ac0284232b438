"""Earlier versions of a provider method (payrail.provider_method_history), for operators."""

from __future__ import annotations

import psycopg
from psycopg.rows import dict_row

from . import stored


def provider_method_history(conn: psycopg.Connection, provider: str, method: str) -> dict:
    """The record now named provider / method (None if there is none) and its earlier versions, newest first.

    Versions of records once so named (renamed or deleted since) are included; see
    payrail.get_provider_method_history.
    """
    cursor = conn.cursor(row_factory=dict_row)
    current = cursor.execute(
        f"""
        select {stored.RECORD_COLUMNS} from payrail.provider_methods as pm
        where payrail._normalize_name(pm.provider) = payrail._normalize_name(%s)
          and payrail._normalize_name(pm.method) = payrail._normalize_name(%s)
        """,
        (provider, method),
    ).fetchone()
    versions = cursor.execute("select * from payrail.get_provider_method_history(%s, %s)", (provider, method)).fetchall()
    return {
        "record": stored.as_json(current) if current else None,
        "history": [
            {
                "historyId": v["id"],
                "recordId": v["provider_method_id"],
                "operation": v["operation"],
                "changedAt": v["changed_at"].isoformat(),
                "changedBy": v["changed_by"],
                "changedBySessionUser": v["changed_by_session_user"],
                "version": v["version"],
                "savedAt": v["version_saved_at"].isoformat(),
                **stored.record_of(v).to_json(),
            }
            for v in versions
        ],
    }


def record_history(conn: psycopg.Connection, record_id: int) -> list[dict]:
    """The earlier versions of one record (rows of payrail.provider_method_history), newest first."""
    return (
        conn.cursor(row_factory=dict_row)
        .execute(
            "select * from payrail.provider_method_history where provider_method_id = %s order by id desc",
            (record_id,),
        )
        .fetchall()
    )


def history_entry(conn: psycopg.Connection, history_id: int) -> dict | None:
    """One history row by its id, or None."""
    return (
        conn.cursor(row_factory=dict_row)
        .execute("select * from payrail.provider_method_history where id = %s", (history_id,))
        .fetchone()
    )
