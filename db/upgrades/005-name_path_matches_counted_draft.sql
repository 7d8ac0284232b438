-- The registry's search path (010-schema.sql), so this file alone, rerun, leaves the same catalog.
do $$ begin perform pg_catalog.set_config('search_path', payrail._search_path(), false); end $$;

-- payrail._name_path_matches took the record to count as enabled (p_counted_draft_id) when
-- preview_search came: its one-argument form would make calls of the new one ambiguous.
do $$
begin
  if payrail._upgrade_due('005-name_path_matches_counted_draft') then
    drop function if exists payrail._name_path_matches(text);
  end if;
end
$$;
