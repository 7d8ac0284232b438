-- The registry's search path (010-schema.sql), so this file alone, rerun, leaves the same catalog.
do $$ begin perform pg_catalog.set_config('search_path', payrail._search_path(), false); end $$;

create or replace function payrail.delete_provider_method(
  p_id bigint,
  p_expected_version integer,
  p_with_golden_queries boolean default false
)
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
  if p_with_golden_queries then
    -- The record leaves every golden query naming it; a query it was the only relevant record of
    -- goes too (the statement sees the links as they were before its own delete).
    with left_queries as (
      delete from payrail.golden_query_records as r
      where r.record_id operator(pg_catalog.=) p_id
      returning r.golden_query_id
    )
    delete from payrail.golden_queries as g
    where exists (select from left_queries as l where l.golden_query_id operator(pg_catalog.=) g.id)
      and not exists (select from payrail.golden_query_records as other
                      where other.golden_query_id operator(pg_catalog.=) g.id
                        and other.record_id operator(pg_catalog.<>) p_id);
  end if;
  -- Refused in words while golden queries name it (tg_provider_methods__keep_golden_queries).
  delete from payrail.provider_methods as pm where pm.id operator(pg_catalog.=) p_id;
  return v_current.version;
end
$$;

comment on function payrail.delete_provider_method(bigint, integer, boolean) is
$$Deletes one record if it is still at the version the caller read; returns that version.

The delete of the backoffice, and of psql users who want its rules: refused with PYE03, nothing
deleted, when the record has another version now or was deleted already (the same words as
payrail.save_provider_method's). p_expected_version NULL skips the version check. Refused (23503,
golden_query_records_record_id_fkey, naming them) while golden queries name the record, unless
p_with_golden_queries: then the record leaves those queries, and each query it was the only
relevant record of is removed with it. The history keeps the deleted version
(payrail.restore_provider_method brings it back as a new draft), not the golden queries:
select payrail.delete_provider_method(42, 3);
select payrail.delete_provider_method(42, 3, p_with_golden_queries => true);$$;
