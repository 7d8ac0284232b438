"""Stored records as operators see them: found by name or id, with their version and state."""

from __future__ import annotations

from collections.abc import Sequence

import psycopg
from psycopg.rows import dict_row

from .records import ProviderMethod
from .registry_model import registry_model


class UnknownRecord(Exception):
    """No record, or more than one, goes by the name given."""


# Whether record pm has a vector of its current content by the registry's model (an enabled record always has).
HAS_CURRENT_VECTOR = """
  (pm.embedding is not null and pm.embedding_model is not distinct from (select m.name from payrail.get_embedding_model() as m))
"""
RECORD_COLUMNS = f"""
  pm.id, pm.version, pm.provider, pm.method, pm.urls, pm.docs_url, pm.guidance, pm.enabled, pm.updated_at,
  {HAS_CURRENT_VECTOR} as embedded
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


# The names a user may give, as the name path compares them: a pair in two arguments, or one
# argument "Provider / Method" or "Provider Method".
NAMED = """
  (cardinality(%(name)s::text[]) = 2
   and payrail._normalize_name(n.provider) = payrail._normalize_name((%(name)s::text[])[1])
   and payrail._normalize_name(n.method) = payrail._normalize_name((%(name)s::text[])[2]))
  or (cardinality(%(name)s::text[]) = 1
      and payrail._normalize_name((%(name)s::text[])[1]) in (payrail._normalize_name(n.provider || ' / ' || n.method),
                                                            payrail._normalize_name(n.provider || ' ' || n.method)))
"""
# The (provider, method) keys a name in NAMED's forms can be: the two arguments, or one argument
# divided at each " / " or " " in it (a stored name's key, joined by either, is the key of the
# pair: stored names are trimmed, and no character composes with a space or a slash). Records are
# found by these keys through the unique key's index, never by normalizing every stored name,
# and NAMED is checked on what they find.
NAME_KEYS = """
  select payrail._normalize_name((%(name)s::text[])[1]), payrail._normalize_name((%(name)s::text[])[2])
  where cardinality(%(name)s::text[]) = 2
  union all
  select pg_catalog.left(k.name, d.at - 1), pg_catalog.substr(k.name, d.at + pg_catalog.length(s.separator))
  from (select payrail._normalize_name((%(name)s::text[])[1])) as k(name),
       (values (' / '), (' ')) as s(separator),
       lateral pg_catalog.generate_series(1, pg_catalog.length(k.name)) as d(at)
  where cardinality(%(name)s::text[]) = 1 and pg_catalog.substr(k.name, d.at, pg_catalog.length(s.separator)) = s.separator
