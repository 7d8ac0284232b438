-- The registry's search path (010-schema.sql), so this file alone, rerun, leaves the same catalog.
do $$ begin perform pg_catalog.set_config('search_path', payrail._search_path(), false); end $$;

create table if not exists payrail.embedding_model (
  singleton boolean primary key default true,
  name text not null,
  dimensions integer not null,
  set_at timestamptz not null default pg_catalog.now()
);

select payrail._ensure_check_constraint('payrail.embedding_model', 'embedding_model_singleton_check', 'check (singleton)');
select payrail._ensure_check_constraint('payrail.embedding_model', 'embedding_model_name_check',
  'check (payrail._is_valid_name(name))');
-- pgvector's limit for the vector type.
select payrail._ensure_check_constraint('payrail.embedding_model', 'embedding_model_dimensions_check',
  'check (dimensions operator(pg_catalog.>=) 1 and dimensions operator(pg_catalog.<=) 16000)');

comment on table payrail.embedding_model is
$$The registry's one embedding model: the model every stored vector and every query vector comes from.

At most one row. Empty until the first embedding is saved (payrail.set_embedding_model).
Clients read it with payrail.get_embedding_model() to embed their query with the same model.$$;
comment on column payrail.embedding_model.singleton is 'Always true: keeps the table to one row.';
comment on column payrail.embedding_model.name is 'Model name as the embedding backend knows it, e.g. text-embedding-3-small or all-MiniLM-L6-v2.';
comment on column payrail.embedding_model.dimensions is 'Number of dimensions of every vector made by this model.';
comment on column payrail.embedding_model.set_at is 'When the registry started using this model.';
