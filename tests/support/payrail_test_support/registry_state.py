"""What a registry holds, as comparable values: its catalog (every definition, grant and comment
db/ makes), its rows, its group roles and what agents get from it. Tests compare them across
`db apply` runs, dumps and restores, and PostgreSQL upgrades."""

from __future__ import annotations

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from payrail_embedder.embedders import Embedder
from payrail_embedder.postgres.connection import connect
from payrail_embedder.registry import search

# Everything db/ defines that a client or an operator relies on, as comparable text.
CATALOG_FINGERPRINT = """
with payrail_tables as (
  select c.oid from pg_catalog.pg_class as c where c.relnamespace = 'payrail'::regnamespace
)
select kind, name, definition from (
  select 'function' as kind, p.oid::regprocedure::text as name,
         concat_ws(E'\n', pg_catalog.pg_get_functiondef(p.oid), p.proacl::text,
                   pg_catalog.obj_description(p.oid, 'pg_proc')) as definition
  from pg_catalog.pg_proc as p
  where p.pronamespace = 'payrail'::regnamespace
  union all
  select 'constraint', con.conrelid::regclass::text || '.' || con.conname, pg_catalog.pg_get_constraintdef(con.oid)
  from pg_catalog.pg_constraint as con
  where con.connamespace = 'payrail'::regnamespace
  union all
  select 'trigger', t.tgrelid::regclass::text || '.' || t.tgname, pg_catalog.pg_get_triggerdef(t.oid)
  from pg_catalog.pg_trigger as t
  where not t.tgisinternal and t.tgrelid in (select oid from payrail_tables)
  union all
  select 'index', i.indexrelid::regclass::text, pg_catalog.pg_get_indexdef(i.indexrelid)
  from pg_catalog.pg_index as i
  where i.indrelid in (select oid from payrail_tables)
  union all
  select 'column', a.attrelid::regclass::text || '.' || a.attname,
         concat_ws(' ', pg_catalog.format_type(a.atttypid, a.atttypmod), a.attnotnull, a.attgenerated, a.attidentity,
                   a.attstorage, a.attcompression, pg_catalog.pg_get_expr(d.adbin, d.adrelid), a.attacl::text,
                   pg_catalog.col_description(a.attrelid, a.attnum))
  from pg_catalog.pg_attribute as a
  left join pg_catalog.pg_attrdef as d on (d.adrelid, d.adnum) = (a.attrelid, a.attnum)
  where a.attrelid in (select oid from payrail_tables) and a.attnum > 0 and not a.attisdropped
  union all
  select 'relation', c.oid::regclass::text,
         -- An ACL that says what the default says (the owner's privileges alone) is dumped as
         -- nothing and restored as NULL: the same to both.
         concat_ws(' ', c.relkind, c.reloptions::text,
                   coalesce(c.relacl, pg_catalog.acldefault((case c.relkind when 'S' then 's' else 'r' end)::"char", c.relowner))::text,
                   pg_catalog.obj_description(c.oid, 'pg_class'))
  from pg_catalog.pg_class as c
  where c.oid in (select oid from payrail_tables)
  union all
  select 'schema', n.nspname, concat_ws(' ', n.nspacl::text, pg_catalog.obj_description(n.oid, 'pg_namespace'))
  from pg_catalog.pg_namespace as n
  where n.nspname = 'payrail'
  union all
  select 'extension', e.extname, concat_ws(' ', e.extnamespace::regnamespace::text, e.extversion)
  from pg_catalog.pg_extension as e
) as catalog
order by kind, name
"""


# The group roles as the server holds them (a database's dump holds none).
GROUP_ROLES = """
select r.rolname, r.rolsuper, r.rolinherit, r.rolcreaterole, r.rolcreatedb, r.rolcanlogin, r.rolreplication,
       r.rolbypassrls, r.rolconnlimit, pg_catalog.shobj_description(r.oid, 'pg_authid') as comment
from pg_catalog.pg_roles as r
where r.rolname in ('payrail_agent', 'payrail_operator', 'payrail_embedder')
order by 1
"""


def fingerprint(url: str) -> list[tuple[str, str, str]]:
    with psycopg.connect(url) as conn:
        return conn.execute(CATALOG_FINGERPRINT).fetchall()


def rows(url: str) -> dict[str, list[str]]:
    """Every row of every table of the registry, and where each of its sequences stands, as text."""
    with psycopg.connect(url) as conn:
        relations = conn.execute(
            "select c.oid::regclass::text, c.relkind from pg_catalog.pg_class as c"
            " where c.relnamespace = 'payrail'::regnamespace and c.relkind in ('r', 'S') order by 1"
        ).fetchall()
        query = {"r": "select r::text from {} as r order by 1", "S": "select concat_ws(' ', last_value, is_called) from {}"}
        return {name: [row for (row,) in conn.execute(sql.SQL(query[kind]).format(sql.SQL(name)))] for name, kind in relations}


def group_roles(url: str) -> list[dict]:
    with psycopg.connect(url, row_factory=dict_row) as conn:
        return conn.execute(GROUP_ROLES).fetchall()


def agent_answers(url: str, embedder: Embedder, queries: list[str]) -> dict[str, list[dict]]:
    """What an agent (payrail_agent) gets for each query."""
    with connect(url, autocommit=True) as conn:
        conn.execute("set role payrail_agent")
        return {query: [match.to_json() for match in search.search_provider_methods(search.holding(conn), lambda: embedder, query)] for query in queries}
