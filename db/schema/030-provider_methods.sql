-- The registry's search path (010-schema.sql), so this file alone, rerun, leaves the same catalog.
do $$ begin perform pg_catalog.set_config('search_path', payrail._search_path(), false); end $$;

-- A record's source: a name in words, as a person recognises it in a list (a file's name, "backoffice"):
-- no control or invisible characters, no white space at either end (payrail._white_space_characters),
-- at most 255 characters (a file name's most on most systems). The import commands ask it of a
-- file's name before they read a line. Two comparisons, not BETWEEN (db/CONVENTIONS.md: a dump
-- and its restore print it alike). Here, not in 015: a new immutable function there would count
-- as a changed name rule and rebuild the name indexes.
create or replace function payrail._is_valid_source(p_source text)
returns boolean
language sql
immutable strict parallel safe
security invoker
set search_path from current
return pg_catalog.char_length(p_source) operator(pg_catalog.>=) 1
   and pg_catalog.char_length(p_source) operator(pg_catalog.<=) 255
   and payrail._trim_white_space(p_source) operator(pg_catalog.=) p_source
   and p_source operator(pg_catalog.!~) '[\u0001-\u001f\u007f-\u009f]'
   and p_source operator(pg_catalog.!~) ('[' operator(pg_catalog.||) payrail._invisible_characters() operator(pg_catalog.||) ']');

comment on function payrail._is_valid_source(text) is
$$True for a record's source (provider_methods_source_check): 1..255 characters, no white space at either end, no control or invisible characters.$$;

create table if not exists payrail.provider_methods (
  id bigint generated always as identity primary key,
  provider text not null,
  method text not null,
  urls text[] not null default '{}',
  docs_url text,
  guidance text not null,
  enabled boolean not null default false,
  content_hash bytea not null generated always as (payrail._content_hash(provider, method, guidance)) stored,
  embedding vector,
  embedding_model text,
  embedding_content_hash bytea,
  created_at timestamptz not null default pg_catalog.now(),
  updated_at timestamptz not null default pg_catalog.now(),
  -- Optimistic concurrency: a writer passes back the version it read (payrail.save_provider_method).
  -- Last, where db/upgrades/001 adds it to registries created before it.
  version integer not null default 1,
  -- Who saved this version (tg_provider_methods__stamp_version); NULL for versions saved before
  -- it was kept. Last, where db/upgrades/006 adds it to registries created before it.
  saved_by text,
  -- The operator's word that provider and method mix scripts on purpose (provider_methods_scripts_check).
  -- Last, where db/upgrades/007 adds it to registries created before it.
  mixed_scripts boolean not null default false,
  -- The catalog the record came from: the file an import read ("records.jsonl"), "backoffice",
  -- "edit", or 'psql' for a write that names none. Last, where db/upgrades/013 adds it to
  -- registries created before it (their records say "before sources were kept").
  source text not null default 'psql'
);

-- Search reads exact vectors in its second pass (a few rows per query), and in its first pass
-- over every enabled record where pgvector predates halfvec (db/SEARCH.md), so they live in the
-- table's own pages: MAIN storage moves a vector to TOAST only when its row cannot fit a page
-- (above about 2,000 dimensions), where pgvector's default (EXTERNAL) sends every vector over
-- 2 kB there and a full scan pays a TOAST lookup per row (3x slower at 10,000 records).
-- pglz never compresses float vectors (it wants 25% savings), so reads never decompress; lz4
-- would shave a few bytes off some and make search decompress them.
-- Storage applies to rows written afterwards; README "Production server" says how to move the
-- vectors of an older registry inline (VACUUM FULL).
select payrail._ensure_storage('payrail.provider_methods', 'embedding', 'main', 'pglz');

-- One named constraint per rule, so a violation in psql names the rule that broke. Each is replaced
-- only when its definition changed (payrail._ensure_check_constraint).
select payrail._ensure_check_constraint('payrail.provider_methods', 'provider_methods_version_check',
  'check (version operator(pg_catalog.>=) 1)');
select payrail._ensure_check_constraint('payrail.provider_methods', 'provider_methods_provider_check',
  'check (payrail._is_valid_name(provider))');
select payrail._ensure_check_constraint('payrail.provider_methods', 'provider_methods_method_check',
  'check (payrail._is_valid_name(method))');
-- Not white space only (payrail._white_space_characters: the same in every locale).
select payrail._ensure_check_constraint('payrail.provider_methods', 'provider_methods_guidance_length_check',
  $$check (pg_catalog.char_length(guidance) operator(pg_catalog.<=) 8000 and payrail._trim_white_space(guidance) operator(pg_catalog.<>) '')$$);
