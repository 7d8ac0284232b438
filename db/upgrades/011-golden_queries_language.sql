-- Golden queries got the language their question is in (golden_queries.language, eval's tag):
-- a registry with golden queries from before gets the column, NULL for the queries it holds, and
-- loses payrail.add_golden_query(text, bigint[]), which 160-golden_queries.sql replaces by the
-- function that takes the language too (a rerun never leaves both overloads behind).
select payrail._run_upgrade_step('011-golden_queries_language', $step$
declare
  v_table constant regclass := pg_catalog.to_regclass('payrail.golden_queries');
begin
  if v_table is not null and not exists (select from pg_catalog.pg_attribute
                                         where attrelid operator(pg_catalog.=) v_table and attname operator(pg_catalog.=) 'language' and not attisdropped) then
    perform payrail._needs_exclusive_lock(v_table, 'upgrade 011 adds column language');
    alter table payrail.golden_queries add column language text;
  end if;
  drop function if exists payrail.add_golden_query(text, bigint[]);
end
$step$);
