-- The registry's search path (010-schema.sql), so this file alone, rerun, leaves the same catalog.
do $$ begin perform pg_catalog.set_config('search_path', payrail._search_path(), false); end $$;

-- Records got a version (optimistic concurrency, payrail.save_provider_method): a registry
-- created before gets the column, every record at version 1.
do $$
begin
  if not payrail._upgrade_due('001-provider_methods_version') then
    return;
  end if;
  if not exists (select from pg_catalog.pg_attribute
                 where attrelid operator(pg_catalog.=) pg_catalog.to_regclass('payrail.provider_methods') and attname operator(pg_catalog.=) 'version'
                   and not attisdropped) then
    perform payrail._needs_exclusive_lock('payrail.provider_methods', 'upgrade 001 adds column version');
    alter table payrail.provider_methods add column version integer not null default 1;
  end if;
end
$$;
