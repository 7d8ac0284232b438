-- Records got the catalog they came from (provider_methods.source: an import's file name, "backoffice",
-- "edit", "psql"), kept by each version in the history and by the records list's entries (its
-- filter). A registry from before gets the column on the three tables, every stored row saying
-- "before sources were kept" (nothing recorded where a record came from: the history says who
-- saved it, not from which file). A column added with a constant default is written in the
-- catalog alone, never row by row: the ACCESS EXCLUSIVE lock is held for that, not for a rewrite
-- of the table (tests/postgres/test_upgrades.py checks the table's file is the same). New records then get
-- 'psql' unless their writer names a source (030's default); the history and the entries have no
-- default, as in a new registry: their triggers write every row. The functions whose signatures
-- gain the source, and the write path's change type (an attribute added last, which the type's
-- file and its functions' files then make anew), go, so no call resolves to the old ones.
select payrail._run_upgrade_step('013-provider_method_sources', $step$
declare
  v_table regclass;
  v_keeps_default boolean;
begin
  for v_table, v_keeps_default in
    values (pg_catalog.to_regclass('payrail.provider_methods'), true),
           (pg_catalog.to_regclass('payrail.provider_method_history'), false),
           (pg_catalog.to_regclass('payrail.provider_method_list_entries'), false)
  loop
    if v_table is not null and not exists (select from pg_catalog.pg_attribute
                                           where attrelid operator(pg_catalog.=) v_table
                                             and attname operator(pg_catalog.=) 'source' and not attisdropped) then
      perform payrail._needs_exclusive_lock(v_table, 'upgrade 013 adds column source');
      execute pg_catalog.format('alter table %s add column source text not null default %L', v_table, 'before sources were kept');
      execute pg_catalog.format('alter table %s alter column source %s', v_table,
                                case when v_keeps_default then 'set default ''psql''' else 'drop default' end);
    end if;
  end loop;
  drop function if exists payrail.list_provider_methods(text, text, integer, text, text, bigint, boolean);
  drop function if exists payrail.check_provider_method(bigint, text, text, text[], text, text, boolean);
  drop function if exists payrail.save_provider_method(bigint, integer, text, text, text[], text, text, boolean, vector, text, boolean);
  if pg_catalog.to_regtype('payrail.provider_method_change') is not null then
    drop function if exists payrail.save_provider_methods(payrail.provider_method_change[], boolean, boolean);
    drop function if exists payrail.provider_method_changes(jsonb, vector[]);
    drop function if exists payrail._write_provider_method_change(payrail.provider_method_change, bigint, integer, boolean);
    drop function if exists payrail._broken_rules(payrail.provider_method_change, bigint, text, text, text, text);
    drop type payrail.provider_method_change;
  end if;
end
$step$);
