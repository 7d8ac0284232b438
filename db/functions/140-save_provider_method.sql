-- The registry's search path (010-schema.sql), so this file alone, rerun, leaves the same catalog.
do $$ begin perform pg_catalog.set_config('search_path', payrail._search_path(), false); end $$;

create or replace function payrail._edit_conflict(
  p_id bigint,
  p_current payrail.provider_methods,
  p_expected_version integer
)
returns text
language plpgsql
immutable
security invoker
set search_path from current
as $$
begin
  if p_id is not null and p_current.id is null then
    return pg_catalog.format('provider method %s was deleted since it was read', p_id);
  end if;
  if p_expected_version is not null and coalesce(p_expected_version operator(pg_catalog.<>) p_current.version, true) then
    return pg_catalog.format(
      'provider method "%s / %s" changed since it was read: version %s was read, version %s is saved now',
      p_current.provider, p_current.method, p_expected_version, p_current.version);
  end if;
  return null;
end
$$;

comment on function payrail._edit_conflict(bigint, payrail.provider_methods, integer) is
$$Why an edit of a record read at p_expected_version conflicts (PYE03), in words; NULL when it does not.

p_id: the record the caller read (NULL: found by name); p_current: that record as stored now
(all NULL: there is none). Deleted since it was read, or at another version now (p_expected_version
NULL: no version to compare). The one statement of the edit-conflict rule: saves and deletes raise
it (payrail._refuse_edit_conflict), the batch answers it in its words (payrail.save_provider_methods).$$;

create or replace function payrail._refuse_edit_conflict(
  p_id bigint,
  p_current payrail.provider_methods,
  p_expected_version integer
)
returns void
language plpgsql
immutable
security invoker
set search_path from current
as $$
declare
  v_conflict text := payrail._edit_conflict(p_id, p_current, p_expected_version);
begin
  if v_conflict is not null then
    raise exception using
      errcode = 'PYE03',
      message = v_conflict,
      hint = case when p_current.id is null then 'Save it as a new record, or restore it from its history.'
                  else 'Read the record again, merge your change into it, and save with its new version.' end;
  end if;
end
$$;

comment on function payrail._refuse_edit_conflict(bigint, payrail.provider_methods, integer) is
$$Raises PYE03 with payrail._edit_conflict's words and a hint when the edit conflicts.$$;

create or replace function payrail.save_provider_method(
  p_id bigint,
  p_expected_version integer,
  p_provider text,
  p_method text,
  p_urls text[],
  p_docs_url text,
  p_guidance text,
  p_enabled boolean default null,
  p_embedding vector default null,
  p_embedding_model text default null,
  p_mixed_scripts boolean default null
)
returns table (record_id bigint, record_version integer, outcome text)
language plpgsql
volatile
security invoker
set search_path from current
as $$
declare
  v_current payrail.provider_methods;
  v_provider text := payrail._canonical_name(p_provider);
  v_method text := payrail._canonical_name(p_method);
  v_embedding_content_hash bytea;
