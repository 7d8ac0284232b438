-- The registry's search path (010-schema.sql), so this file alone, rerun, leaves the same catalog.
do $$ begin perform pg_catalog.set_config('search_path', payrail._search_path(), false); end $$;

-- The one statement of "has a current vector", which the records list and its counts, sync and
-- the write plan all ask. A view, not a function: PostgreSQL inlines it into each query, where a
-- function (its search path pinned) costs a call per row, 0.2 to 0.4 s per 100,000 records
-- counted. Its invoker's privileges apply, as to the table. Replaced only when its definition
-- changed (a column added to the table, a new rule): create or replace view locks the view
-- exclusively, and the records list would wait for the deploy to commit.
do $$
declare
  -- A vector by the registry's model of the record's current content (provider_methods_
  -- embedding_content_check holds for every stored vector): an enabled record always has one.
  -- First, so a column added to the table later lands at the end of the view too.
  v_definition constant text := $view$
    select (pm.embedding is not null and pm.embedding_model = m.name) is true as has_current_vector,
           pm.*
    from payrail.provider_methods as pm
    left join payrail.embedding_model as m on true
  $view$;
begin
  execute 'create temporary view provider_method_states_wanted as ' || v_definition;
  if pg_catalog.pg_get_viewdef(pg_catalog.to_regclass('payrail.provider_method_states'))
     is distinct from pg_catalog.pg_get_viewdef(pg_catalog.to_regclass('pg_temp.provider_method_states_wanted')) then
    execute 'create or replace view payrail.provider_method_states with (security_invoker = true) as ' || v_definition;
  end if;
  drop view pg_temp.provider_method_states_wanted;
end
$$;

comment on view payrail.provider_method_states is
$$Every record with whether it has a current vector: the one definition of that rule.

has_current_vector: a vector by the registry's model (payrail.get_embedding_model()) of the
record's current provider, method and guidance. Search needs it for an enabled record (which
always has one) and preview for a draft; `payrail-embedder sync` embeds every record without one.$$;
comment on column payrail.provider_method_states.has_current_vector is
$$Whether the record has a vector by the registry's model of its current content.$$;
-- The table's columns mean the same here: their comments, copied.
do $$
declare
  v_column record;
begin
  for v_column in
    select a.attname, pg_catalog.col_description(a.attrelid, a.attnum) as description
    from pg_catalog.pg_attribute as a
    where a.attrelid = 'payrail.provider_methods'::pg_catalog.regclass and a.attnum > 0 and not a.attisdropped
  loop
    execute pg_catalog.format('comment on column payrail.provider_method_states.%I is %L', v_column.attname, v_column.description);
  end loop;
end
$$;
