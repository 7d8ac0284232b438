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

-- A schema on that path that a role other than its owner, the deployer or a superuser can create
-- objects in would let that role plant an operator or a function that the registry's code, run
-- by another role, might resolve: db apply refuses before anything else is installed, and again
-- on every apply (a current registry's too, deploy.py), and `db status` names each writer.
-- Pinned to pg_catalog alone, operators included: it runs while such a schema may be writable.
create or replace function payrail._search_path_writers()
returns table (schema_name text, writer text, fix text)
language sql
stable
security invoker
set search_path = pg_catalog, pg_temp
as $$
  -- The deployer: the registry's owner, or the role creating it now.
  with deployer as (
    select coalesce((select n.nspowner from pg_catalog.pg_namespace as n where n.nspname operator(pg_catalog.=) 'payrail'),
                    (select r.oid from pg_catalog.pg_roles as r where r.rolname operator(pg_catalog.=) current_user)) as oid
  ),
  grants as (
    select n.nspname, n.nspowner, a.grantee
    from pg_catalog.pg_namespace as n,
         pg_catalog.aclexplode(coalesce(n.nspacl, pg_catalog.acldefault('n', n.nspowner))) as a
    where a.privilege_type operator(pg_catalog.=) 'CREATE'
      and (n.nspname operator(pg_catalog.=) 'payrail'
           or n.oid operator(pg_catalog.=) (select e.extnamespace from pg_catalog.pg_extension as e
                                            where e.extname operator(pg_catalog.=) 'vector'))
  )
  select w.schema_name, w.writer, w.fix
  from (
    -- PUBLIC first: when every role may create, the fix is to revoke it from PUBLIC.
    select g.nspname::text, 'every role (PUBLIC)', pg_catalog.format('revoke create on schema %I from public;', g.nspname), 1
    from grants as g
    where g.grantee operator(pg_catalog.=) 0
    union all
    -- A role holding the grant (its members inherit it): neither a superuser, nor one that can act
    -- as the schema's owner or as the deployer.
    select g.nspname::text, r.rolname::text, pg_catalog.format('revoke create on schema %I from %I;', g.nspname, r.rolname), 2
    from grants as g
    join pg_catalog.pg_roles as r on r.oid operator(pg_catalog.=) g.grantee
    where not r.rolsuper
      and not pg_catalog.pg_has_role(r.oid, g.nspowner, 'MEMBER')
      and not pg_catalog.pg_has_role(r.oid, (select d.oid from deployer as d), 'MEMBER')
  ) as w(schema_name, writer, fix, rank)
  order by w.schema_name, w.rank, w.writer
$$;

comment on function payrail._search_path_writers() is
$$Who could plant objects on the registry's search path: each role but the schema's owner, the deployer and superusers (or PUBLIC) that can create objects in payrail or pgvector's schema.

One row per schema and writer, with the statement that stops it (fix). `db apply` refuses to run
while there is one (payrail._refuse_writable_search_path), `db status` lists them.$$;

create or replace function payrail._refuse_writable_search_path()
returns void
language plpgsql
stable
security invoker
set search_path = pg_catalog, pg_temp
as $$
declare
  v_writer record;
begin
  select * into v_writer from payrail._search_path_writers() limit 1;
  if found then
    raise exception using
      errcode = 'object_not_in_prerequisite_state',
      message = pg_catalog.format(
        'schema %I is on the registry''s search path, and %s can create objects in it: it could plant operators or functions that run as another role',
        v_writer.schema_name, v_writer.writer),
      hint = pg_catalog.format(
        'Run "%s" (PostgreSQL 15''s default for public), or install pgvector in a schema only its owner writes, then apply again.',
        v_writer.fix);
  end if;
end
$$;

comment on function payrail._refuse_writable_search_path() is
$$Raises object_not_in_prerequisite_state (55000), naming the schema, the writer and the fix, when a role could plant objects on the registry's search path (payrail._search_path_writers).$$;

select payrail._refuse_writable_search_path();
