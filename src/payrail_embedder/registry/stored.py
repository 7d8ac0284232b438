"""Stored records as operators see them: found by name or id, with their version and state."""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import psycopg
from psycopg.rows import DictRow, dict_row

from ..base.errors import CodedError
from ..base.reports import Report
from ..postgres.connection import SelfPinned, one_row
from .advice import Advice, advice_lines
from .embedding_model import registry_model
from .records import ProviderMethod


class UnknownRecord(CodedError):
    """No record, or more than one, goes by the name given."""

    code = "unknown_record"


# The records with whether each has a vector of its current content by the registry's model
# (has_current_vector; an enabled record always has): that rule's one statement is this view's.
RECORDS = "payrail.provider_method_states"
# Each record's narrow entry in the records list (db/schema/036: what it filters, sorts and counts
# on, without the vector), with has_current_vector: a scan of it reads no record's vector.
LIST_ENTRIES = "payrail.provider_method_list_entry_states"
RECORD_COLUMNS = """
  pm.id, pm.version, pm.provider, pm.method, pm.urls, pm.docs_url, pm.guidance, pm.enabled, pm.updated_at, pm.saved_by,
  pm.mixed_scripts, pm.has_current_vector as embedded
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


def record_of(row: Mapping) -> ProviderMethod:
    return ProviderMethod(row["provider"], row["method"], list(row["urls"]), row["docs_url"], row["guidance"], row["enabled"], row["mixed_scripts"])


def get(conn: psycopg.Connection, record_id: int) -> dict | None:
    """The record with this id (as_json's row), or None."""
    return conn.cursor(row_factory=dict_row).execute(f"select {RECORD_COLUMNS} from {RECORDS} as pm where pm.id = %s", (record_id,)).fetchone()


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


def _of_provider(conn: psycopg.Connection, name: Sequence[str], table: str, columns: str) -> list[DictRow]:
    """The rows of table (provider, method and columns) whose provider one argument names, as the
    name path compares names, by the unique key's index (its leading column); none for two arguments."""
    if len(name) != 1:
        return []
    return (
        conn.cursor(row_factory=dict_row)
        .execute(
            f"""select distinct on (payrail._normalize_name(pm.method)) {columns} from {table} as pm
                where payrail._normalize_name(pm.provider) = payrail._normalize_name(%s)
                order by payrail._normalize_name(pm.method)""",
            (name[0],),
        )
        .fetchall()
    )


def _one(rows: list[DictRow], name: Sequence[str], where: str, of_provider: Sequence[DictRow] = ()) -> DictRow:
    written = " / ".join(name)
    if not rows and len(of_provider) == 1:
        return of_provider[0]  # a provider's name, and it has one method: that record
    if not rows and of_provider:
        provider = of_provider[0]["provider"]
        shown = ", ".join(f'"{row["method"]}"' for row in of_provider[:10]) + (f" and {len(of_provider) - 10} more" if len(of_provider) > 10 else "")
        raise UnknownRecord(
            f'"{provider}" is a provider with {len(of_provider)} methods{where} ({shown}): name one, as "{provider} / {of_provider[0]["method"]}"; '
            f'`payrail-embedder list --text "{provider}"` lists them'
        )
    if not rows:
        raise UnknownRecord(f'no provider method is named "{written}"{where}, nor a provider; `payrail-embedder list` lists every record')
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
            f"""select n.* from ({_named(RECORDS, RECORD_COLUMNS)}) as n
                order by payrail._normalize_name(n.provider), payrail._normalize_name(n.method)""",
            {"name": list(name)},
        )
        .fetchall()
    )
    return _one(rows, name, "", [] if rows else _of_provider(conn, name, RECORDS, RECORD_COLUMNS))


def ids_named(conn: psycopg.Connection, name: str) -> list[int]:
    """The records one argument names for a bulk command: a record id (digits), one "Provider /
    Method", or a provider's name (every method it has). UnknownRecord when it names none."""
    if name.isascii() and name.isdigit():
        return [int(name)]
    rows = conn.execute(f"select n.id from ({_named(RECORDS, 'pm.id, pm.provider, pm.method')}) as n order by n.id", {"name": [name]}).fetchall()
    found = [row[0] for row in rows] or [row["id"] for row in _of_provider(conn, [name], RECORDS, "pm.id, pm.method")]
    if not found:
        _one([], [name], "")  # raises UnknownRecord in the words find_by_name uses
    return found


