-- The registry's search path (010-schema.sql), so this file alone, rerun, leaves the same catalog.
do $$ begin perform pg_catalog.set_config('search_path', payrail._search_path(), false); end $$;

-- Golden queries: labelled queries that operators keep beside the records, each with the records
-- it should find (DESIGN.md, "Retrieval quality"). Evaluation and training data: search never
-- reads these tables (its functions name none of them), and agents cannot (db/functions/900-grants.sql).
-- Written through payrail.add_golden_query and payrail.remove_golden_query, or by hand in psql:
-- the rules are the tables' own (constraints and triggers, db/functions/160-golden_queries.sql).
create table if not exists payrail.golden_queries (
  id bigint generated always as identity,
  query text not null,
  -- Written by tg_golden_queries__stamp_added, never by the writer.
  added_by text not null,
  added_at timestamptz not null,
  -- The language the question is in, as eval's files tag it ("en", "de", "zh-Hant"): eval
  -- reports its figures by language. Last: a registry from before it gets it from upgrade 011.
  language text,
  constraint golden_queries_pkey primary key (id)
);

-- The records a golden query should find, by record, so a rename keeps them. A record named by a
-- golden query cannot be deleted while it is (golden_query_records_record_id_fkey; in words,
-- tg_provider_methods__keep_golden_queries) unless its golden queries go with it
-- (payrail.delete_provider_method(..., p_with_golden_queries => true)).
create table if not exists payrail.golden_query_records (
  golden_query_id bigint not null
    constraint golden_query_records_golden_query_id_fkey references payrail.golden_queries (id) on delete cascade,
  record_id bigint not null
    constraint golden_query_records_record_id_fkey references payrail.provider_methods (id),
  -- Where the record stands among the query's relevant records, as they were written: `golden
  -- export` writes them in this order, so an export imported again exports byte for byte the same.
  ordinal smallint not null,
  constraint golden_query_records_pkey primary key (golden_query_id, record_id),
  constraint golden_query_records_ordinal_key unique (golden_query_id, ordinal)
);

-- The search query's rules (payrail._check_query): not empty (white space and invisible
-- characters alone), at most 2,000 characters. db/tests/160-golden_queries.sql checks that this
-- constraint and search refuse the same queries.
select payrail._ensure_check_constraint('payrail.golden_queries', 'golden_queries_query_check',
  $$check (not payrail._is_blank(query) and pg_catalog.char_length(query) operator(pg_catalog.<=) 2000)$$);
-- eval's rule for a language tag (labelled_queries.LANGUAGE_TAG): 2 to 8 letters, digits and
-- hyphens, as BCP 47 writes a tag, loosely; never "untagged", what eval calls queries without one.
-- Tags compare regardless of case: eval reads them folded.
select payrail._ensure_check_constraint('payrail.golden_queries', 'golden_queries_language_check',
  $$check (language operator(pg_catalog.~) '^[A-Za-z0-9-]{2,8}$'
           and pg_catalog.translate(language, 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz') operator(pg_catalog.<>) 'untagged')$$);
-- Relevant records are few (eval counts the first three answers): 1 to 100 a query.
select payrail._ensure_check_constraint('payrail.golden_query_records', 'golden_query_records_ordinal_check',
  $$check (ordinal operator(pg_catalog.>=) 1 and ordinal operator(pg_catalog.<=) 100)$$);

-- One golden query per question: two queries are the same when they compare equal as names do
-- (payrail._normalize_name: case, compatibility forms, invisible characters, runs of white space).
-- The key is a digest, since a normalized query may outgrow a btree entry (2,000 characters of
-- any script, compatibility forms expanded). payrail._golden_queries_named looks queries up by it.
create unique index if not exists golden_queries_query_key
  on payrail.golden_queries (pg_catalog.md5(payrail._normalize_name(query)));
-- A record's golden queries: the refusal of its deletion, and the record's page.
create index if not exists golden_query_records_record_id_idx on payrail.golden_query_records (record_id);

comment on table payrail.golden_queries is
$$Golden queries: questions an agent might ask, each labelled with the records it should find.

Evaluation and training data (`payrail-embedder eval`, `model tune`), never ranking input: search
reads no golden query, and agents cannot read them. Operators write them (payrail.add_golden_query,
payrail.remove_golden_query, `payrail-embedder golden`); operators and the embedder read them.
Their relevant records are payrail.golden_query_records.$$;
comment on column payrail.golden_queries.id is 'Internal key.';
comment on column payrail.golden_queries.query is
$$The question, as an agent would send it to search: the search query's rules (not empty, at most 2,000 characters).

Unique as names compare (payrail._normalize_name: ignoring case, compatibility forms, invisible
characters and runs of white space): golden_queries_query_key.$$;
comment on column payrail.golden_queries.added_by is 'Who added it (payrail._author): the role set with SET ROLE, else the login, or the operating-system user the command line names for a superuser login.';
comment on column payrail.golden_queries.added_at is 'When it was added (the clock time of the insert).';
comment on column payrail.golden_queries.language is
$$The language the question is in (a tag of 2 to 8 letters, digits and hyphens: en, de, zh-Hant), or NULL when untold.

eval reports its figures by language, tags compared regardless of case (golden_queries_language_check).
Evaluation data like the query: search never reads it, agents cannot.$$;

comment on table payrail.golden_query_records is
$$The records each golden query should find (its relevant records), by record id: renames keep them.

Every golden query has 1 to 100 (tg_golden_queries__check_relevant, at commit). A record named
here cannot be deleted unless its golden queries go with it (payrail.delete_provider_method).$$;
comment on column payrail.golden_query_records.golden_query_id is 'The golden query (payrail.golden_queries.id); its records go with it.';
comment on column payrail.golden_query_records.record_id is 'A record the query should find (payrail.provider_methods.id).';
comment on column payrail.golden_query_records.ordinal is 'Where the record stands among the query''s relevant records as written, from 1: the order `golden export` writes.';
