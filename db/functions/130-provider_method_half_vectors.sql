-- The registry's search path (010-schema.sql), so this file alone, rerun, leaves the same catalog.
do $$ begin perform pg_catalog.set_config('search_path', payrail._search_path(), false); end $$;

create or replace function payrail.tg_provider_methods__keep_half_vector()
returns trigger
language plpgsql
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
    delete from payrail.provider_method_half_vectors where provider_method_id = new.id;
  end if;
  return null;
end
$$;

comment on function payrail.tg_provider_methods__keep_half_vector() is
$$Keeps payrail.provider_method_half_vectors equal to the enabled records' unit embeddings.

Fires after an insert of an enabled record and after an update that changes enabled or the
embedding; a deleted record's row goes with it (on delete cascade).$$;

-- Only where the table exists (pgvector 0.7 and later; db/schema/035). Applying db/ also
-- rebuilds any row that is missing, stale or left over, so a rerun repairs the table.
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
    -- "old.embedding is distinct from new.embedding", spelt with pgvector's <> operator: a dump
    -- prints IS DISTINCT FROM without the operator's schema, so a restore, under pg_dump's empty
    -- search_path, cannot find it; <> it prints with the schema, as OPERATOR(public.<>).
    for each row when (old.enabled is distinct from new.enabled
                       or (old.embedding is null) <> (new.embedding is null)
                       or old.embedding <> new.embedding)
    execute function payrail.tg_provider_methods__keep_half_vector();

  delete from payrail.provider_method_half_vectors as hv
  where not exists (
    select from payrail.provider_methods as pm where pm.id = hv.provider_method_id and pm.enabled);
  insert into payrail.provider_method_half_vectors as hv (provider_method_id, unit_embedding)
  select pm.id, l2_normalize(pm.embedding)::halfvec
  from payrail.provider_methods as pm
  where pm.enabled
  on conflict (provider_method_id) do update set unit_embedding = excluded.unit_embedding
    where hv.unit_embedding is distinct from excluded.unit_embedding;
end
$$;
