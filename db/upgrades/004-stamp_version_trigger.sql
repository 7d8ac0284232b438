-- tg_provider_methods__stamp_version (db/functions/100) replaced tg_provider_methods__set_updated_at,
-- which stamped vector-only writes too.
select payrail._run_upgrade_step('004-stamp_version_trigger', $step$
begin
  if exists (select from pg_catalog.pg_trigger
             where tgrelid operator(pg_catalog.=) pg_catalog.to_regclass('payrail.provider_methods') and tgname operator(pg_catalog.=) 'tg_provider_methods__set_updated_at') then
    perform payrail._needs_exclusive_lock('payrail.provider_methods', 'upgrade 004 drops trigger tg_provider_methods__set_updated_at');
    drop trigger tg_provider_methods__set_updated_at on payrail.provider_methods;
  end if;
  drop function if exists payrail.tg_provider_methods__set_updated_at();
end
$step$);
