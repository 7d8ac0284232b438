-- The registry's search path (010-schema.sql), so this file alone, rerun, leaves the same catalog.
do $$ begin perform pg_catalog.set_config('search_path', payrail._search_path(), false); end $$;

-- Vectors of the next embedding model, made while the current one stays in force.
-- `payrail-embedder model switch` fills it batch by batch (a rerun resumes), then
-- payrail.switch_embedding_model moves the vectors into provider_methods in one transaction.
create table if not exists payrail.embedding_staging (
  provider_method_id bigint not null,
  model text not null,
  content_hash bytea not null,
  embedding vector not null,
  staged_at timestamptz not null default pg_catalog.now(),
  constraint embedding_staging_pkey primary key (provider_method_id, model),
  -- A deleted record needs no staged vector.
  constraint embedding_staging_provider_method_id_fkey
    foreign key (provider_method_id) references payrail.provider_methods (id) on delete cascade
);

select payrail._ensure_check_constraint('payrail.embedding_staging', 'embedding_staging_model_check',
  'check (payrail._is_valid_name(model))');
select payrail._ensure_check_constraint('payrail.embedding_staging', 'embedding_staging_content_hash_check',
  'check (pg_catalog.octet_length(content_hash) operator(pg_catalog.=) 32)');
select payrail._ensure_check_constraint('payrail.embedding_staging', 'embedding_staging_embedding_nonzero_check',
  'check (vector_norm(embedding) operator(pg_catalog.>) 0)');
-- A vector the switch could not move into provider_methods is refused when it is staged.
select payrail._ensure_check_constraint('payrail.embedding_staging', 'embedding_staging_embedding_length_check',
  'check (payrail._is_storable_vector_length(embedding))');

comment on table payrail.embedding_staging is
$$Staged vectors of the next embedding model: one per record and model, not yet in force.

Filled by `payrail-embedder model switch NEW_MODEL` while search keeps using the current model;
payrail.switch_embedding_model moves the staged vectors that still match their record's content
into provider_methods and empties this table, in one transaction.$$;
comment on column payrail.embedding_staging.provider_method_id is 'The record the vector was made for (payrail.provider_methods.id).';
comment on column payrail.embedding_staging.model is 'Model that made the vector: the model the registry is switching to.';
comment on column payrail.embedding_staging.content_hash is
  'content_hash of the record when the vector was made; a vector whose record changed since is not moved.';
comment on column payrail.embedding_staging.embedding is 'Embedding of the record''s provider, method and guidance by model.';
comment on column payrail.embedding_staging.staged_at is 'When the vector was staged.';
