-- The registry's search path (010-schema.sql), so this file alone, rerun, leaves the same catalog.
do $$ begin perform pg_catalog.set_config('search_path', payrail._search_path(), false); end $$;

create or replace function payrail.tg_provider_methods__record_history()
returns trigger
language plpgsql
volatile
-- Definer: no role may write the history, so entries come from this trigger alone.
security definer
set search_path from current
as $$
begin
  if tg_op operator(pg_catalog.=) 'UPDATE' and new.version operator(pg_catalog.=) old.version then
    -- A vector-only write (sync, model switch) is not a new version.
    return null;
  end if;
  insert into payrail.provider_method_history
    (provider_method_id, operation, provider, method, urls, docs_url, guidance, enabled, version, version_saved_at,
     version_saved_by, mixed_scripts, source, changed_at, changed_by, changed_by_session_user)
  values
    (old.id, pg_catalog.lower(tg_op), old.provider, old.method, old.urls, old.docs_url, old.guidance, old.enabled,
     old.version, old.updated_at, old.saved_by, old.mixed_scripts, old.source,
     -- Replaced when the next version was saved; deleted now.
     case when tg_op operator(pg_catalog.=) 'UPDATE' then new.updated_at else pg_catalog.clock_timestamp() end,
     payrail._author(),
     session_user);
  return null;
end
$$;

comment on function payrail.tg_provider_methods__record_history() is
$$Keeps the version an update or delete replaces in payrail.provider_method_history.

Only a new version (a change of a public field or enabled) is kept; vector-only writes are not.
Security definer: the history is written by this trigger alone, never by a role directly.$$;

create or replace trigger tg_provider_methods__record_history
  after update or delete on payrail.provider_methods
  for each row execute function payrail.tg_provider_methods__record_history();

create or replace function payrail.get_provider_method_history(p_provider text, p_method text)
returns setof payrail.provider_method_history
language sql
stable
security invoker
set search_path from current
as $$
  -- The record now named so, and every record that was ever named so (renamed or deleted since).
  with records as (
    select pm.id
    from payrail.provider_methods as pm
    where payrail._normalize_name(pm.provider) operator(pg_catalog.=) payrail._normalize_name(p_provider)
      and payrail._normalize_name(pm.method) operator(pg_catalog.=) payrail._normalize_name(p_method)
    union
    select h.provider_method_id
    from payrail.provider_method_history as h
    where payrail._normalize_name(h.provider) operator(pg_catalog.=) payrail._normalize_name(p_provider)
      and payrail._normalize_name(h.method) operator(pg_catalog.=) payrail._normalize_name(p_method)
  )
  select h.*
  from payrail.provider_method_history as h
  where h.provider_method_id operator(pg_catalog.=) any (select id from records)
  order by h.id desc
$$;

comment on function payrail.get_provider_method_history(text, text) is
$$Earlier versions of the provider method named p_provider / p_method, newest first.

Names compare as the unique key does (payrail._normalize_name). Covers the record now so named
and any record that once was (renamed or deleted since), with every version of each. Restore one
with payrail.restore_provider_method(id).$$;

create or replace function payrail.restore_provider_method(p_history_id bigint, p_as_draft boolean default false)
returns bigint
language plpgsql
volatile
security invoker
set search_path from current
as $$
declare
  v_version payrail.provider_method_history;
  v_current payrail.provider_methods;
  v_id bigint;
begin
  select * into v_version from payrail.provider_method_history where id operator(pg_catalog.=) p_history_id;
  if not found then
    raise exception using
      errcode = 'no_data_found',
      message = pg_catalog.format('there is no history entry %s', p_history_id),
      hint = 'List a record''s versions with `payrail-embedder history PROVIDER METHOD` '
             'or payrail.get_provider_method_history(provider, method).';
  end if;

  select * into v_current from payrail.provider_methods where id operator(pg_catalog.=) v_version.provider_method_id for update;
  if not found then
    -- A deleted record comes back as a new draft: it has no vector yet.
    insert into payrail.provider_methods (provider, method, urls, docs_url, guidance, enabled, mixed_scripts, source)
    values (v_version.provider, v_version.method, v_version.urls, v_version.docs_url, v_version.guidance, false,
            v_version.mixed_scripts, v_version.source)
    returning id into v_id;
    return v_id;
  end if;

  if v_current.enabled and not p_as_draft
     and (v_version.provider operator(pg_catalog.<>) v_current.provider or v_version.method operator(pg_catalog.<>) v_current.method
          or v_version.guidance operator(pg_catalog.<>) v_current.guidance) then
    raise exception using
      errcode = 'check_violation',
      constraint = 'provider_methods_enabled_needs_embedding_check',
      schema = 'payrail',
      table = 'provider_methods',
      message = pg_catalog.format(
        'provider method "%s / %s" is enabled, and history entry %s has another provider, method or guidance, '
        'which needs a fresh embedding', v_current.provider, v_current.method, p_history_id),
      detail = 'An enabled record must always carry an embedding of its current provider, method and guidance.',
      hint = pg_catalog.format(
        'Restore it as a draft: select payrail.restore_provider_method(%s, p_as_draft => true); '
        'then run `payrail-embedder sync` and set enabled = true.', p_history_id);
  end if;

  -- The keep_embedding_current trigger keeps the vector when the content is the same
  -- (a URL-only version) and drops a draft's stale one otherwise.
  update payrail.provider_methods
  set provider = v_version.provider,
      method = v_version.method,
      urls = v_version.urls,
      docs_url = v_version.docs_url,
      guidance = v_version.guidance,
      mixed_scripts = v_version.mixed_scripts,
      source = v_version.source,
      enabled = enabled and not p_as_draft
  where id operator(pg_catalog.=) v_current.id;
  return v_current.id;
end
$$;

comment on function payrail.restore_provider_method(bigint, boolean) is
$$Restores the public fields (and mixed_scripts and source) of an earlier version (a payrail.provider_method_history id); returns the record id.

The record keeps its enabled state, so restoring the provider, method or guidance of an enabled
record is refused (check_violation, with a hint): pass p_as_draft => true to restore it as a
draft, then run `payrail-embedder sync` and enable it. A version with the same content (e.g.
only other URLs) is restored in place, vector kept. A deleted record comes back as a new draft.
The version being replaced is itself kept in the history, so a restore can be undone.$$;
