-- Records got a version (optimistic concurrency, payrail.save_provider_method): a registry
-- created before gets the column, every record at version 1.
select payrail._run_upgrade_step('001-provider_methods_version', $step$
begin
  if not exists (select from pg_catalog.pg_attribute
                 where attrelid operator(pg_catalog.=) pg_catalog.to_regclass('payrail.provider_methods') and attname operator(pg_catalog.=) 'version'
                   and not attisdropped) then
    perform payrail._needs_exclusive_lock('payrail.provider_methods', 'upgrade 001 adds column version');
    alter table payrail.provider_methods add column version integer not null default 1;
  end if;
end
$step$);
