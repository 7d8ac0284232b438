create schema if not exists payrail;

comment on schema payrail is
$$Payrail Agent Search: the discovery registry of provider methods.

Tables hold one row per provider method; functions hold the rules and the search.
See README.md and db/ERRCODES.md.$$;

-- The registry's search path: pg_catalog first, so nothing shadows a built-in; the registry;
-- pgvector's schema, named (public, or "extensions" on managed services); pg_temp last, so a
-- temporary object never shadows a table. No other schema: nothing a role can create elsewhere is
-- ever resolved by the registry's code. Every function pins it ("set search_path from current"),
-- every db/ file starts by setting it (so one file rerun alone leaves the same catalog), and
-- payrail-embedder runs every transaction of its own on it. Its body is bound when this file
-- runs, on the deployer's path (the path is set below), so its operators are qualified.
create or replace function payrail._search_path()
returns text
language sql
stable
security invoker
set search_path = pg_catalog, pg_temp
return (select pg_catalog.format('pg_catalog, payrail, %I, pg_temp', n.nspname)
        from pg_catalog.pg_extension as e
        join pg_catalog.pg_namespace as n on n.oid operator(pg_catalog.=) e.extnamespace
        where e.extname operator(pg_catalog.=) 'vector');

comment on function payrail._search_path() is
$$The search path of the registry's functions, files and sessions: pg_catalog, payrail, pgvector's schema, pg_temp.$$;

do $$ begin perform pg_catalog.set_config('search_path', payrail._search_path(), false); end $$;

-- A schema on that path that a role other than the deployer (or a superuser) could create
-- objects in would let it plant an operator or function that the registry's code, run by another
-- role, resolves. Refuse, naming the fix, before anything else is installed.
do $$
declare
  v_unsafe record;
begin
  select n.nspname, w.writer into v_unsafe
  from pg_catalog.pg_namespace as n,
  lateral (
    -- PUBLIC first: when every role may create, the fix is to revoke it from PUBLIC.
    select 1 as rank, 'every role (PUBLIC)' as writer
    where exists (
      select from pg_catalog.aclexplode(coalesce(n.nspacl, pg_catalog.acldefault('n', n.nspowner))) as a
      where a.grantee = 0 and a.privilege_type = 'CREATE')
    union all
    select 2, pg_catalog.quote_ident(r.rolname)
    from pg_catalog.pg_roles as r
    where not r.rolsuper
      and not pg_catalog.pg_has_role(r.oid, current_user, 'MEMBER')
      and pg_catalog.has_schema_privilege(r.oid, n.oid, 'CREATE')
      and (pg_catalog.pg_has_role(r.oid, 'payrail_agent', 'MEMBER')
           or pg_catalog.pg_has_role(r.oid, 'payrail_operator', 'MEMBER')
           or pg_catalog.pg_has_role(r.oid, 'payrail_embedder', 'MEMBER'))
  ) as w
  where n.nspname = 'payrail'
     or n.oid = (select e.extnamespace from pg_catalog.pg_extension as e where e.extname = 'vector')
  order by n.nspname, w.rank, w.writer
  limit 1;
  if found then
    raise exception using
      errcode = 'object_not_in_prerequisite_state',
      message = pg_catalog.format(
        'schema %I is on the registry''s search path, and %s can create objects in it: it could plant operators or functions that run as another role',
        v_unsafe.nspname, v_unsafe.writer),
      hint = pg_catalog.format(
        'Run "revoke create on schema %I from %s;" (PostgreSQL 15''s default for public), or install pgvector in a schema only its owner writes, then apply again.',
        v_unsafe.nspname, case when v_unsafe.writer like 'every role%' then 'public' else v_unsafe.writer end);
  end if;
end
$$;
