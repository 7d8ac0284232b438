-- The registry's search path (010-schema.sql), so this file alone, rerun, leaves the same catalog.
do $$ begin perform pg_catalog.set_config('search_path', payrail._search_path(), false); end $$;

-- tg_provider_methods__stamp_version (db/functions/100) replaced tg_provider_methods__set_updated_at,
-- which stamped vector-only writes too.
do $$
begin
  if not payrail._upgrade_due('004-stamp_version_trigger') then
    return;
  end if;
  if exists (select from pg_catalog.pg_trigger
             where tgrelid operator(pg_catalog.=) pg_catalog.to_regclass('payrail.provider_methods') and tgname operator(pg_catalog.=) 'tg_provider_methods__set_updated_at') then
    perform payrail._needs_exclusive_lock('payrail.provider_methods', 'upgrade 004 drops trigger tg_provider_methods__set_updated_at');
    drop trigger tg_provider_methods__set_updated_at on payrail.provider_methods;
  end if;
  drop function if exists payrail.tg_provider_methods__set_updated_at();
end
$$;
