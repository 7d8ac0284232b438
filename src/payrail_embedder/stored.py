"""Stored records as operators see them: found by name or id, with their version and state."""

from __future__ import annotations

from collections.abc import Sequence

import psycopg
from psycopg.rows import dict_row

from .records import ProviderMethod


class UnknownRecord(Exception):
    """No record, or more than one, goes by the name given."""


RECORD_COLUMNS = """
  pm.id, pm.version, pm.provider, pm.method, pm.urls, pm.docs_url, pm.guidance, pm.enabled, pm.updated_at,
  (pm.embedding is not null and pm.embedding_model is not distinct from
     (select m.name from payrail.get_embedding_model() as m)) as embedded
"""


def as_json(row: dict) -> dict:
    """A stored record in the catalog's JSON names, with its id, version, vector state and save time."""
    return {
        "recordId": row["id"],
        "version": row["version"],
        **record_of(row).to_json(),
        "embedded": row["embedded"],
        "savedAt": row["updated_at"].isoformat(),
    }


def record_of(row: dict) -> ProviderMethod:
    return ProviderMethod(row["provider"], row["method"], list(row["urls"]), row["docs_url"], row["guidance"], row["enabled"])


def get(conn: psycopg.Connection, record_id: int) -> dict | None:
    """The record with this id (as_json's row), or None."""
    return (
        conn.cursor(row_factory=dict_row)
        .execute(f"select {RECORD_COLUMNS} from payrail.provider_methods as pm where pm.id = %s", (record_id,))
        .fetchone()
    )


def find_by_name(conn: psycopg.Connection, name: Sequence[str]) -> dict:
    """The record a user named, in the name path's own forms: PROVIDER METHOD as two arguments, or
    one argument "Provider / Method" or "Provider Method". Names compare as the unique key compares
    (payrail._normalize_name). UnknownRecord when none or several match."""
    if len(name) == 2:
        where = """payrail._normalize_name(pm.provider) = payrail._normalize_name(%(provider)s)
                   and payrail._normalize_name(pm.method) = payrail._normalize_name(%(method)s)"""
        params = {"provider": name[0], "method": name[1]}
    elif len(name) == 1:
        where = """payrail._normalize_name(%(pair)s) in (payrail._normalize_name(pm.provider || ' / ' || pm.method),
                                                        payrail._normalize_name(pm.provider || ' ' || pm.method))"""
        params = {"pair": name[0]}
    else:
        raise UnknownRecord('name a record as PROVIDER METHOD (two arguments), or as one "Provider / Method"')
    rows = (
        conn.cursor(row_factory=dict_row)
        .execute(
            f"""select {RECORD_COLUMNS} from payrail.provider_methods as pm where {where}
                order by payrail._normalize_name(pm.provider), payrail._normalize_name(pm.method)""",
            params,
        )
        .fetchall()
    )
    written = " / ".join(name)
    if not rows:
        raise UnknownRecord(f'no provider method is named "{written}"; `payrail-embedder export` lists every record')
    if len(rows) > 1:
        names = ", ".join(f'"{row["provider"]}" + "{row["method"]}"' for row in rows)
        raise UnknownRecord(f'"{written}" names several records ({names}): name one as PROVIDER METHOD, two arguments')
    return rows[0]
