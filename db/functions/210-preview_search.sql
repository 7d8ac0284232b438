-- The registry's search path (010-schema.sql), so this file alone, rerun, leaves the same catalog.
do $$ begin perform pg_catalog.set_config('search_path', payrail._search_path(), false); end $$;

create or replace function payrail.preview_search(
  p_provider text,
  p_method text,
  p_query text,
  p_query_embedding vector default null,
  p_query_embedding_model text default null
)
returns table (provider text, method text, urls text[], docs_url text, guidance text)
language plpgsql
stable
security invoker
set search_path from current
as $$
declare
  v_draft payrail.provider_methods;
begin
  -- Before anything else, as search: a session that lifted its login's limits reads nothing.
  perform payrail._refuse_lifted_limits();
  select * into v_draft
  from payrail.provider_methods as pm
  where payrail._normalize_name(pm.provider) operator(pg_catalog.=) payrail._normalize_name(p_provider)
    and payrail._normalize_name(pm.method) operator(pg_catalog.=) payrail._normalize_name(p_method);
  if not found then
    raise exception using
      errcode = 'no_data_found',
      message = pg_catalog.format('there is no provider method "%s / %s" to preview', p_provider, p_method),
      hint = 'Names compare ignoring case and runs of white space; `payrail-embedder export` lists every record.';
  end if;
  if v_draft.embedding is null then
    raise exception using
      errcode = 'object_not_in_prerequisite_state',
      message = pg_catalog.format(
        'provider method "%s / %s" has no embedding of its current content, so search could not place it',
        v_draft.provider, v_draft.method),
      hint = 'Run `payrail-embedder sync` (it embeds drafts too), then preview again.';
  end if;
  return query select * from payrail._search(p_query, p_query_embedding, p_query_embedding_model, v_draft.id);
end
$$;

comment on function payrail.preview_search(text, text, text, vector, text) is
$$What search_provider_methods would answer if the draft p_provider / p_method were enabled.

Nothing is changed: the draft is only counted as enabled for this call, with the same paths,
order and errors as search_provider_methods (both use payrail._search). The draft needs an
embedding of its current content (object_not_in_prerequisite_state 55000 otherwise: run
`payrail-embedder sync`); an unknown record raises no_data_found (P0002). For an enabled record
the answer is search's own. For operators: agents cannot call it.$$;
