-- The registry's search path (010-schema.sql), so this file alone, rerun, leaves the same catalog.
do $$ begin perform pg_catalog.set_config('search_path', payrail._search_path(), false); end $$;

-- payrail.delete_provider_method took p_with_golden_queries when golden queries came: its
-- two-argument form would make calls of the new one ambiguous.
do $$
begin
  if payrail._upgrade_due('008-delete_provider_method_golden_queries') then
    drop function if exists payrail.delete_provider_method(bigint, integer);
  end if;
end
$$;
