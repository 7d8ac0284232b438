-- The registry's search path (010-schema.sql), so this file alone, rerun, leaves the same catalog.
do $$ begin perform pg_catalog.set_config('search_path', payrail._search_path(), false); end $$;

create or replace function payrail.delete_provider_method(p_id bigint, p_expected_version integer)
returns integer
language plpgsql
volatile
security invoker
set search_path from current
as $$
declare
  v_current payrail.provider_methods;
begin
  select * into v_current from payrail.provider_methods as pm where pm.id operator(pg_catalog.=) p_id for update;
  perform payrail._refuse_edit_conflict(p_id, v_current, p_expected_version);
  delete from payrail.provider_methods as pm where pm.id operator(pg_catalog.=) p_id;
  return v_current.version;
end
$$;

comment on function payrail.delete_provider_method(bigint, integer) is
$$Deletes one record if it is still at the version the caller read; returns that version.

The delete of the backoffice, and of psql users who want its rules: refused with PYE03, nothing
deleted, when the record has another version now or was deleted already (the same words as
payrail.save_provider_method's). p_expected_version NULL skips the version check. The history
keeps the deleted version (payrail.restore_provider_method brings it back as a new draft):
select payrail.delete_provider_method(42, 3);$$;