begin
  if p_id is not null then
    select * into v_current from payrail.provider_methods as pm where pm.id operator(pg_catalog.=) p_id for update;
  else
    select * into v_current
    from payrail.provider_methods as pm
    where payrail._normalize_name(pm.provider) operator(pg_catalog.=) payrail._normalize_name(v_provider)
      and payrail._normalize_name(pm.method) operator(pg_catalog.=) payrail._normalize_name(v_method)
    for update;
  end if;

  if p_expected_version operator(pg_catalog.=) 0 and v_current.id is not null then
    raise exception using
      errcode = 'unique_violation',
      constraint = 'provider_methods_provider_method_key',
      schema = 'payrail',
      table = 'provider_methods',
      message = pg_catalog.format('provider method "%s / %s" already exists', v_current.provider, v_current.method),
      hint = 'Edit that record instead, or choose another provider or method name.';
  end if;
  -- 0 (must be new) is the unique key's business, above.
  perform payrail._refuse_edit_conflict(
    p_id, v_current, case when p_expected_version operator(pg_catalog.<>) 0 then p_expected_version end);

  if p_embedding is not null then
    -- The caller embedded this very content (the write path embeds the canonical names).
    v_embedding_content_hash := payrail._content_hash(v_provider, v_method, p_guidance);
  end if;

  -- Without a vector the statement names no vector column, so an operator without
  -- payrail_embedder can still create drafts and make URL-only edits; the vector rules (triggers)
  -- decide the rest.
  if v_current.id is null and p_embedding is null then
    insert into payrail.provider_methods as pm (provider, method, urls, docs_url, guidance, enabled, mixed_scripts)
    values (v_provider, v_method, p_urls, p_docs_url, p_guidance, coalesce(p_enabled, false), coalesce(p_mixed_scripts, false))
    returning pm.id, pm.version into record_id, record_version;
  elsif v_current.id is null then
    insert into payrail.provider_methods as pm
      (provider, method, urls, docs_url, guidance, enabled, embedding, embedding_model, embedding_content_hash, mixed_scripts)
    values
      (v_provider, v_method, p_urls, p_docs_url, p_guidance, coalesce(p_enabled, false),
       p_embedding, p_embedding_model, v_embedding_content_hash, coalesce(p_mixed_scripts, false))
    returning pm.id, pm.version into record_id, record_version;
  end if;
  if v_current.id is null then
    outcome := 'created';
    return next;
    return;
  end if;

  -- "is not distinct from", spelt out with qualified operators (db/CONVENTIONS.md).
  if p_embedding is null
     and coalesce(v_provider operator(pg_catalog.=) v_current.provider, (v_provider is null) operator(pg_catalog.=) (v_current.provider is null))
     and coalesce(v_method operator(pg_catalog.=) v_current.method, (v_method is null) operator(pg_catalog.=) (v_current.method is null))
     and coalesce(p_urls operator(pg_catalog.=) v_current.urls, (p_urls is null) operator(pg_catalog.=) (v_current.urls is null))
     and coalesce(p_docs_url operator(pg_catalog.=) v_current.docs_url, (p_docs_url is null) operator(pg_catalog.=) (v_current.docs_url is null))
     and coalesce(p_guidance operator(pg_catalog.=) v_current.guidance, (p_guidance is null) operator(pg_catalog.=) (v_current.guidance is null))
     and coalesce(p_enabled, v_current.enabled) operator(pg_catalog.=) v_current.enabled
     and coalesce(p_mixed_scripts, v_current.mixed_scripts) operator(pg_catalog.=) v_current.mixed_scripts then
    return query select v_current.id, v_current.version, 'unchanged'::text;
    return;
  end if;

  if p_embedding is null then
    update payrail.provider_methods as pm
    set provider = v_provider, method = v_method, urls = p_urls, docs_url = p_docs_url, guidance = p_guidance,
        enabled = coalesce(p_enabled, pm.enabled), mixed_scripts = coalesce(p_mixed_scripts, pm.mixed_scripts)
    where pm.id operator(pg_catalog.=) v_current.id
    returning pm.id, pm.version into record_id, record_version;
  else
    update payrail.provider_methods as pm
    set provider = v_provider, method = v_method, urls = p_urls, docs_url = p_docs_url, guidance = p_guidance,
        enabled = coalesce(p_enabled, pm.enabled), mixed_scripts = coalesce(p_mixed_scripts, pm.mixed_scripts),
        embedding = p_embedding, embedding_model = p_embedding_model, embedding_content_hash = v_embedding_content_hash
    where pm.id operator(pg_catalog.=) v_current.id
    returning pm.id, pm.version into record_id, record_version;
  end if;
  outcome := 'updated';
  return next;
end
$$;

comment on function payrail.save_provider_method(bigint, integer, text, text, text[], text, text, boolean, vector, text, boolean) is
$$Saves one record's public fields and enabled, with the vector of its content when one is given; one statement.

The write path of import, `payrail-embedder edit` and the backoffice. p_id names the record;
NULL means the record named p_provider / p_method (names compare as the unique key does), or a
new one. p_expected_version is the version the caller read: the save is refused with PYE03 if
the record has another version now (or was deleted); 0 means the record must be new
(unique_violation otherwise); NULL skips the check. p_enabled NULL keeps the record's state (a
new record starts disabled). p_embedding must be the embedding of p_provider, p_method and
p_guidance (as payrail._canonical_name stores the names) by the registry's model p_embedding_model;
without one, the vector rules apply as to any edit: URL-only edits and enabling keep the
current vector, a content edit of an enabled record is refused and a draft's is cleared.
p_mixed_scripts: the operator's word that the names mix scripts on purpose (NULL keeps the
record's; a new record starts without it).
Returns the record's id, its version after the save, and created, updated or unchanged
(nothing differed, so nothing was written and no version was made).$$;
