-- The registry's search path (010-schema.sql), so this file alone, rerun, leaves the same catalog.
do $$ begin perform pg_catalog.set_config('search_path', payrail._search_path(), false); end $$;

-- The records list (backoffice, `payrail-embedder list`) filters by text, state and source and counts
-- records by state. provider_methods keeps each record's vector in its own pages (MAIN storage,
-- db/schema/030), 6 kB a row at 1,536 dimensions, so a scan of it for a text or a count reads
-- every vector: about 0.7 GB at 100,000 records. This table holds one narrow row per record with
-- what the list filters, sorts and counts on, and nothing else: a scan of it reads a tenth of that
-- or less, needs no index (so nothing per word or fragment to write on an import), and reads the
-- same right after a bulk load as after ANALYZE. tg_provider_methods__keep_list_entry
-- (db/functions) keeps the rows in step with provider_methods, in the writer's transaction;
-- nobody else writes them.
create table if not exists payrail.provider_method_list_entries (
  provider_method_id bigint primary key
    constraint provider_method_list_entries_provider_method_id_fkey
    references payrail.provider_methods (id) on delete cascade,
  enabled boolean not null,
  embedding_model text,
  provider_key text not null,
  method_key text not null,
  filter_text text not null,
  -- Last, where db/upgrades/013 adds it to registries created before it.
  source text not null
);

comment on table payrail.provider_method_list_entries is
$$The records list's narrow copy of each record: what it filters, sorts and counts on (payrail._list_entry).

One row per record of payrail.provider_methods, written only by the trigger
tg_provider_methods__keep_list_entry; `payrail-embedder db apply --force` rewrites any row that
differs (payrail._repair_list_entries), as does an apply that changes how the rows are derived.
Read through payrail.provider_method_list_entry_states, which adds has_current_vector.$$;
comment on column payrail.provider_method_list_entries.provider_method_id is 'The record (payrail.provider_methods.id).';
comment on column payrail.provider_method_list_entries.enabled is 'provider_methods.enabled.';
comment on column payrail.provider_method_list_entries.embedding_model is
  'provider_methods.embedding_model: the model of the record''s vector, NULL when it has none (provider_methods_embedding_model_check).';
comment on column payrail.provider_method_list_entries.provider_key is 'lower(provider): the list''s order, as provider_methods_list_order_idx holds it.';
comment on column payrail.provider_method_list_entries.method_key is 'lower(method): the list''s order after provider_key.';
comment on column payrail.provider_method_list_entries.source is
  'provider_methods.source: what the source filter compares (equal, as written) and the list of sources counts.';
comment on column payrail.provider_method_list_entries.filter_text is
$$What the text filter searches: lower(provider || ' ' || method || ' ' || guidance || ' ' || urls || ' ' || docs_url).

A record matches a filter when this contains the filter, lower-cased: strpos(filter_text, lower(filter)) > 0.$$;

create or replace function payrail._list_entry(p_record payrail.provider_methods)
returns payrail.provider_method_list_entries
language sql
immutable parallel safe
security invoker
set search_path from current
-- array_to_string is stable only because other element types print by settings; text does not.
return row(p_record.id, p_record.enabled, p_record.embedding_model,
           pg_catalog.lower(p_record.provider), pg_catalog.lower(p_record.method),
           pg_catalog.lower(p_record.provider operator(pg_catalog.||) ' ' operator(pg_catalog.||) p_record.method operator(pg_catalog.||) ' ' operator(pg_catalog.||) p_record.guidance operator(pg_catalog.||) ' '
                            operator(pg_catalog.||) pg_catalog.array_to_string(p_record.urls, ' ') operator(pg_catalog.||) ' ' operator(pg_catalog.||) coalesce(p_record.docs_url, '')),
           p_record.source)
       ::payrail.provider_method_list_entries;

comment on function payrail._list_entry(payrail.provider_methods) is
$$The records list's entry of a record (payrail.provider_method_list_entries): the one definition of what it holds.

The trigger writes it, the repair compares with it.$$;
