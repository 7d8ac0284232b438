-- pg_temp.error_of(sql) runs one statement and returns what its error reported (all null when it
-- succeeded), so a test can assert the SQLSTATE, constraint, table, message and hint the database
-- gives a caller. Included by the pgTAP files with \ir; pg_prove runs only db/tests/*.sql.
create function pg_temp.error_of(
  p_sql text,
  out e_sqlstate text, out e_constraint text, out e_table text, out e_message text, out e_hint text)
language plpgsql
as $$
begin
  execute p_sql;
exception when others then
  get stacked diagnostics
    e_sqlstate = returned_sqlstate, e_constraint = constraint_name, e_table = table_name,
    e_message = message_text, e_hint = pg_exception_hint;
end
$$;
