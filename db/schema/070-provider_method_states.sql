-- The registry's search path (010-schema.sql), so this file alone, rerun, leaves the same catalog.
do $$ begin perform pg_catalog.set_config('search_path', payrail._search_path(), false); end $$;

-- The one statement of "has a current vector", which the records list and its counts, sync and
-- the write path all ask, over the records and over the records list's narrow entries (db/schema/
-- 036). Views, not a function: PostgreSQL inlines them into each query, where a function (its
-- search path pinned) costs a call per row, 0.2 to 0.4 s per 100,000 records counted. Their
-- invoker's privileges apply, as to the tables. Each is replaced only when its definition changed
-- (a column added to the table, a new rule): create or replace view locks the view exclusively,
-- and the records list would wait for the deploy to commit.
do $$
declare
  -- A vector by the registry's model of the record's current content (provider_methods_
  -- embedding_content_check holds for every stored vector): an enabled record always has one.
  -- First, so a column added to a table later lands at the end of its view too.
  v_views constant text[][] := array[
    ['provider_method_states', $view$
      select (pm.embedding is not null and pm.embedding_model operator(pg_catalog.=) m.name) is true as has_current_vector,
             pm.*
      from payrail.provider_methods as pm
      left join payrail.embedding_model as m on true
    $view$],
    -- The entry's embedding_model is NULL exactly when the record has no vector. The registry's
    -- model (one row at most: embedding_model_singleton_check) read once per statement, not
    -- joined to every entry: a count of every entry takes half the time.
    ['provider_method_list_entry_states', $view$
      select (e.embedding_model operator(pg_catalog.=) (select m.name from payrail.embedding_model as m)) is true as has_current_vector,
             e.*
      from payrail.provider_method_list_entries as e
    $view$]];
  v_view text[];
  v_found text;
  v_wanted text;
begin
  foreach v_view slice 1 in array v_views loop
    execute pg_catalog.format('create temporary view %I as %s', v_view[1] operator(pg_catalog.||) '_wanted', v_view[2]);
    v_found := pg_catalog.pg_get_viewdef(pg_catalog.to_regclass('payrail.' operator(pg_catalog.||) v_view[1]));
    v_wanted := pg_catalog.pg_get_viewdef(pg_catalog.to_regclass('pg_temp.' operator(pg_catalog.||) v_view[1] operator(pg_catalog.||) '_wanted'));
    -- "is distinct from", spelt out with qualified operators (db/CONVENTIONS.md): a new view has no definition.
    if coalesce(v_found operator(pg_catalog.<>) v_wanted, v_found is null) then
      execute pg_catalog.format('create or replace view payrail.%I with (security_invoker = true) as %s', v_view[1], v_view[2]);
    end if;
    execute pg_catalog.format('drop view pg_temp.%I', v_view[1] operator(pg_catalog.||) '_wanted');
  end loop;
end
$$;

comment on view payrail.provider_method_states is
$$Every record with whether it has a current vector: the one definition of that rule.

has_current_vector: a vector by the registry's model (payrail.get_embedding_model()) of the
record's current provider, method and guidance. Search needs it for an enabled record (which
always has one) and preview for a draft; `payrail-embedder sync` embeds every record without one.$$;
comment on column payrail.provider_method_states.has_current_vector is
$$Whether the record has a vector by the registry's model of its current content.$$;
comment on view payrail.provider_method_list_entry_states is
$$Every record's list entry (payrail.provider_method_list_entries) with whether the record has a current vector.

has_current_vector: as in payrail.provider_method_states, from the entry's embedding_model. The
records list filters and counts by state and text from this, never reading provider_methods.$$;
comment on column payrail.provider_method_list_entry_states.has_current_vector is
$$Whether the record has a vector by the registry's model of its current content.$$;
-- The tables' columns mean the same in their views: their comments, copied.
do $$
declare
  v_column record;
begin
  for v_column in
    select v.view, a.attname, pg_catalog.col_description(a.attrelid, a.attnum) as description
    from (values ('provider_method_states', 'payrail.provider_methods'::pg_catalog.regclass),
                 ('provider_method_list_entry_states', 'payrail.provider_method_list_entries'::pg_catalog.regclass)) as v(view, tab)
    join pg_catalog.pg_attribute as a on a.attrelid operator(pg_catalog.=) v.tab
    where a.attnum operator(pg_catalog.>) 0 and not a.attisdropped
  loop
    execute pg_catalog.format('comment on column payrail.%I.%I is %L', v_column.view, v_column.attname, v_column.description);
  end loop;
end
$$;
