create schema if not exists payrail;

comment on schema payrail is
$$Payrail Agent Search: the discovery registry of provider methods.

Tables hold one row per provider method; functions hold the rules and the search.
See README.md and db/ERRCODES.md.$$;

-- Every function below pins its search_path with "set search_path from current": this
-- setting is what they capture, so they find pgvector's operators in whichever schema the
-- extension lives. pg_catalog comes first so no object in another schema can shadow a built-in
-- operator inside a security definer function. Session-level, so the files also work when run
-- outside one transaction.
do $$
declare
  v_vector_schema name := (
    select extnamespace::regnamespace::name from pg_catalog.pg_extension where extname = 'vector');
begin
  perform pg_catalog.set_config(
    'search_path',
    pg_catalog.format('pg_catalog, payrail, %I, pg_temp', v_vector_schema),
    false);
end
$$;

-- Group roles without login; a deployment grants them to its login roles.
do $$
declare
  v_role name;
begin
  foreach v_role in array array['payrail_agent', 'payrail_operator', 'payrail_embedder'] loop
    if not exists (select from pg_catalog.pg_roles where rolname = v_role) then
      execute pg_catalog.format('create role %I nologin', v_role);
    end if;
  end loop;
end
$$;

comment on role payrail_agent is 'Payrail agents: may only call the search functions; cannot read any table.';
comment on role payrail_operator is 'Payrail operators: edit the public fields and enabled of provider methods.';
comment on role payrail_embedder is 'Payrail embedder: reads record content and writes embeddings.';
