-- The registry's search path (010-schema.sql), so this file alone, rerun, leaves the same catalog.
do $$ begin perform pg_catalog.set_config('search_path', payrail._search_path(), false); end $$;

-- The name path's indexes hold enabled records only (db/schema/030): the first ones held drafts
-- too, so an agent's lookup of a draft's name read more than one of an unknown name.
do $$
declare
  v_index regclass;
begin
  if not payrail._upgrade_due('003-enabled_name_indexes') then
    return;
  end if;
  foreach v_index in array array[pg_catalog.to_regclass('payrail.provider_methods_method_name_idx'),
                                 pg_catalog.to_regclass('payrail.provider_methods_pair_name_idx'),
                                 pg_catalog.to_regclass('payrail.provider_methods_pair_slash_name_idx')] loop
    if v_index is not null then
      perform payrail._needs_exclusive_lock('payrail.provider_methods', pg_catalog.format('upgrade 003 drops index %s', v_index));
      execute pg_catalog.format('drop index %s', v_index);
    end if;
  end loop;
end
$$;
