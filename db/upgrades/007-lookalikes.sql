-- No record can pose as another (db/schema/018-lookalikes.sql): records and history entries get
-- the operator's word that a name mixes scripts on purpose (mixed_scripts, false for every record
-- saved before), and the write functions that take it replace their signatures without it, so no
-- call resolves to the old ones. The rules then apply to every write; the mixed-scripts and
-- ASCII-host constraints check the stored rows in db apply's follow-up, which names any record
-- that breaks them, and payrail.find_lookalikes() lists stored records that look alike.
select payrail._run_upgrade_step('007-lookalikes', $step$
declare
  v_table regclass;
begin
  foreach v_table in array array[pg_catalog.to_regclass('payrail.provider_methods'),
                                 pg_catalog.to_regclass('payrail.provider_method_history')] loop
    if v_table is not null and not exists (select from pg_catalog.pg_attribute
                                           where attrelid operator(pg_catalog.=) v_table
                                             and attname operator(pg_catalog.=) 'mixed_scripts' and not attisdropped) then
      perform payrail._needs_exclusive_lock(v_table, 'upgrade 007 adds column mixed_scripts');
      execute pg_catalog.format('alter table %s add column mixed_scripts boolean not null default false', v_table);
    end if;
  end loop;
  drop function if exists payrail.save_provider_method(bigint, integer, text, text, text[], text, text, boolean, vector, text);
  drop function if exists payrail.check_provider_method(bigint, text, text, text[], text, text);
end
$step$);
