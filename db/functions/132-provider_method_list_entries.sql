-- The registry's search path (010-schema.sql), so this file alone, rerun, leaves the same catalog.
do $$ begin perform pg_catalog.set_config('search_path', payrail._search_path(), false); end $$;

create or replace function payrail.tg_provider_methods__keep_list_entry()
returns trigger
language plpgsql
volatile
-- Definer: operators and the embedder change provider_methods, never this derived table.
security definer
set search_path from current
as $$
begin
  insert into payrail.provider_method_list_entries as e
  select x.* from payrail._list_entry(new) as x
  on conflict (provider_method_id) do update
    set enabled = excluded.enabled, embedding_model = excluded.embedding_model, provider_key = excluded.provider_key,
        method_key = excluded.method_key, filter_text = excluded.filter_text, source = excluded.source;
  return null;
end
$$;

comment on function payrail.tg_provider_methods__keep_list_entry() is
$$Keeps payrail.provider_method_list_entries equal to the records' entries (payrail._list_entry).

Fires after an insert, and after an update that changes what an entry holds: one row written per
record saved; a deleted record's row goes with it (on delete cascade).$$;

create or replace function payrail._repair_list_entries(p_first_id bigint default null, p_last_id bigint default null)
returns bigint
language plpgsql
volatile
security invoker
set search_path from current
as $$
declare
  v_first_id bigint := coalesce(p_first_id, 0);
  v_last_id bigint := coalesce(p_last_id, 9223372036854775807);
  v_ids bigint[];
begin
  -- The rows that differ, found without a lock: nearly always none.
  select pg_catalog.array_agg(coalesce(wanted.provider_method_id, e.provider_method_id)
                              order by coalesce(wanted.provider_method_id, e.provider_method_id))
    into v_ids
  from (select x.* from payrail.provider_methods as pm cross join lateral payrail._list_entry(pm) as x
        where pm.id operator(pg_catalog.>=) v_first_id and pm.id operator(pg_catalog.<=) v_last_id) as wanted
  full join (select l.* from payrail.provider_method_list_entries as l
             where l.provider_method_id operator(pg_catalog.>=) v_first_id and l.provider_method_id operator(pg_catalog.<=) v_last_id) as e
    on e.provider_method_id operator(pg_catalog.=) wanted.provider_method_id
  -- "wanted is distinct from e", spelt out with a qualified operator (db/CONVENTIONS.md): <> of two
  -- rows compares them field by field, NULL equal to NULL; a row missing on one side is NULL.
  where coalesce(wanted operator(pg_catalog.<>) e, (wanted is null) operator(pg_catalog.<>) (e is null));
  if v_ids is null then
    return 0;
  end if;
  -- Then those alone, their records locked as every writer locks records (by id), so none changes
  -- meanwhile and its trigger's row stays what this writes.
  perform from payrail.provider_methods where id operator(pg_catalog.=) any (v_ids) order by id for share;
  delete from payrail.provider_method_list_entries where provider_method_id operator(pg_catalog.=) any (v_ids);
  insert into payrail.provider_method_list_entries
  select x.* from payrail.provider_methods as pm cross join lateral payrail._list_entry(pm) as x
  where pm.id operator(pg_catalog.=) any (v_ids);
  return pg_catalog.cardinality(v_ids);
end
$$;

comment on function payrail._repair_list_entries(bigint, bigint) is
$$Makes the list entries of records p_first_id..p_last_id (NULL: no bound) equal to payrail._list_entry of each; returns how many it found different.

Only rows that differ are written (missing, stale or left over: restored from a dump without
triggers, edited by a superuser), each with its record locked FOR SHARE, so searches and edits go
on meanwhile. `db apply` runs it after its transaction, range by range, when it changed how the
rows are derived (this function, the trigger's, payrail._list_entry) or with --force.$$;

create or replace trigger tg_provider_methods__keep_list_entry_on_insert
  after insert on payrail.provider_methods
  for each row
  execute function payrail.tg_provider_methods__keep_list_entry();
-- Not on a vector-only write that keeps the model (sync of a changed record, or a model switch's
-- staging): the entry holds nothing of the vector but its model.
create or replace trigger tg_provider_methods__keep_list_entry_on_update
  after update on payrail.provider_methods
  -- "is distinct from", spelt out with qualified operators (db/CONVENTIONS.md); docs_url and
  -- embedding_model alone may be NULL.
  for each row when (old.provider operator(pg_catalog.<>) new.provider
                     or old.method operator(pg_catalog.<>) new.method
                     or old.guidance operator(pg_catalog.<>) new.guidance
                     or old.urls operator(pg_catalog.<>) new.urls
                     or coalesce(old.docs_url operator(pg_catalog.<>) new.docs_url,
                                 (old.docs_url is null) operator(pg_catalog.<>) (new.docs_url is null))
                     or old.enabled operator(pg_catalog.<>) new.enabled
                     or old.source operator(pg_catalog.<>) new.source
                     or coalesce(old.embedding_model operator(pg_catalog.<>) new.embedding_model,
                                 (old.embedding_model is null) operator(pg_catalog.<>) (new.embedding_model is null)))
  execute function payrail.tg_provider_methods__keep_list_entry();

-- Run alone (psql), this file repairs any row that differs; `db apply` does so after its
-- transaction. An empty table (new, or a registry upgraded from before it) is filled here, since
-- the records list reads it as soon as this commits: one insert of every record's entry, without
-- the repair's row locks (under `db apply` no writer runs meanwhile; alone, a writer that saves a
-- record first keeps its newer entry).
do $$
begin
  if not exists (select from payrail.provider_method_list_entries) then
    insert into payrail.provider_method_list_entries
    select x.* from payrail.provider_methods as pm cross join lateral payrail._list_entry(pm) as x
    on conflict (provider_method_id) do nothing;
  elsif payrail._deploy_mode() operator(pg_catalog.=) '' then
    perform payrail._repair_list_entries();
  end if;
end
$$;
