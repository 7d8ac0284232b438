-- The registry's group roles, without login; a deployment grants them to its login roles.
-- Roles belong to the server, not to a database, so a dump holds none: `payrail-embedder db roles`
-- runs this file alone on a new server before a restore (docs/operations.md), where no schema or
-- extension exists yet. So it names everything it uses by its schema, operators included (a
-- deployer's search path may put a schema others write before pg_catalog), and sets no search path.
-- Idempotent without privileges: it creates or comments a role only when that changes something.
-- It says what it did with each role in a notice, `created role X` or `role X exists`: the
-- report of `db roles`.
do $$
declare
  v_role text;
  v_comment text;
  v_detail text;
begin
  for v_role, v_comment in
    select * from (values
      ('payrail_agent', 'Payrail agents: may only call the search functions; cannot read any table.'),
      ('payrail_operator', 'Payrail operators: edit the public fields and enabled of provider methods.'),
      ('payrail_embedder', 'Payrail embedder: reads record content and writes embeddings.')) as r
  loop
    if exists (select from pg_catalog.pg_roles where rolname operator(pg_catalog.=) v_role) then
      raise notice 'role % exists', v_role;
    else
      begin
        execute pg_catalog.format('create role %I nologin', v_role);
        raise notice 'created role %', v_role;
      exception
        when duplicate_object or unique_violation then
          -- Another session (a `db apply` of another database of this server) created it meanwhile.
          raise notice 'role % exists', v_role;
        when insufficient_privilege then
          get stacked diagnostics v_detail = pg_exception_detail;
          raise exception using
            errcode = 'insufficient_privilege',
            message = pg_catalog.format('cannot create the group role %s: %s', v_role, sqlerrm),
            detail = v_detail,
            hint = 'Run `payrail-embedder db roles` (or db apply) as a role with CREATEROLE, or as a superuser.';
      end;
    end if;
    -- "is distinct from" would look its operator up on the path: a missing comment (null) differs too.
    if (pg_catalog.shobj_description(pg_catalog.to_regrole(v_role), 'pg_authid') operator(pg_catalog.=) v_comment) is not true then
      execute pg_catalog.format('comment on role %I is %L', v_role, v_comment);
    end if;
  end loop;
end
$$;
