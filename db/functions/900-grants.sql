-- Functions are executable by PUBLIC by default; in this schema only the grants below apply.
revoke all on all functions in schema payrail from public;
revoke all on all tables in schema payrail from public;

grant usage on schema payrail to payrail_agent, payrail_operator, payrail_embedder;

-- Agents: search only. The search functions are security definer, so agents never read a table
-- and disabled drafts stay invisible to them.
grant execute on function
  payrail.search_provider_methods(text, vector, text),
  payrail.query_takes_name_path(text),
  payrail.get_embedding_model()
  to payrail_agent, payrail_operator, payrail_embedder;

-- The immutable helpers that the constraints, the generated column, the name indexes and the
-- triggers call with the writer's privileges.
grant execute on function
  payrail._trim_white_space(text),
  payrail._normalize_name(text),
  payrail._content_hash(text, text, text),
  payrail._is_valid_name(text),
  payrail._is_https_url(text),
  payrail._are_https_urls(text[]),
  payrail._has_duplicates(text[])
  to payrail_operator, payrail_embedder;

-- Operators: the public fields and enabled; never the vector columns.
grant select on payrail.provider_methods, payrail.embedding_model to payrail_operator;
grant insert (provider, method, urls, docs_url, guidance, enabled),
      update (provider, method, urls, docs_url, guidance, enabled),
      delete
  on payrail.provider_methods to payrail_operator;

-- Embedder: reads content, writes vectors and chooses the first model.
grant select on payrail.provider_methods, payrail.embedding_model to payrail_embedder;
grant update (embedding, embedding_model, embedding_content_hash) on payrail.provider_methods to payrail_embedder;
grant insert, update on payrail.embedding_model to payrail_embedder;
grant execute on function payrail.set_embedding_model(text, integer) to payrail_embedder;
