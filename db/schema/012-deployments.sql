-- The registry's search path (010-schema.sql), so this file alone, rerun, leaves the same catalog.
do $$ begin perform pg_catalog.set_config('search_path', payrail._search_path(), false); end $$;

-- The deploy's record: what was applied (which version, when, by whom), the one-time upgrade
-- steps already run (db/upgrades/) and the template every step runs through. db/CONVENTIONS.md,
-- "Deploys", says how `db apply` uses them; psql's db/install.sql runs the same files. The helpers
-- that change a table only when its definition changed are 011-ddl_helpers.sql.

-- Whether this run creates the registry: a new registry is built by the current definitions, so it
-- needs none of the upgrade steps (payrail._run_upgrade_step records them as not needed).
do $$
begin
  perform pg_catalog.set_config('payrail.new_registry',
    (pg_catalog.to_regclass('payrail.provider_methods') is null)::text, false);
end
$$;

create table if not exists payrail.deployments (
  id bigint generated always as identity,
  applied_at timestamptz not null default pg_catalog.now(),
  applied_by text not null,
  applied_with text not null,
  product_version text,
  db_digest text,
  catalog_fingerprint text not null,
  postgres_version text not null,
  pgvector_version text not null,
  upgrades text[] not null,
  completed_at timestamptz,
  constraint deployments_pkey primary key (id)
);

comment on table payrail.deployments is
$$Every apply of db/ that ran its files: which version, when, by whom; the latest row is the schema version the registry holds.

Written by payrail._record_deployment(), the last step of db/install.sql and of
`payrail-embedder db apply`; an apply that finds the registry current writes nothing. No role but
the deployer (the owner) reads or locks it: `db apply` takes this table's EXCLUSIVE lock so two
applies never interleave. payrail.get_schema_version() tells any registry role what it holds.$$;
comment on column payrail.deployments.id is 'Order of the applies: the highest is the schema the registry holds.';
comment on column payrail.deployments.applied_at is 'When the apply''s transaction started.';
comment on column payrail.deployments.applied_by is 'Login that applied it (session_user).';
comment on column payrail.deployments.applied_with is 'The client''s application_name: payrail-embedder for `db apply`, psql for db/install.sql.';
comment on column payrail.deployments.product_version is 'payrail-agent-search''s version that applied it; NULL when applied with psql.';
comment on column payrail.deployments.db_digest is
  'SHA-256 of the db/ files applied, as `payrail-embedder db apply` computes it; NULL when applied with psql.';
comment on column payrail.deployments.catalog_fingerprint is
  'payrail._catalog_fingerprint() right after the apply: a later difference means the definitions were changed by hand.';
comment on column payrail.deployments.postgres_version is 'PostgreSQL''s server_version then.';
comment on column payrail.deployments.pgvector_version is 'The vector extension''s version then.';
comment on column payrail.deployments.upgrades is 'The one-time upgrade steps (db/upgrades/) this apply ran.';
comment on column payrail.deployments.completed_at is
$$When the apply's follow-up work was done: constraints validated, search's derived rows checked.

`db apply` does it after the schema's transaction, in short transactions of its own; NULL while
it has not (an apply that stopped there: the next `db apply` does it).$$;

-- Two applies never interleave: `db apply` takes this lock (waiting at most its lock_timeout) before
-- it runs any file; psql's install waits for it here.
do $$ begin lock table payrail.deployments in exclusive mode; end $$;

create table if not exists payrail.applied_upgrades (
  name text,
  applied_at timestamptz not null default pg_catalog.now(),
  applied_by text not null,
  ran boolean not null,
  constraint applied_upgrades_pkey primary key (name)
);

comment on table payrail.applied_upgrades is
$$The one-time upgrade steps of db/upgrades/ this registry has had: each runs once, then never again.$$;
comment on column payrail.applied_upgrades.name is 'The step: its file name without .sql (db/upgrades/NNN-name.sql).';
comment on column payrail.applied_upgrades.applied_at is 'When it ran (or was found not needed).';
comment on column payrail.applied_upgrades.applied_by is 'Login that applied it (session_user).';
comment on column payrail.applied_upgrades.ran is
  'false where the registry was created by a version that already had what the step brings: it had nothing to do.';

create or replace function payrail._run_upgrade_step(p_name text, p_body text)
returns void
language plpgsql
volatile
security invoker
set search_path from current
as $$
declare
  v_new_registry boolean := coalesce(pg_catalog.current_setting('payrail.new_registry', true), '') operator(pg_catalog.=) 'true';
