-- The registry's search path (010-schema.sql), so this file alone, rerun, leaves the same catalog.
do $$ begin perform pg_catalog.set_config('search_path', payrail._search_path(), false); end $$;

-- The helpers that let the idempotent files change a table only when its definition changed, and
-- only under the locks `db apply` holds (db/CONVENTIONS.md, "Deploys"): the upgrade steps
-- (db/upgrades/) and every file after them call them. The deploy's record is 012-deployments.sql.

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

create or replace function payrail._definition_changed(p_table regclass, p_name name, p_create text)
returns boolean
language plpgsql
volatile
security invoker
set search_path from current
as $$
declare
  v_wanted text := payrail._probed_definition(p_table, p_name, p_create);
  v_found text := payrail._definition_of(p_table, p_name);
begin
  -- "is distinct from", spelt out with qualified operators (db/CONVENTIONS.md).
  return coalesce(v_wanted operator(pg_catalog.<>) v_found, (v_wanted is null) operator(pg_catalog.<>) (v_found is null));
end
$$;

comment on function payrail._definition_changed(regclass, name, text) is
$$Whether the trigger or constraint p_name that p_create would make (payrail._probed_definition) differs from the one p_table has, or p_table has none: the one comparison of wanted and found definitions.$$;

create or replace function payrail._ensure_check_constraint(p_table regclass, p_name name, p_check text)
returns void
language plpgsql
volatile
security invoker
set search_path from current
as $$
begin
  -- p_check goes into a format() string: its own % are doubled.
  if payrail._definition_changed(p_table, p_name, 'alter table %2$s add constraint %1$I ' operator(pg_catalog.||) pg_catalog.replace(p_check, '%', '%%')) then
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
begin
  if payrail._definition_changed(p_table, p_name, p_create) then
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
