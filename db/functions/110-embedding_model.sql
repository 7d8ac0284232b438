-- The registry's search path (010-schema.sql), so this file alone, rerun, leaves the same catalog.
do $$ begin perform pg_catalog.set_config('search_path', payrail._search_path(), false); end $$;

create or replace function payrail.get_embedding_model()
returns table (name text, dimensions integer)
language sql
stable
security definer
set search_path from current
as $$
  select m.name, m.dimensions from payrail.embedding_model as m
$$;

comment on function payrail.get_embedding_model() is
$$The registry's embedding model: its name and dimensions; no row until one is set.

Embed a query with this model before passing it to payrail.search_provider_methods.$$;

create or replace function payrail.set_embedding_model(p_name text, p_dimensions integer)
returns void
language plpgsql
volatile
security invoker
set search_path from current
as $$
declare
  v_current payrail.embedding_model;
begin
  select * into v_current from payrail.embedding_model for update;
  if v_current.name operator(pg_catalog.=) p_name and v_current.dimensions operator(pg_catalog.=) p_dimensions then
    return;
  end if;
  if exists (select from payrail.provider_methods where embedding is not null) then
    raise exception using
      errcode = 'PYE02',
      message = pg_catalog.format(
        'the registry already holds embeddings from model %s (%s dimensions); cannot set model %s (%s dimensions)',
        v_current.name, v_current.dimensions, p_name, p_dimensions),
      hint = 'Embed with the registry''s model, or re-embed every record and switch with `payrail-embedder model switch`.';
  end if;
  insert into payrail.embedding_model (name, dimensions) values (p_name, p_dimensions)
  on conflict (singleton) do update set name = excluded.name, dimensions = excluded.dimensions, set_at = pg_catalog.now();
end
$$;

comment on function payrail.set_embedding_model(text, integer) is
$$Chooses the registry's embedding model while no record holds an embedding yet.

Idempotent for the current model. Once vectors exist, changing the model means re-embedding
every record (PYE02 otherwise).$$;

create or replace function payrail.tg_embedding_model__check_vectors()
returns trigger
language plpgsql
volatile
security invoker
set search_path from current
as $$
declare
  v_model payrail.embedding_model;
begin
  select * into v_model from payrail.embedding_model;
  -- Checked at commit, so a model switch may change the model and every vector in one transaction.
  if exists (
    select from payrail.provider_methods as pm
    where pm.embedding is not null
      and (v_model is null or pm.embedding_model operator(pg_catalog.<>) v_model.name or vector_dims(pm.embedding) operator(pg_catalog.<>) v_model.dimensions)
  ) then
    raise exception using
      errcode = 'PYE02',
      message = 'stored embeddings would no longer match the registry''s embedding model',
      hint = 'Re-embed every record with the new model in the same transaction (`payrail-embedder model switch`).';
  end if;
  return null;
end
$$;

comment on function payrail.tg_embedding_model__check_vectors() is
$$Refuses, at commit, a change of the registry's model that leaves vectors from another model.$$;

-- Constraint triggers cannot be created "or replace": replaced only when changed.
select payrail._ensure_trigger('payrail.embedding_model', 'tg_embedding_model__check_vectors', $$
  create constraint trigger %1$I
    after update or delete on %2$s
    deferrable initially deferred
    for each row execute function payrail.tg_embedding_model__check_vectors()$$);