-- Tag characters too: invisible, they can carry text an agent would read and a person not.
select payrail._ensure_check_constraint('payrail.provider_methods', 'provider_methods_guidance_characters_check',
  $$check (guidance operator(pg_catalog.!~) '[\u0001-\u0008\u000b-\u001f\u007f-\u009f\U000e0000-\U000e007f]')$$);
select payrail._ensure_check_constraint('payrail.provider_methods', 'provider_methods_urls_count_check',
  'check (pg_catalog.array_ndims(urls) is null or (pg_catalog.array_ndims(urls) operator(pg_catalog.=) 1 and pg_catalog.cardinality(urls) operator(pg_catalog.<=) 10))');
select payrail._ensure_check_constraint('payrail.provider_methods', 'provider_methods_urls_https_check',
  'check (payrail._are_https_urls(urls))');
select payrail._ensure_check_constraint('payrail.provider_methods', 'provider_methods_urls_unique_check',
  'check (not payrail._has_duplicates(urls))');
select payrail._ensure_check_constraint('payrail.provider_methods', 'provider_methods_docs_url_check',
  'check (docs_url is null or payrail._is_https_url(docs_url))');
-- Hosts as every reader compares them: ASCII, internationalized names in their xn-- form (IDNA),
-- which the write path converts to; a look-alike of another record's host shows in its letters.
select payrail._ensure_check_constraint('payrail.provider_methods', 'provider_methods_urls_ascii_host_check',
  'check (payrail._have_ascii_hosts(urls))');
select payrail._ensure_check_constraint('payrail.provider_methods', 'provider_methods_docs_url_ascii_host_check',
  'check (docs_url is null or payrail._has_ascii_host(docs_url))');
-- Letters of one script among another's are how a name imitates another ("Strіpe" with a
-- Cyrillic і): refused unless the operator says the name mixes scripts on purpose.
select payrail._ensure_check_constraint('payrail.provider_methods', 'provider_methods_scripts_check',
  'check (mixed_scripts or not (payrail._mixes_scripts(provider) or payrail._mixes_scripts(method)))');
select payrail._ensure_check_constraint('payrail.provider_methods', 'provider_methods_source_check',
  'check (payrail._is_valid_source(source))');
select payrail._ensure_check_constraint('payrail.provider_methods', 'provider_methods_enabled_needs_embedding_check',
  'check (not enabled or embedding is not null)');
select payrail._ensure_check_constraint('payrail.provider_methods', 'provider_methods_embedding_content_check',
  'check (embedding is null or embedding_content_hash operator(pg_catalog.=) content_hash)');
select payrail._ensure_check_constraint('payrail.provider_methods', 'provider_methods_embedding_model_check',
  'check ((embedding is null) operator(pg_catalog.=) (embedding_model is null) and (embedding is null) operator(pg_catalog.=) (embedding_content_hash is null))');
select payrail._ensure_check_constraint('payrail.provider_methods', 'provider_methods_embedding_nonzero_check',
  'check (embedding is null or vector_norm(embedding) operator(pg_catalog.>) 0)');

create unique index if not exists provider_methods_provider_method_key
  on payrail.provider_methods (payrail._normalize_name(provider), payrail._normalize_name(method));
-- The lookalike rule (tg_provider_methods__refuse_lookalikes) looks up another name with the same
-- look: by these keys, skipping the records of the same name as stored (the second column), so a
-- provider's other methods are never read one by one.
create index if not exists provider_methods_provider_lookalike_idx
  on payrail.provider_methods (payrail._lookalike_key(provider), provider);
create index if not exists provider_methods_method_lookalike_idx
  on payrail.provider_methods (payrail._lookalike_key(method), method);
create index if not exists provider_methods_docs_host_lookalike_idx
  on payrail.provider_methods (payrail._host_lookalike_key(docs_url), payrail._url_host(docs_url))
  where docs_url is not null;
-- The records list (backoffice, `payrail-embedder list`) pages through records in this order,
-- by provider and method ignoring case (payrail_embedder.registry.stored.LIST_ORDER_KEY): a page is a
-- short read of this index, not a sort of every record.
create index if not exists provider_methods_list_order_idx
  on payrail.provider_methods (pg_catalog.lower(provider), pg_catalog.lower(method), id);
-- The name path looks up a provider, a method, or a "provider method" pair, among enabled records
-- only: indexes that hold no draft, so an agent's lookup of a draft's name reads what a lookup
-- of an unknown name reads, entry for entry (pg_stat_user_indexes and pg_statio_* say nothing).
create index if not exists provider_methods_enabled_provider_name_idx
  on payrail.provider_methods (payrail._normalize_name(provider)) where enabled;
