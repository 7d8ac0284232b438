-- The registry's search path (010-schema.sql), so this file alone, rerun, leaves the same catalog.
do $$ begin perform pg_catalog.set_config('search_path', payrail._search_path(), false); end $$;

-- Earlier versions of provider methods: written by tg_provider_methods__record_history
-- (db/functions/120-provider_method_history.sql), restored by payrail.restore_provider_method.
create table if not exists payrail.provider_method_history (
  id bigint generated always as identity,
  provider_method_id bigint not null,
  operation text not null,
  provider text not null,
  method text not null,
  urls text[] not null,
  docs_url text,
  guidance text not null,
  enabled boolean not null,
  version_saved_at timestamptz not null,
  -- Only the trigger tg_provider_methods__record_history writes entries (no role may), so who
  -- and when are always the database's own account of the change.
  changed_at timestamptz not null default pg_catalog.now(),
  changed_by text not null,
  changed_by_session_user text not null,
  constraint provider_method_history_pkey primary key (id),
  -- The version number of the entry (provider_methods.version); NULL for entries written before
  -- records had versions. Last, where db/upgrades/002 adds it to registries created before it.
  version integer,
  -- Who saved the version the entry keeps (provider_methods.saved_by then); NULL for versions saved
  -- before the registry kept it. Last, where db/upgrades/006 adds it to registries created before it.
  version_saved_by text,
  -- provider_methods.mixed_scripts of the version. Last, where db/upgrades/007 adds it.
  mixed_scripts boolean not null default false,
  -- provider_methods.source of the version. Last, where db/upgrades/013 adds it (its entries say
  -- "before sources were kept").
  source text not null
);

select payrail._ensure_check_constraint('payrail.provider_method_history', 'provider_method_history_operation_check',
  $$check (operation operator(pg_catalog.=) any (array['update', 'delete']))$$);

create index if not exists provider_method_history_provider_method_id_idx
  on payrail.provider_method_history (provider_method_id, id);
-- get_provider_method_history finds deleted and renamed records by their former names.
create index if not exists provider_method_history_name_idx
  on payrail.provider_method_history (payrail._normalize_name(provider), payrail._normalize_name(method));

comment on table payrail.provider_method_history is
$$Earlier versions of provider methods: one row per update or delete, holding the version it replaced.

Written by the trigger tg_provider_methods__record_history whenever a public field or enabled
changes, or a record is deleted; vector-only writes (sync, model switch) are not versions. Kept
forever; read with payrail.get_provider_method_history(provider, method) or
`payrail-embedder history PROVIDER METHOD`, restore with payrail.restore_provider_method(id).$$;
comment on column payrail.provider_method_history.id is 'History entry id: what payrail.restore_provider_method takes.';
comment on column payrail.provider_method_history.provider_method_id is
  'The record this was a version of (payrail.provider_methods.id); the record may since have been deleted.';
comment on column payrail.provider_method_history.operation is 'update: the version was edited; delete: the record was deleted.';
comment on column payrail.provider_method_history.provider is 'Provider name of this version.';
comment on column payrail.provider_method_history.method is 'Method name of this version.';
comment on column payrail.provider_method_history.urls is 'URLs of this version.';
comment on column payrail.provider_method_history.docs_url is 'Docs URL of this version.';
comment on column payrail.provider_method_history.guidance is 'Guidance of this version.';
comment on column payrail.provider_method_history.enabled is 'Whether this version was enabled (searchable).';
comment on column payrail.provider_method_history.mixed_scripts is
  'Whether the operator had said this version''s names mix scripts on purpose (provider_methods.mixed_scripts then).';
comment on column payrail.provider_method_history.source is
  'Where this version came from (provider_methods.source then): an import''s file name, backoffice, edit, psql; "before sources were kept" for an entry from before.';
comment on column payrail.provider_method_history.version is 'Version number of this version (provider_methods.version then).';
comment on column payrail.provider_method_history.version_saved_at is
  'When this version was saved (the record''s updated_at then): its public fields or enabled, not a later vector-only write.';
comment on column payrail.provider_method_history.version_saved_by is
  'Who saved this version (provider_methods.saved_by then); NULL for a version saved before the registry kept it.';
comment on column payrail.provider_method_history.changed_at is
  'When this version was replaced (the replacing version''s updated_at) or deleted (the clock time of the delete).';
comment on column payrail.provider_method_history.changed_by is
  'Who replaced or deleted it (payrail._author): the role set with SET ROLE, else the login (session_user), or the operating-system user the command line names for a superuser login.';
comment on column payrail.provider_method_history.changed_by_session_user is 'Login role of that session (session_user).';
