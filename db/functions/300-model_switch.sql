-- The registry's search path (010-schema.sql), so this file alone, rerun, leaves the same catalog.
do $$ begin perform pg_catalog.set_config('search_path', payrail._search_path(), false); end $$;

create or replace function payrail.switch_embedding_model(p_name text, p_dimensions integer)
returns table (embedded bigint, drafts_cleared bigint)
language plpgsql
volatile
security invoker
set search_path from current
-- Each statement joins the whole registry with the whole staging table: hash joins, whatever the
-- statistics say. Right after a bulk load they can say a table is empty, and a nested loop over
-- "one row" would scan the staging table once per record.
set enable_nestloop = off
as $$
declare
  v_missing_count bigint;
  v_missing text;
  v_embedded bigint;
  v_drafts_cleared bigint;
begin
  -- Vector writers read the model row "for share" (tg_provider_methods__keep_embedding_current):
  -- from here to commit they wait, then see the new model, so none slips in an old-model vector.
  perform from payrail.embedding_model for update;
  -- Edits of existing records wait too, so the check below stays true until commit. In id order,
  -- as every writer locks records (after the model row), so a switch never deadlocks with them.
  perform from payrail.provider_methods order by id for update;

  select pg_catalog.count(*),
         pg_catalog.string_agg(pg_catalog.format('"%s / %s"', pm.provider, pm.method), ', ' order by pm.id)
           filter (where pm.rank operator(pg_catalog.<=) 5)
    into v_missing_count, v_missing
  from (
    select p.*, pg_catalog.row_number() over (order by p.id) as rank
    from payrail.provider_methods as p
    where p.enabled
      -- Already by the new model (a rerun, or the model in force): nothing to move.
      and not (p.embedding_model operator(pg_catalog.=) p_name and vector_dims(p.embedding) operator(pg_catalog.=) p_dimensions)
      and not exists (
        select from payrail.embedding_staging as s
        where s.provider_method_id operator(pg_catalog.=) p.id and s.model operator(pg_catalog.=) p_name
          and s.content_hash operator(pg_catalog.=) p.content_hash and vector_dims(s.embedding) operator(pg_catalog.=) p_dimensions)
  ) as pm;
  if v_missing_count operator(pg_catalog.>) 0 then
    raise exception using
      errcode = 'PYE02',
      message = pg_catalog.format(
        'cannot switch to model %s (%s dimensions): %s enabled provider method(s) have no staged embedding of '
        'their current content by it: %s%s',
        p_name, p_dimensions, v_missing_count, v_missing, case when v_missing_count operator(pg_catalog.>) 5 then ', ...' else '' end),
      detail = 'Every enabled record must have an embedding by the registry''s model at all times.',
      hint = pg_catalog.format(
        'Run `payrail-embedder --embedder BACKEND model switch %s`: it stages (or re-stages) every record, then switches.',
        p_name);
  end if;

  -- The model first: the row trigger checks each new vector against it.
  insert into payrail.embedding_model as m (name, dimensions) values (p_name, p_dimensions)
  on conflict (singleton) do update set name = excluded.name, dimensions = excluded.dimensions, set_at = pg_catalog.now()
  where m.name operator(pg_catalog.<>) excluded.name or m.dimensions operator(pg_catalog.<>) excluded.dimensions;

  update payrail.provider_methods as pm
  set embedding = s.embedding, embedding_model = s.model, embedding_content_hash = s.content_hash
  from payrail.embedding_staging as s
  where s.provider_method_id operator(pg_catalog.=) pm.id and s.model operator(pg_catalog.=) p_name and s.content_hash operator(pg_catalog.=) pm.content_hash
    and vector_dims(s.embedding) operator(pg_catalog.=) p_dimensions;
  get diagnostics v_embedded = row_count;

  -- Drafts edited since they were staged (or never staged) lose their old-model vector; sync embeds them.
  update payrail.provider_methods as pm
  set embedding = null, embedding_model = null, embedding_content_hash = null
  where pm.embedding is not null
    and (pm.embedding_model operator(pg_catalog.<>) p_name or vector_dims(pm.embedding) operator(pg_catalog.<>) p_dimensions);
  get diagnostics v_drafts_cleared = row_count;

  -- Staged vectors of other models are leftovers of abandoned switches.
  delete from payrail.embedding_staging;

  return query select v_embedded, v_drafts_cleared;
end
$$;

comment on function payrail.switch_embedding_model(text, integer) is
$$Makes p_name (p_dimensions) the registry's model, moving in the vectors staged for it; one transaction.

Refuses (PYE02, listing them) while any enabled record lacks a staged vector of its current
content by the new model: `payrail-embedder model switch` stages every record first. Drafts
without one lose their vector (sync embeds them later). Empties payrail.embedding_staging.
Returns how many records got a staged vector and how many drafts lost theirs. Until it commits,
search keeps using the old model; writes of records wait for it.$$;
