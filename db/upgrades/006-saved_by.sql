-- Records and history entries got who saved each version (provider_methods.saved_by, written by
-- tg_provider_methods__stamp_version, and the history's version_saved_by): a registry created
-- before gets the columns, NULL for the versions saved before (shown as saved by "unknown").
select payrail._run_upgrade_step('006-saved_by', $step$
declare
  v_table regclass;
  v_column text;
begin
  for v_table, v_column in
    values (pg_catalog.to_regclass('payrail.provider_methods'), 'saved_by'),
           (pg_catalog.to_regclass('payrail.provider_method_history'), 'version_saved_by')
  loop
    if v_table is not null and not exists (select from pg_catalog.pg_attribute
                                           where attrelid operator(pg_catalog.=) v_table and attname operator(pg_catalog.=) v_column and not attisdropped) then
      perform payrail._needs_exclusive_lock(v_table, pg_catalog.format('upgrade 006 adds column %s', v_column));
      execute pg_catalog.format('alter table %s add column %I text', v_table, v_column);
    end if;
  end loop;
end
$step$);
