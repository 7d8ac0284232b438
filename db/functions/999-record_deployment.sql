-- The registry's search path (010-schema.sql), so this file alone, rerun, leaves the same catalog.
do $$ begin perform pg_catalog.set_config('search_path', payrail._search_path(), false); end $$;

-- Last: the schema version this apply leaves (payrail.deployments, read with get_schema_version()).
select payrail._record_deployment();