begin
  if exists (select from payrail.applied_upgrades where name operator(pg_catalog.=) p_name) then
    return;
  end if;
  insert into payrail.applied_upgrades (name, applied_by, ran) values (p_name, session_user, not v_new_registry);
  if not v_new_registry then
    execute pg_catalog.format('do %L', p_body);
  end if;
end
$$;

comment on function payrail._run_upgrade_step(text, text) is
$$Runs the upgrade step p_name (db/upgrades/p_name.sql), whose PL/pgSQL block is p_body, once per registry, and records it.

The one guard-and-record every step goes through: a registry that had the step skips it; a
registry this apply creates records it as not needed (the current definitions already hold what
it brings). The block runs on the registry's search path, in the apply's transaction, so a step
that fails is not recorded. A shipped step never changes (tests/sql/test_sql_files.py keeps their
hashes): what changes later is a new step.$$;

create or replace function payrail._catalog_definitions()
returns table (kind text, name text, definition text)
language sql
stable
security invoker
set search_path from current
as $$
  with tables as (
    select c.oid from pg_catalog.pg_class as c where c.relnamespace operator(pg_catalog.=) 'payrail'::pg_catalog.regnamespace
  )
  select 'function', p.oid::pg_catalog.regprocedure::text,
         pg_catalog.concat_ws(E'\n', pg_catalog.pg_get_functiondef(p.oid), p.proacl::text,
                              pg_catalog.obj_description(p.oid, 'pg_proc'))
  from pg_catalog.pg_proc as p
  where p.pronamespace operator(pg_catalog.=) 'payrail'::pg_catalog.regnamespace
  union all
  select 'constraint', c.conrelid::pg_catalog.regclass::text operator(pg_catalog.||) '.' operator(pg_catalog.||) c.conname, payrail._definition_of(c.conrelid, c.conname)
  from pg_catalog.pg_constraint as c
  where c.connamespace operator(pg_catalog.=) 'payrail'::pg_catalog.regnamespace and c.contype operator(pg_catalog.<>) 't'
  union all
  select 'trigger', t.tgrelid::pg_catalog.regclass::text operator(pg_catalog.||) '.' operator(pg_catalog.||) t.tgname,
         pg_catalog.concat_ws(' ', pg_catalog.pg_get_triggerdef(t.oid), t.tgenabled)
  from pg_catalog.pg_trigger as t
  where not t.tgisinternal and t.tgrelid operator(pg_catalog.=) any (select oid from tables)
  union all
  select 'index', i.indexrelid::pg_catalog.regclass::text, pg_catalog.pg_get_indexdef(i.indexrelid)
  from pg_catalog.pg_index as i
  where i.indrelid operator(pg_catalog.=) any (select oid from tables)
  union all
  select 'column', a.attrelid::pg_catalog.regclass::text operator(pg_catalog.||) '.' operator(pg_catalog.||) a.attname,
         pg_catalog.concat_ws(' ', pg_catalog.format_type(a.atttypid, a.atttypmod), a.attnotnull, a.attgenerated,
                              a.attidentity, a.attstorage, a.attcompression, pg_catalog.pg_get_expr(d.adbin, d.adrelid),
                              a.attacl::text, pg_catalog.col_description(a.attrelid, a.attnum))
  from pg_catalog.pg_attribute as a
  left join pg_catalog.pg_attrdef as d on (d.adrelid, d.adnum) operator(pg_catalog.=) (a.attrelid, a.attnum)
  where a.attrelid operator(pg_catalog.=) any (select oid from tables) and a.attnum operator(pg_catalog.>) 0 and not a.attisdropped
  union all
  -- A table's ACL that says what the default says (its owner's privileges alone: deployments) is
  -- dumped as nothing and restored as NULL: the same to both.
  select 'relation', c.oid::pg_catalog.regclass::text,
         pg_catalog.concat_ws(' ', c.relkind,
                              coalesce(c.relacl, pg_catalog.acldefault((case when c.relkind operator(pg_catalog.=) 'S' then 's' else 'r' end)::"char", c.relowner))::text,
                              c.reloptions::text, pg_catalog.obj_description(c.oid, 'pg_class'))
  from pg_catalog.pg_class as c
  where c.oid operator(pg_catalog.=) any (select oid from tables)
  union all
  select 'schema', n.nspname::text, pg_catalog.concat_ws(' ', n.nspacl::text, pg_catalog.obj_description(n.oid, 'pg_namespace'))
  from pg_catalog.pg_namespace as n
  where n.nspname operator(pg_catalog.=) 'payrail'
  union all
  select 'role', r.rolname::text, pg_catalog.concat_ws(' ', r.rolcanlogin, r.rolsuper, pg_catalog.shobj_description(r.oid, 'pg_authid'))
  from pg_catalog.pg_roles as r
  where r.rolname operator(pg_catalog.=) any (array['payrail_agent', 'payrail_operator', 'payrail_embedder'])
  union all
  select 'extension', e.extname::text, pg_catalog.concat_ws(' ', e.extnamespace::pg_catalog.regnamespace::text, e.extversion)
  from pg_catalog.pg_extension as e
  where e.extname operator(pg_catalog.=) 'vector'