create index if not exists provider_methods_enabled_method_name_idx
  on payrail.provider_methods (payrail._normalize_name(method)) where enabled;
create index if not exists provider_methods_enabled_pair_name_idx
  on payrail.provider_methods (payrail._normalize_name(provider operator(pg_catalog.||) ' ' operator(pg_catalog.||) method)) where enabled;
create index if not exists provider_methods_enabled_pair_slash_name_idx
  on payrail.provider_methods (payrail._normalize_name(provider operator(pg_catalog.||) ' / ' operator(pg_catalog.||) method)) where enabled;

comment on table payrail.provider_methods is
$$Provider methods: one row per method of a provider that agents can discover.

Operators edit the public fields (provider, method, urls, docs_url, guidance) and enabled.
Everything else is internal. Only enabled rows are searchable, and an enabled row always
carries an embedding of its current provider, method and guidance made by the registry's model.$$;
comment on column payrail.provider_methods.id is 'Internal key.';
comment on column payrail.provider_methods.provider is 'Provider name, 1..120 characters, no control or invisible characters; stored trimmed and in Unicode NFC. Unique with method, ignoring case (Unicode case folding), compatibility forms (NFKC) and runs of white space. Looks like no other record''s provider (UTS #39 skeleton) and mixes no scripts unless mixed_scripts.';
comment on column payrail.provider_methods.method is 'Method name, 1..120 characters, no control or invisible characters; stored trimmed and in Unicode NFC. Looks like no other record''s method (UTS #39 skeleton) and mixes no scripts unless mixed_scripts.';
comment on column payrail.provider_methods.urls is 'Useful absolute https:// URLs (API base, endpoint, pricing): 0..10, each at most 2,048 characters, no duplicates, hosts in ASCII (IDNA).';
comment on column payrail.provider_methods.docs_url is
$$The official documentation URL (https://), or NULL.

Its host is written in ASCII (an internationalized name as xn--) and looks like no other record's docs host.$$;
comment on column payrail.provider_methods.guidance is
$$Operating guidance for agents: plain text, 1..8,000 characters, Purpose / Instructions / Notes.

No control characters but newline and tab, no tag characters. Never parsed into another protocol.$$;
comment on column payrail.provider_methods.enabled is 'Visible to search. Needs a current embedding; false (a draft) by default.';
comment on column payrail.provider_methods.content_hash is 'SHA-256 of provider, method and guidance (payrail._content_hash): what an embedding must be made from.';
comment on column payrail.provider_methods.embedding is 'Embedding of provider, method and guidance by the registry''s model; NULL until embedded or after a draft''s content changes.';
comment on column payrail.provider_methods.embedding_model is 'Model that made the embedding; always the registry''s model (payrail.embedding_model).';
comment on column payrail.provider_methods.embedding_content_hash is 'content_hash of the content the embedding was made from; equal to content_hash whenever embedding is set.';
comment on column payrail.provider_methods.version is
$$Version of the public fields and enabled: 1 when created, one more on every change of them.

Vector-only writes (sync, model switch) keep it. A writer that read version n saves with
payrail.save_provider_method(..., p_expected_version => n), which refuses (PYE03) if it moved.$$;
comment on column payrail.provider_methods.created_at is 'When the record was created.';
comment on column payrail.provider_methods.updated_at is
$$When this version was saved: the last change of a public field or enabled; vector-only writes keep it.

The clock time at which the row was written (clock_timestamp()), not its transaction's start, so
the records of one import each show their own time; they become visible when it commits.$$;
comment on column payrail.provider_methods.mixed_scripts is
$$The operator's word that the provider and method names mix scripts on purpose (楽天 Pay is Han and Latin, say).

Without it, a name that mixes scripts below UTS #39's Highly Restrictive level (Latin with
Cyrillic or Greek) is refused (provider_methods_scripts_check). Part of the record's versions.$$;
comment on column payrail.provider_methods.saved_by is
$$Who saved this version (payrail._author, as the history's changed_by): the role set with SET ROLE,
else the login, or the operating-system user the command line names for a superuser login
("ada (OS user, logged in as postgres)").

NULL for a version saved before the registry kept it; vector-only writes keep it.$$;
comment on column payrail.provider_methods.source is
$$Where the record came from, in words: the catalog file an import read (its name, "records.jsonl"), its
line's own "source", or the import's --source; "backoffice" or "edit" for a record created there;
'psql' (the default) for a write that names none. An edit keeps it unless the editor changes it.

1..255 characters, no control or invisible characters, no white space at either end
(provider_methods_source_check). Part of the record's versions: the history keeps each one's.
A filter and advice for operators (the records list, the bulk actions, eval's and the Quality
page's figures by source), never ranking input: search never reads it, agents cannot read it.$$;