@dataclass(frozen=True)
class ShownRecord(Report):
    """`show`: one stored record, what it is to agents, and the advice on how it fits the editorial template."""

    row: dict
    advice: tuple[Advice, ...] = ()

    def to_json(self) -> dict:
        return {**as_json(self.row), "savedBy": self.row["saved_by"], "state": state_of(self.row), "advice": [item.to_json() for item in self.advice]}

    def describe(self) -> list[str]:
        row = self.row
        state = state_of(row)
        why = {
            "enabled": "agents can find it",
            "draft": "agents cannot find it: not enabled (`payrail-embedder enable` it)",
            "draft needing an embedding": "agents cannot find it: not enabled, and no embedding of its current content yet (`payrail-embedder sync`, then enable it)",
        }[state]
        return [
            f"{row['provider']} / {row['method']}",
            f"record {row['id']}, version {row['version']}, {state}: {why}",
            f"saved {row['updated_at'].isoformat()} by {row['saved_by']}",
            *(f"url: {url}" for url in row["urls"]),
            f"docs: {row['docs_url'] or 'none'}",
            "",
            row["guidance"],
            "",
            *advice_lines(self.advice),
        ]


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
    former = (
        []
        if rows
        else _of_provider(
            conn,
            name,
            "(select provider, method from payrail.provider_methods union all select provider, method from payrail.provider_method_history)",
            "pm.provider, pm.method",
        )
    )
    row = _one(rows, name, ", now or in the history", former)
    return row["provider"], row["method"]


