-- The registry's search path (010-schema.sql), so this file alone, rerun, leaves the same catalog.
do $$ begin perform pg_catalog.set_config('search_path', payrail._search_path(), false); end $$;

create or replace function payrail.list_provider_methods(
  p_text text default null,
  p_state text default null,
  p_limit integer default null,
  p_cursor_provider_key text default null,
  p_cursor_method_key text default null,
  p_cursor_id bigint default null,
  p_backwards boolean default false
)
returns table (
  id bigint,
  version integer,
  provider text,
  method text,
  enabled boolean,
  updated_at timestamptz,
  saved_by text,
  state text,
  embedded boolean,
  provider_key text,
  method_key text,
  matching bigint
)
language plpgsql
stable
security invoker
set search_path from current
-- Planned for each call's own values: a page with no cursor, or no filter, is a plan of its own
-- (a walk of the list's index from its start, or from the cursor), never one that tests every row.
set plan_cache_mode = force_custom_plan
as $$
declare
  v_filtered constant boolean := coalesce(p_text, '') operator(pg_catalog.<>) '' or p_state is not null;
  v_text constant text := pg_catalog.lower(coalesce(p_text, ''));
  v_cursor constant boolean := p_cursor_id is not null;
begin
  if p_state is not null and not p_state operator(pg_catalog.=) any (array['enabled', 'draft', 'draft needing an embedding']) then
    raise exception using
      errcode = 'invalid_parameter_value',
      message = pg_catalog.format('%s is no state of a record', pg_catalog.to_json(p_state)),
      hint = 'A record is enabled, a draft, or a draft needing an embedding.';
  end if;
  if not v_filtered then
    -- The whole list: a walk of provider_methods_list_order_idx, from the cursor on (or back).
    return query
      select pm.id, pm.version, pm.provider, pm.method, pm.enabled, pm.updated_at, pm.saved_by,
             case when pm.enabled then 'enabled' when pm.has_current_vector then 'draft' else 'draft needing an embedding' end,
             pm.has_current_vector, pg_catalog.lower(pm.provider), pg_catalog.lower(pm.method), null::bigint
      from payrail.provider_method_states as pm
      where not v_cursor or (case when p_backwards
        then (pg_catalog.lower(pm.provider), pg_catalog.lower(pm.method), pm.id) operator(pg_catalog.<) (p_cursor_provider_key, p_cursor_method_key, p_cursor_id)
        else (pg_catalog.lower(pm.provider), pg_catalog.lower(pm.method), pm.id) operator(pg_catalog.>) (p_cursor_provider_key, p_cursor_method_key, p_cursor_id) end)
      order by case when p_backwards then pg_catalog.lower(pm.provider) end desc, case when p_backwards then pg_catalog.lower(pm.method) end desc,
               case when p_backwards then pm.id end desc,
               pg_catalog.lower(pm.provider), pg_catalog.lower(pm.method), pm.id
      limit p_limit;
    return;
  end if;
  -- Filtered: one scan of the narrow list entries finds and counts the matches (the same with
  -- statistics or without), the page is sorted from them by the entries' copy of the list's
  -- key, and the page's records are read by id. An empty page is one row of NULLs but matching,
  -- so the count comes with every page.
  return query
    with matches as materialized (
      select e.provider_method_id, e.has_current_vector, e.provider_key, e.method_key
      from payrail.provider_method_list_entry_states as e
      where pg_catalog.strpos(e.filter_text, v_text) operator(pg_catalog.>) 0
        and (p_state is null
             or (p_state operator(pg_catalog.=) 'enabled' and e.enabled)
             or (p_state operator(pg_catalog.=) 'draft' and not e.enabled and e.has_current_vector)
             or (p_state operator(pg_catalog.=) 'draft needing an embedding' and not e.enabled and not e.has_current_vector)))
    select pm.id, pm.version, pm.provider, pm.method, pm.enabled, pm.updated_at, pm.saved_by,
           case when pm.id is null then null when pm.enabled then 'enabled' when e.has_current_vector then 'draft' else 'draft needing an embedding' end,
           e.has_current_vector, e.provider_key, e.method_key, c.matching
    from (select pg_catalog.count(*) as matching from matches) as c
    left join lateral (
      select m.* from matches as m
      where not v_cursor or (case when p_backwards
        then (m.provider_key, m.method_key, m.provider_method_id) operator(pg_catalog.<) (p_cursor_provider_key, p_cursor_method_key, p_cursor_id)
        else (m.provider_key, m.method_key, m.provider_method_id) operator(pg_catalog.>) (p_cursor_provider_key, p_cursor_method_key, p_cursor_id) end)
      order by case when p_backwards then m.provider_key end desc, case when p_backwards then m.method_key end desc,
               case when p_backwards then m.provider_method_id end desc,
               m.provider_key, m.method_key, m.provider_method_id
      limit p_limit) as e on true
    left join lateral (select p.* from payrail.provider_methods as p where p.id operator(pg_catalog.=) e.provider_method_id offset 0) as pm on true
    order by case when p_backwards then e.provider_key end desc, case when p_backwards then e.method_key end desc,
             case when p_backwards then e.provider_method_id end desc,
             e.provider_key, e.method_key, e.provider_method_id;
end
$$;

comment on function payrail.list_provider_methods(text, text, integer, text, text, bigint, boolean) is
$$The records list (the backoffice's, `payrail-embedder list`): records by provider and method ignoring case, then id, each with its state.

p_text: only records whose provider, method, guidance, URLs or docs URL contain it, ignoring case;
p_state: only those that are 'enabled', a 'draft' (with a vector of its current content, by
payrail.provider_method_states' rule), or a 'draft needing an embedding' (22023 for another).
p_limit: at most that many (NULL: every one). The cursor is a row's list key (provider_key,
method_key, id): the page starts after it, or ends before it with p_backwards (then in reverse
order). matching counts what the filter matches (NULL without one); a filtered page that is empty
is one row of NULLs but matching. The whole list walks provider_methods_list_order_idx; a
filtered one scans payrail.provider_method_list_entries, never the records' vectors:
select provider, method, state from payrail.list_provider_methods('acme', 'draft', 100);$$;