"""


def _named(table: str, columns: str) -> str:
    """The rows of table (provider, method and columns, as n) that a NAMED name finds, each once,
    looked up by their keys (NAME_KEYS); "offset 0" keeps each lookup a probe of the index."""
    return f"""
      select distinct n.* from ({NAME_KEYS}) as k(provider_key, method_key),
      lateral (select {columns} from {table} as pm
               where payrail._normalize_name(pm.provider) = k.provider_key
                 and payrail._normalize_name(pm.method) = k.method_key offset 0) as n
      where {NAMED}
    """


def _check_name_form(name: Sequence[str]) -> None:
    if len(name) not in (1, 2):
        raise UnknownRecord('name a record as PROVIDER METHOD (two arguments), or as one "Provider / Method"')


def _one(rows: list, name: Sequence[str], where: str) -> object:
    written = " / ".join(name)
    if not rows:
        raise UnknownRecord(f'no provider method is named "{written}"{where}; `payrail-embedder export` lists every record')
    if len(rows) > 1:
        names = ", ".join(f'"{row["provider"]}" + "{row["method"]}"' for row in rows)
        raise UnknownRecord(f'"{written}" names several records ({names}): name one as PROVIDER METHOD, two arguments')
    return rows[0]


def find_by_name(conn: psycopg.Connection, name: Sequence[str]) -> dict:
    """The stored record a user named (see NAMED); UnknownRecord when none or several match."""
    _check_name_form(name)
    rows = (
        conn.cursor(row_factory=dict_row)
        .execute(
            f"""select n.* from ({_named("payrail.provider_methods", RECORD_COLUMNS)}) as n
                order by payrail._normalize_name(n.provider), payrail._normalize_name(n.method)""",
            {"name": list(name)},
        )
        .fetchall()
    )
    return _one(rows, name, "")


def resolve_former_name(conn: psycopg.Connection, name: Sequence[str]) -> tuple[str, str]:
    """(provider, method) of the record a user named, now or in the history (renamed or deleted since)."""
    _check_name_form(name)
    rows = (
        conn.cursor(row_factory=dict_row)
        .execute(
            f"""select distinct on (payrail._normalize_name(n.provider), payrail._normalize_name(n.method)) n.provider, n.method
                from ({_named("payrail.provider_methods", "pm.provider, pm.method")}
                      union all
                      {_named("payrail.provider_method_history", "pm.provider, pm.method")}) as n
                order by payrail._normalize_name(n.provider), payrail._normalize_name(n.method)""",
            {"name": list(name)},
        )
        .fetchall()
    )
    row = _one(rows, name, ", now or in the history")
    return row["provider"], row["method"]


def counts(conn: psycopg.Connection) -> dict:
    """What the registry holds: records, enabled, drafts and drafts without a current vector, and its model.

    {"schemaApplied": false} where db/ was never applied.
    """
    if conn.execute("select pg_catalog.to_regclass('payrail.provider_methods') is null").fetchone()[0]:
        return {"schemaApplied": False}
    row = (
        conn.cursor(row_factory=dict_row)
        .execute(
            f"""
            select count(*) as records, count(*) filter (where pm.enabled) as enabled,
                   count(*) filter (where not pm.enabled) as drafts,
                   count(*) filter (where not pm.enabled and not {HAS_CURRENT_VECTOR}) as drafts_needing_embedding
            from payrail.provider_methods as pm
            """
        )
        .fetchone()
    )
    model = registry_model(conn)
    return {
        "schemaApplied": True,
        "records": row["records"],
        "enabled": row["enabled"],
        "drafts": row["drafts"],
        "draftsNeedingEmbedding": row["drafts_needing_embedding"],
        "model": {"name": model.name, "dimensions": model.dimensions} if model else None,
    }


# What a record is to search: enabled, a draft with a vector of its current content by the
# registry's model (preview can place it), or a draft that has none yet.
STATES = ("enabled", "draft", "draft needing an embedding")


def state_of(row: dict) -> str:
    """One of STATES, for a row with enabled and embedded."""
    if row["enabled"]:
        return "enabled"
    return "draft" if row["embedded"] else "draft needing an embedding"


def list_records(conn: psycopg.Connection, text: str = "", state: str | None = None) -> list[dict]:
    """Every record (get's columns but the text, and its state), by provider and method ignoring
    case; text: only those whose provider, method, guidance or URLs contain it, ignoring case;
    state: only those in it."""
    if state is not None and state not in STATES:
        raise ValueError(f"unknown state {state!r}; states are {', '.join(STATES)}")
    rows = (
        conn.cursor(row_factory=dict_row)
        .execute(
            # lower(), not the unique key's payrail._normalize_name: 3x faster over 10,000 records,
            # and the same order but for names that differ only in runs of white space.
            f"""select id, version, provider, method, enabled, embedded, updated_at
            from (select {RECORD_COLUMNS} from payrail.provider_methods as pm
                  where %(text)s = '' or pg_catalog.strpos(pg_catalog.lower(
                          pm.provider || ' ' || pm.method || ' ' || pm.guidance || ' '
                          || pg_catalog.array_to_string(pm.urls, ' ') || ' ' || coalesce(pm.docs_url, '')),
                        pg_catalog.lower(%(text)s)) > 0) as pm
            order by pg_catalog.lower(provider), pg_catalog.lower(method), id""",
            {"text": text},
        )
        .fetchall()
    )
    return [row | {"state": state_of(row)} for row in rows if state is None or state_of(row) == state]

