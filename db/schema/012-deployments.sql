-- The registry's search path (010-schema.sql), so this file alone, rerun, leaves the same catalog.
do $$ begin perform pg_catalog.set_config('search_path', payrail._search_path(), false); end $$;

-- What a deploy needs before anything else runs: the record of what was applied (which version,
-- when, by whom), the one-time upgrade steps already run (db/upgrades/), and the helpers that let
-- the idempotent files change a table only when its definition changed. db/CONVENTIONS.md,
-- "Deploys", says how `db apply` uses them; psql's db/install.sql runs the same files.

-- Whether this run creates the registry: a new registry is built by the current definitions, so it
-- needs none of the upgrade steps (payrail._upgrade_due records them as not needed).
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

create or replace function payrail._deploy_mode()
returns text
language sql
stable
security invoker
set search_path from current
return coalesce(pg_catalog.current_setting('payrail.deploy_mode', true), '');

comment on function payrail._deploy_mode() is
$$How this transaction applies db/: '' (psql, or one file alone: everything at once), 'shared' or 'exclusive' (`db apply`).

`db apply` sets it. 'shared': it holds SHARE ROW EXCLUSIVE locks on the registry's tables, which
searches never wait for, so a change that needs more raises PYD01 (payrail._needs_exclusive_lock)
and `db apply` starts again holding ACCESS EXCLUSIVE locks ('exclusive'). In both, constraints
are validated after the transaction, and search's derived rows repaired where the apply changed
how they are derived (db apply's follow-up).$$;

create or replace function payrail._needs_exclusive_lock(p_table regclass, p_change text)
returns void
language plpgsql
stable
security invoker
set search_path from current
as $$
begin
  -- A table this transaction created (or already holds exclusively) is nobody else's yet.
  if payrail._deploy_mode() operator(pg_catalog.=) 'shared'
     and not exists (select from pg_catalog.pg_locks
                     where pid operator(pg_catalog.=) pg_catalog.pg_backend_pid() and relation operator(pg_catalog.=) p_table and mode operator(pg_catalog.=) 'AccessExclusiveLock') then
    raise exception using
      errcode = 'PYD01',
      message = pg_catalog.format('%s: this needs an ACCESS EXCLUSIVE lock on %s', p_change, p_table),
      hint = '`payrail-embedder db apply` starts again holding the registry''s tables exclusively; nothing was changed.';
  end if;
end
$$;

comment on function payrail._needs_exclusive_lock(regclass, text) is
$$Called before a change that takes an ACCESS EXCLUSIVE lock on p_table (searches wait for it): raises PYD01 in `db apply`'s shared mode, so it starts again holding the locks it needs, taken up front in the searches' order.$$;

create or replace function payrail._definition_of(p_table regclass, p_name name)
returns text
language sql
stable
security invoker
set search_path from current
-- A trigger's definition, else a constraint's (validated or not: the same definition).
return coalesce(
  (select pg_catalog.pg_get_triggerdef(t.oid) from pg_catalog.pg_trigger as t where t.tgrelid operator(pg_catalog.=) p_table and t.tgname operator(pg_catalog.=) p_name),
  (select pg_catalog.regexp_replace(pg_catalog.pg_get_constraintdef(c.oid), ' NOT VALID$', '')
   from pg_catalog.pg_constraint as c where c.conrelid operator(pg_catalog.=) p_table and c.conname operator(pg_catalog.=) p_name));

comment on function payrail._definition_of(regclass, name) is
$$The definition of the trigger or constraint p_name of p_table as the catalog prints it; NULL when there is none.$$;

create or replace function payrail._replace_check_constraint(p_table regclass, p_name name, p_check text, p_why text)
returns void
language plpgsql
volatile
security invoker
set search_path from current
as $$
begin
  perform payrail._needs_exclusive_lock(p_table, p_why);
  -- NOT VALID: adding it then holds the table's exclusive lock for an instant. Validating reads
  -- every row under a lock that blocks neither searches nor edits: `db apply` does it after its
  -- transaction, a file run alone (psql) at once.
  execute pg_catalog.format('alter table %s drop constraint if exists %I, add constraint %I %s not valid',
                            p_table, p_name, p_name, p_check);
  if payrail._deploy_mode() operator(pg_catalog.=) '' then
    execute pg_catalog.format('alter table %s validate constraint %I', p_table, p_name);
  end if;
end
$$;

comment on function payrail._replace_check_constraint(regclass, name, text, text) is
$$Replaces p_table's constraint p_name by one with p_check, added NOT VALID and validated after the apply's transaction (at once when run alone); p_why says why, if it needs a lock db apply does not hold.$$;

create or replace function payrail._probed_definition(p_table regclass, p_name name, p_create text)
returns text
language plpgsql
volatile
security invoker
set search_path from current
as $$
declare
  v_probe regclass;
  v_definition text;
begin
  -- The catalog prints a definition in one way whatever way it was written: so the new one is made
  -- on an empty copy of the table's columns and printed, for the caller to compare with the one
  -- the table has. The copy lives only inside this call, and its name is the table's in the print.
  drop table if exists payrail._deploy_probe;
  execute pg_catalog.format('create table payrail._deploy_probe (like %s)', p_table);
  v_probe := pg_catalog.to_regclass('payrail._deploy_probe');
  execute pg_catalog.format(p_create, p_name, v_probe);
  v_definition := pg_catalog.replace(payrail._definition_of(v_probe, p_name), v_probe::text, p_table::text);
  drop table payrail._deploy_probe;
  return v_definition;
end
$$;

comment on function payrail._probed_definition(regclass, name, text) is
$$What p_create (a format() string: %1$I the name, %2$s the table) would make of trigger or constraint p_name on p_table, as the catalog would print it; made on an empty copy of p_table, not on p_table.$$;

create or replace function payrail._ensure_check_constraint(p_table regclass, p_name name, p_check text)
returns void
language plpgsql
volatile
security invoker
set search_path from current
as $$
declare
  v_wanted text;
  v_found text;
begin
  -- p_check goes into a format() string: its own % are doubled.
  v_wanted := payrail._probed_definition(p_table, p_name, 'alter table %2$s add constraint %1$I ' operator(pg_catalog.||) pg_catalog.replace(p_check, '%', '%%'));
  v_found := payrail._definition_of(p_table, p_name);
  -- "is distinct from", spelt out with qualified operators (db/CONVENTIONS.md).
  if coalesce(v_wanted operator(pg_catalog.<>) v_found, (v_wanted is null) operator(pg_catalog.<>) (v_found is null)) then
    perform payrail._replace_check_constraint(p_table, p_name, p_check, pg_catalog.format('%s is new or changed', p_name));
  elsif payrail._deploy_mode() operator(pg_catalog.=) '' and exists (
      select from pg_catalog.pg_constraint where conrelid operator(pg_catalog.=) p_table and conname operator(pg_catalog.=) p_name and not convalidated) then
    -- Left not valid by an apply whose follow-up did not finish.
    execute pg_catalog.format('alter table %s validate constraint %I', p_table, p_name);
  end if;
end
$$;

comment on function payrail._ensure_check_constraint(regclass, name, text) is
$$Gives p_table the constraint p_name with p_check (e.g. 'check (version >= 1)'), replacing it only when its definition changed.

Unchanged definitions take no lock on p_table, so a rerun of db/ leaves searches and edits alone.$$;

create or replace function payrail._ensure_trigger(p_table regclass, p_name name, p_create text)
returns void
language plpgsql
volatile
security invoker
set search_path from current
as $$
declare
  v_wanted text;
  v_found text;
begin
  v_wanted := payrail._probed_definition(p_table, p_name, p_create);
  v_found := payrail._definition_of(p_table, p_name);
  -- "is distinct from", spelt out with qualified operators (db/CONVENTIONS.md).
  if coalesce(v_wanted operator(pg_catalog.<>) v_found, (v_wanted is null) operator(pg_catalog.<>) (v_found is null)) then
    -- Constraint triggers cannot be created "or replace": dropped first, under an exclusive lock.
    perform payrail._needs_exclusive_lock(p_table, pg_catalog.format('%s is new or changed', p_name));
    execute pg_catalog.format('drop trigger if exists %I on %s', p_name, p_table);
    execute pg_catalog.format(p_create, p_name, p_table);
  end if;
end
$$;

comment on function payrail._ensure_trigger(regclass, name, text) is
$$Gives p_table the trigger p_name that p_create makes (a format() string: %1$I the name, %2$s the table), replacing it only when its definition changed.$$;

create or replace function payrail._ensure_storage(p_table regclass, p_column name, p_storage text, p_compression text default null)
returns void
language plpgsql
volatile
security invoker
set search_path from current
as $$
declare
  v_column pg_catalog.pg_attribute;
  -- pg_attribute's letter for the storage: p, e, x or m.
  v_storage "char" := case when p_storage operator(pg_catalog.=) 'plain' then 'p' when p_storage operator(pg_catalog.=) 'external' then 'e'
                           when p_storage operator(pg_catalog.=) 'extended' then 'x' else 'm' end;
begin
  select * into v_column from pg_catalog.pg_attribute where attrelid operator(pg_catalog.=) p_table and attname operator(pg_catalog.=) p_column;
  if v_column.attstorage operator(pg_catalog.<>) v_storage then
    perform payrail._needs_exclusive_lock(p_table, pg_catalog.format('the storage of column %s changes', p_column));
    execute pg_catalog.format('alter table %s alter column %I set storage %s', p_table, p_column, p_storage);
  end if;
  if p_compression is not null and v_column.attcompression::text operator(pg_catalog.<>) pg_catalog.left(p_compression, 1) then
    perform payrail._needs_exclusive_lock(p_table, pg_catalog.format('the compression of column %s changes', p_column));
    execute pg_catalog.format('alter table %s alter column %I set compression %s', p_table, p_column, p_compression);
  end if;
end
$$;

comment on function payrail._ensure_storage(regclass, name, text, text) is
$$Sets a column's storage (plain, external, extended, main) and compression (pglz, lz4; NULL: leave it) where they differ.$$;

create or replace function payrail._upgrade_due(p_name text)
returns boolean
language plpgsql
volatile
security invoker
set search_path from current
as $$
declare
  v_new_registry boolean := coalesce(pg_catalog.current_setting('payrail.new_registry', true), '') operator(pg_catalog.=) 'true';
begin
  if exists (select from payrail.applied_upgrades where name operator(pg_catalog.=) p_name) then
    return false;
  end if;
  insert into payrail.applied_upgrades (name, applied_by, ran) values (p_name, session_user, not v_new_registry);
  return not v_new_registry;
end
$$;

comment on function payrail._upgrade_due(text) is
$$True once for the upgrade step p_name (db/upgrades/), where this registry has not had it; records it as run.

A registry this apply creates is recorded as not needing it. The step runs in the same
transaction, so a step that fails is not recorded.$$;

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