$$;

comment on function payrail._catalog_definitions() is
$$Everything db/ defines, as the catalog prints it: functions, constraints, triggers, indexes, columns, tables, the schema, the roles, pgvector.

Its digest (payrail._catalog_fingerprint) is recorded by every apply; a later difference means
someone changed a definition by hand, or pgvector was updated, and `db status` says an apply is due.$$;

create or replace function payrail._catalog_fingerprint()
returns text
language sql
stable
security invoker
set search_path from current
return (select pg_catalog.encode(pg_catalog.sha256(pg_catalog.convert_to(
                 pg_catalog.string_agg(d.kind operator(pg_catalog.||) ' ' operator(pg_catalog.||) d.name operator(pg_catalog.||) E'\n' operator(pg_catalog.||) coalesce(d.definition, ''), E'\n' order by d.kind, d.name),
                 'UTF8')), 'hex')
        from payrail._catalog_definitions() as d);

comment on function payrail._catalog_fingerprint() is
$$SHA-256 of payrail._catalog_definitions(): what deployments.catalog_fingerprint records.$$;

create or replace function payrail._record_deployment()
returns bigint
language plpgsql
volatile
security invoker
set search_path from current
as $$
declare
  v_id bigint;
begin
  insert into payrail.deployments
    (applied_by, applied_with, product_version, db_digest, catalog_fingerprint, postgres_version, pgvector_version,
     upgrades, completed_at)
  select session_user, pg_catalog.current_setting('application_name'),
         case when pg_catalog.current_setting('payrail.product_version', true) operator(pg_catalog.<>) ''
              then pg_catalog.current_setting('payrail.product_version', true) end,
         case when pg_catalog.current_setting('payrail.db_digest', true) operator(pg_catalog.<>) ''
              then pg_catalog.current_setting('payrail.db_digest', true) end,
         payrail._catalog_fingerprint(), pg_catalog.current_setting('server_version'),
         (select e.extversion from pg_catalog.pg_extension as e where e.extname operator(pg_catalog.=) 'vector'),
         -- The steps this transaction ran: recorded at its start time, now().
         coalesce((select pg_catalog.array_agg(u.name order by u.name) from payrail.applied_upgrades as u
                   where u.ran and u.applied_at operator(pg_catalog.=) pg_catalog.now()), '{}'),
         -- Everything was done inside this transaction, but for `db apply`'s follow-up.
         case when payrail._deploy_mode() operator(pg_catalog.=) '' then pg_catalog.now() end
  returning id into v_id;
  return v_id;
end
$$;

comment on function payrail._record_deployment() is
$$Records this apply in payrail.deployments (the last step of every apply of db/); returns its id.$$;

create or replace function payrail.get_schema_version()
returns table (
  product_version text,
  db_digest text,
  applied_at timestamptz,
  applied_by text,
  applied_with text,
  postgres_version text,
  pgvector_version text,
  completed_at timestamptz,
  definitions_changed boolean,
  constraints_not_validated text[]
)
language sql
stable
security definer
set search_path from current
as $$
  select d.product_version, d.db_digest, d.applied_at, d.applied_by, d.applied_with, d.postgres_version, d.pgvector_version,
         d.completed_at, d.catalog_fingerprint operator(pg_catalog.<>) payrail._catalog_fingerprint(),
         (select coalesce(pg_catalog.array_agg(c.conrelid::pg_catalog.regclass::text operator(pg_catalog.||) '.' operator(pg_catalog.||) c.conname order by 1), '{}')
          from pg_catalog.pg_constraint as c
          where c.connamespace operator(pg_catalog.=) 'payrail'::pg_catalog.regnamespace and not c.convalidated)
  from payrail.deployments as d
  order by d.id desc
  limit 1
$$;

comment on function payrail.get_schema_version() is
$$The schema version the registry holds: its last apply (which product version and db/ digest, when, by whom, with what), and whether anything changed since.

No row before the first apply by a version that records it. definitions_changed: the catalog
no longer matches what that apply left (a definition changed by hand, or pgvector updated);
constraints_not_validated and a NULL completed_at: that apply's follow-up is not done. Any of
these, or another db/ digest, means `payrail-embedder db apply` is due (`db status` says so).$$;
