-- The registry's search path (010-schema.sql), so this file alone, rerun, leaves the same catalog.
do $$ begin perform pg_catalog.set_config('search_path', payrail._search_path(), false); end $$;

-- Each golden query's embedding, by model: what lets the backoffice rank every golden query in one
-- pass (the Quality page, a record's golden queries, an edit's effect before it is saved) without
-- asking the embedding service for a thousand queries a page. Evaluation data like the golden
-- queries themselves: search never reads this table (its functions name none of the golden
-- tables), and agents cannot. An agent's query is embedded by the agent's client; these vectors
-- only say what search would answer the golden queries (db/SEARCH.md, "Golden queries in one pass").
-- Written by the embedder (`golden add` and `golden import` embed their queries, `sync` what is
-- missing, `model switch` the next model's before it switches); a vector of another model than
-- the registry's, or of another text than its query's, is not used.
create table if not exists payrail.golden_query_embeddings (
  golden_query_id bigint not null
    constraint golden_query_embeddings_golden_query_id_fkey references payrail.golden_queries (id) on delete cascade,
  model text not null,
  -- The text that was embedded: the query's when it was. The registry's functions never change a
  -- golden query's text; a vector of another text than the query's now is not used.
  query text not null,
  embedding vector not null,
  embedded_at timestamptz not null default pg_catalog.now(),
  constraint golden_query_embeddings_pkey primary key (golden_query_id, model)
);

select payrail._ensure_check_constraint('payrail.golden_query_embeddings', 'golden_query_embeddings_model_check',
  'check (payrail._is_valid_name(model))');
-- Search refuses the zero vector as a query, and ranks in float32 only vectors of these lengths.
select payrail._ensure_check_constraint('payrail.golden_query_embeddings', 'golden_query_embeddings_embedding_length_check',
  $$check (vector_norm(embedding) operator(pg_catalog.>) 0 and payrail._is_storable_vector_length(embedding))$$);

comment on table payrail.golden_query_embeddings is
$$Each golden query's embedding by a model: what the backoffice ranks golden queries with, never search.

Evaluation data, not ranking input: search reads no golden query and none of their vectors, and
agents cannot read them. Kept by the embedder: `golden add` and `golden import` embed the new
queries with the registry's model, `sync` embeds those missing, `model switch` embeds them with the
next model before it switches. A vector is used only while its model is the registry's and its
text is its query's.$$;
comment on column payrail.golden_query_embeddings.golden_query_id is 'The golden query (payrail.golden_queries.id); its vectors go with it.';
comment on column payrail.golden_query_embeddings.model is 'The model that made the vector.';
comment on column payrail.golden_query_embeddings.query is 'The text embedded: the golden query''s text when it was embedded.';
comment on column payrail.golden_query_embeddings.embedding is 'The query''s embedding by model, as the model returned it (search would scale it to unit length).';
comment on column payrail.golden_query_embeddings.embedded_at is 'When it was embedded.';