def counts(conn: psycopg.Connection) -> dict:
    """What the registry holds: records, enabled, drafts and drafts without a current vector, and its model.

    {"schemaApplied": false} where db/ was never applied.
    """
    table, states, entries = one_row(
        conn.execute(
            "select pg_catalog.to_regclass('payrail.provider_methods'), pg_catalog.to_regclass(%s), pg_catalog.to_regclass(%s)",
            (RECORDS, LIST_ENTRIES),
        )
    )
    if table is None:
        return {"schemaApplied": False}
    # Counted from the list entries, which hold no vector. A registry from before them or before
    # the states view (its `db apply` is due) still says what it holds; which drafts lack a
    # current vector is the views' rule, so that count waits for the apply.
    needing = "count(*) filter (where not pm.enabled and not pm.has_current_vector)" if entries or states else "null"
    row = one_row(
        conn.cursor(row_factory=dict_row).execute(
            f"""
            select count(*) as records, count(*) filter (where pm.enabled) as enabled,
                   count(*) filter (where not pm.enabled) as drafts,
                   {needing} as drafts_needing_embedding
            from {entries or states or table} as pm
            """
        )
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


def registry_held(conn: psycopg.Connection) -> dict | None:
    """What agents can find after a change (counts), so drafts are never a surprise; None when the
    database cannot say (the change's own report says why)."""
    try:
        return counts(conn)
    except psycopg.Error:
        return None


def findable_in_words(held: dict) -> str | None:
    """What agents can find of a registry holding drafts (counts()' report), and why the drafts are
    drafts; None when every record is enabled (or there is none)."""
    drafts, needing = held.get("drafts", 0), held.get("draftsNeedingEmbedding", 0)
    if not drafts:
        return None
    reasons = []
    if drafts - needing:
        reasons.append(f"{drafts - needing:,} not enabled (`payrail-embedder enable`)")
    if needing:
        reasons.append(f"{needing:,} without an embedding of their current content yet (`payrail-embedder sync`, then enable)")
    return (
        f"agents can find {held['enabled']:,} of {held['records']:,} records; {drafts:,} {'is a draft' if drafts == 1 else 'are drafts'}: {', '.join(reasons)}"
    )


def findable_lines(held: dict | None) -> list[str]:
    """The line import's and sync's reports end with, where they asked what the registry holds
    and it holds drafts (findable_in_words); none otherwise."""
    findable = findable_in_words(held) if held else None
    return [findable] if findable else []


def all_drafts_in_words(held: dict) -> str | None:
    """What a search that found nothing says on standard error when every record is a draft; None otherwise."""
    if not held.get("records") or held.get("enabled"):
        return None
    records = f"{held['records']:,} record{'s' if held['records'] != 1 else ''}"
    return f"note: the registry holds {records} and every one is a draft: agents find none ({findable_in_words(held)})"


# What a record is to search: enabled, a draft with a vector of its current content by the
# registry's model (preview can place it), or a draft that has none yet: the records list's
# states (payrail.list_provider_methods says which a record is).
STATES = ("enabled", "draft", "draft needing an embedding")


def state_of(row: dict) -> str:
    """One of STATES, for a row with enabled and embedded."""
    if row["enabled"]:
        return "enabled"
    return "draft" if row["embedded"] else "draft needing an embedding"


def encode_cursor(row: dict) -> str:
    """Where a page starts or ends: the list order's key of its row (as the database computes
    it: lower() follows its collation), opaque in a URL."""
    key = [row["provider_key"], row["method_key"], row["id"]]
    return base64.urlsafe_b64encode(json.dumps(key, ensure_ascii=False).encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[str, str, int]:
    """The key encode_cursor wrote; ValueError for anything else (a URL is anyone's to write)."""
    try:
        key = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise ValueError("not a page cursor") from None
    if not (isinstance(key, list) and len(key) == 3 and isinstance(key[0], str) and isinstance(key[1], str)):
        raise ValueError("not a page cursor")
    # A record id is a bigint: another number is no row's key.
    if type(key[2]) is not int or not -(2**63) <= key[2] < 2**63 or "\x00" in key[0] + key[1]:
        raise ValueError("not a page cursor")
    return key[0], key[1], key[2]


@dataclass(frozen=True)
class RecordsPage:
    # The records of the page, in the list order, each with its state.
    rows: list[dict]
    # Cursors for the pages before and after this one; None where there is none.
    before: str | None
    after: str | None
    # How many records the filters match, on every page; None without a filter.
    matching: int | None = None


def check_state(state: str | None) -> None:
    """ValueError for a state the records list has not (one of STATES, or None)."""
    if state is not None and state not in STATES:
        raise ValueError(f"unknown state {state!r}; states are {', '.join(STATES)}")


LIST = SelfPinned("select * from payrail.list_provider_methods(%s, %s, %s, %s, %s, %s, %s)")


def list_records(
    conn: psycopg.Connection,
    text: str = "",
    state: str | None = None,
    *,
    after: str | None = None,
    before: str | None = None,
    limit: int | None = None,
) -> RecordsPage:
    """A page of records (get's columns but the text, and its state), by provider and method
    ignoring case: the first `limit` (every one when None), or those after or before a cursor.
    text: only those whose provider, method, guidance, URLs or docs URL contain it, ignoring case;
    state: only those in it. ValueError for an unknown state or a cursor that is not one.

    payrail.list_provider_methods reads the page in one statement: unfiltered a walk of
    provider_methods_list_order_idx; filtered one scan of the narrow list entries (the same before
    and after ANALYZE) that also counts the matches, then the page's records by id."""
    check_state(state)
    backwards = before is not None
    given = before if backwards else after
    cursor: tuple[str | None, str | None, int | None] = decode_cursor(given) if given is not None else (None, None, None)
    text = text.replace("\x00", "")  # PostgreSQL text cannot hold it; no record does
    # One more than the page: whether there is another after it.
    found = conn.cursor(row_factory=dict_row).execute(LIST, (text or None, state, limit + 1 if limit is not None else None, *cursor, backwards)).fetchall()
    matching = found[0]["matching"] if found and (text or state is not None) else None
    rows = [row for row in found if row["id"] is not None]
    more = limit is not None and len(rows) > limit
    rows = rows[:limit] if limit is not None else rows
    if backwards:
        rows.reverse()
    has_before = more if backwards else cursor[2] is not None
    has_after = cursor[2] is not None if backwards else more
    return RecordsPage(
        rows,
        encode_cursor(rows[0]) if rows and has_before else None,
        encode_cursor(rows[-1]) if rows and has_after else None,
        matching,
    )
