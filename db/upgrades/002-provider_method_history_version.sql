-- History entries got the version they held, and who changed a record is written by the trigger
-- alone: a registry whose history predates either gets the column (NULL for its old entries)
-- and loses the defaults, which named the trigger's owner once it became security definer.
select payrail._run_upgrade_step('002-provider_method_history_version', $step$
declare
  v_history regclass := pg_catalog.to_regclass('payrail.provider_method_history');
begin
  if v_history is null then
    return;
  end if;
  if not exists (select from pg_catalog.pg_attribute where attrelid operator(pg_catalog.=) v_history and attname operator(pg_catalog.=) 'version' and not attisdropped) then
    perform payrail._needs_exclusive_lock(v_history, 'upgrade 002 adds column version');
    alter table payrail.provider_method_history add column version integer;
  end if;
  if exists (select from pg_catalog.pg_attrdef as d
             join pg_catalog.pg_attribute as a on (a.attrelid, a.attnum) operator(pg_catalog.=) (d.adrelid, d.adnum)
             where d.adrelid operator(pg_catalog.=) v_history and a.attname operator(pg_catalog.=) any (array['changed_by', 'changed_by_session_user'])) then
    perform payrail._needs_exclusive_lock(v_history, 'upgrade 002 drops the defaults of changed_by and changed_by_session_user');
    alter table payrail.provider_method_history
      alter column changed_by drop default,
      alter column changed_by_session_user drop default;
  end if;
end
$step$);
