-- The name path's indexes hold enabled records only (db/schema/030): the first ones held drafts
-- too, so an agent's lookup of a draft's name read more than one of an unknown name.
select payrail._run_upgrade_step('003-enabled_name_indexes', $step$
declare
  v_index regclass;
begin
  foreach v_index in array array[pg_catalog.to_regclass('payrail.provider_methods_method_name_idx'),
                                 pg_catalog.to_regclass('payrail.provider_methods_pair_name_idx'),
                                 pg_catalog.to_regclass('payrail.provider_methods_pair_slash_name_idx')] loop
    if v_index is not null then
      perform payrail._needs_exclusive_lock('payrail.provider_methods', pg_catalog.format('upgrade 003 drops index %s', v_index));
      execute pg_catalog.format('drop index %s', v_index);
    end if;
  end loop;
end
$step$);
