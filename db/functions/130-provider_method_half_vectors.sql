-- The registry's search path (010-schema.sql), so this file alone, rerun, leaves the same catalog.
do $$ begin perform pg_catalog.set_config('search_path', payrail._search_path(), false); end $$;

create or replace function payrail.tg_provider_methods__keep_half_vector()
returns trigger
language plpgsql
volatile
-- Definer: operators and the embedder change provider_methods, never this derived table.
security definer
set search_path from current
as $$
begin
  if new.enabled then
    insert into payrail.provider_method_half_vectors as hv (provider_method_id, unit_embedding)
    values (new.id, l2_normalize(new.embedding)::halfvec)
    on conflict (provider_method_id) do update set unit_embedding = excluded.unit_embedding;
  else
    delete from payrail.provider_method_half_vectors where provider_method_id operator(pg_catalog.=) new.id;
  end if;
  return null;
end
$$;

comment on function payrail.tg_provider_methods__keep_half_vector() is
$$Keeps payrail.provider_method_half_vectors equal to the enabled records' unit embeddings.

Fires after an insert of an enabled record and after an update that changes enabled or the
embedding; a deleted record's row goes with it (on delete cascade).$$;

create or replace function payrail._repair_half_vectors(p_first_id bigint default null, p_last_id bigint default null)
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
  select pg_catalog.array_agg(coalesce(pm.id, hv.provider_method_id) order by coalesce(pm.id, hv.provider_method_id))
    into v_ids
  from (select p.id, p.embedding from payrail.provider_methods as p
        where p.enabled and p.id operator(pg_catalog.>=) v_first_id and p.id operator(pg_catalog.<=) v_last_id) as pm
  full join (select h.* from payrail.provider_method_half_vectors as h
             where h.provider_method_id operator(pg_catalog.>=) v_first_id and h.provider_method_id operator(pg_catalog.<=) v_last_id) as hv
    on hv.provider_method_id operator(pg_catalog.=) pm.id
  -- "is distinct from", spelt out with pgvector's function and a qualified operator (db/CONVENTIONS.md).
  where coalesce(halfvec_ne(hv.unit_embedding, l2_normalize(pm.embedding)::halfvec),
                 (hv.unit_embedding is null) operator(pg_catalog.<>) (pm.embedding is null));
  if v_ids is null then
    return 0;
  end if;
  -- Then those alone, their records locked as every writer locks records (by id), so none changes
  -- meanwhile and its trigger's row stays what this writes.
  perform from payrail.provider_methods where id operator(pg_catalog.=) any (v_ids) order by id for share;
  delete from payrail.provider_method_half_vectors as hv
  where hv.provider_method_id operator(pg_catalog.=) any (v_ids)
    and not exists (select from payrail.provider_methods as pm where pm.id operator(pg_catalog.=) hv.provider_method_id and pm.enabled);
  insert into payrail.provider_method_half_vectors as hv (provider_method_id, unit_embedding)
  select pm.id, l2_normalize(pm.embedding)::halfvec
  from payrail.provider_methods as pm
  where pm.id operator(pg_catalog.=) any (v_ids) and pm.enabled
  on conflict (provider_method_id) do update set unit_embedding = excluded.unit_embedding
    where halfvec_ne(hv.unit_embedding, excluded.unit_embedding);
  return pg_catalog.cardinality(v_ids);
end
$$;

comment on function payrail._repair_half_vectors(bigint, bigint) is
$$Makes the derived rows of records p_first_id..p_last_id (NULL: no bound) equal to the enabled records' unit embeddings; returns how many it found different.

Only rows that differ are written (missing, stale or left over: restored from a dump without
triggers, edited by a superuser), each with its record locked FOR SHARE, so searches and edits go
on meanwhile. `db apply` runs it after its transaction, range by range, when it changed how the
rows are derived (this function, the trigger's, pgvector's version) or with --force.$$;

-- Only where the table exists (pgvector 0.7 and later; db/schema/035).
do $$
begin
  if pg_catalog.to_regclass('payrail.provider_method_half_vectors') is null then
    return;
  end if;

  create or replace trigger tg_provider_methods__keep_half_vector_on_insert
    after insert on payrail.provider_methods
    for each row when (new.enabled)
    execute function payrail.tg_provider_methods__keep_half_vector();
  create or replace trigger tg_provider_methods__keep_half_vector_on_update
    after update on payrail.provider_methods
    -- "old.embedding is distinct from new.embedding", spelt with pgvector's vector_ne: a dump
    -- prints IS DISTINCT FROM without the operator's schema, so a restore, under pg_dump's empty
    -- search_path, cannot find it; a function it prints with its schema (db/CONVENTIONS.md).
    for each row when (old.enabled operator(pg_catalog.<>) new.enabled
                       or (old.embedding is null) operator(pg_catalog.<>) (new.embedding is null)
                       or vector_ne(old.embedding, new.embedding))
    execute function payrail.tg_provider_methods__keep_half_vector();

  -- Run alone (psql), this file repairs any row that differs. `db apply` does so after its
  -- transaction, but an empty table (new, or on a registry upgraded from before it or from
  -- pgvector before 0.7) is filled here: search reads it as soon as this commits.
  if payrail._deploy_mode() operator(pg_catalog.=) '' or not exists (select from payrail.provider_method_half_vectors) then
    perform payrail._repair_half_vectors();
  end if;
end
$$;
