-- The registry's search path (010-schema.sql), so this file alone, rerun, leaves the same catalog.
do $$ begin perform pg_catalog.set_config('search_path', payrail._search_path(), false); end $$;

-- Every rule of a record in words, keyed by the name of the constraint (or unique index) that
-- enforces it: what the backoffice, `edit`, the import report and the CLI say when a rule refuses
-- a value, so PostgreSQL's own constraint text never reaches an operator and every interface
-- says the same. payrail.check_provider_method lists the rules a record breaks, all at once.
create table if not exists payrail.rules (
  constraint_name text not null,
  fields text[] not null,
  rule text not null,
  remedy text not null,
  constraint rules_pkey primary key (constraint_name),
  constraint rules_fields_check check (fields operator(pg_catalog.<@) array['provider', 'method', 'urls', 'docs_url', 'guidance', 'enabled', 'source']::text[])
);
-- The fields a rule may name, replaced in a registry made before a field was added (source).
select payrail._ensure_check_constraint('payrail.rules', 'rules_fields_check',
  $$check (fields operator(pg_catalog.<@) array['provider', 'method', 'urls', 'docs_url', 'guidance', 'enabled', 'source']::text[])$$);

insert into payrail.rules as r (constraint_name, fields, rule, remedy)
values
  ('provider_methods_provider_check', '{provider}',
   'must be 1 to 120 characters, without control characters or invisible ones (zero-width spaces, bidi controls)',
   'Shorten it, or retype it to drop hidden characters that came with pasted text.'),
  ('provider_methods_method_check', '{method}',
   'must be 1 to 120 characters, without control characters or invisible ones (zero-width spaces, bidi controls)',
   'Shorten it, or retype it to drop hidden characters that came with pasted text.'),
  ('provider_methods_provider_method_key', '{provider,method}',
   'another record already has this provider and method (names compare ignoring case, compatibility forms, invisible characters and runs of spaces)',
   'Edit that record instead, or change the provider or the method.'),
  ('provider_methods_provider_lookalike_check', '{provider}',
   'looks like the provider of another record without being the same (their letters only look alike: a Cyrillic і for an i, a capital I for an l, 0 for O)',
   'Write that provider''s name exactly as it is, or choose a name that does not imitate it.'),
  ('provider_methods_method_lookalike_check', '{method}',
   'looks like the method of another record without being the same (their letters only look alike: a Cyrillic а for an a, rn for m, 0 for O)',
   'Write that method''s name exactly as it is, or choose a name that does not imitate it.'),
  ('provider_methods_scripts_check', '{provider,method}',
   'mixes letters of different scripts (Latin with Cyrillic or Greek, say), which is how one name imitates another',
   'Retype the name in one script. If it really mixes scripts (楽天 Pay, say), tick "Mixed scripts" (mixedScripts in a catalog line, "Mixed scripts: yes" in edit, mixed_scripts in SQL).'),
  ('provider_methods_urls_ascii_host_check', '{urls}',
   'each host must be written in ASCII: letters, digits, hyphens and dots, an internationalized name in its xn-- form (IDNA), without percent-escapes',
   'Import, edit and the backoffice convert an internationalized host for you; in SQL, write its xn-- form (python3 -c "print(''bücher.example''.encode(''idna'').decode())").'),
  ('provider_methods_docs_url_ascii_host_check', '{docs_url}',
   'its host must be written in ASCII: letters, digits, hyphens and dots, an internationalized name in its xn-- form (IDNA), without percent-escapes',
   'Import, edit and the backoffice convert an internationalized host for you; in SQL, write its xn-- form (python3 -c "print(''bücher.example''.encode(''idna'').decode())").'),
  ('provider_methods_docs_url_lookalike_check', '{docs_url}',
   'its host looks like the docs host of another record without being the same host',
   'Write the official documentation''s real address, or check that the other record''s is right.'),
  ('provider_methods_urls_count_check', '{urls}',
   'must list at most 10 URLs',
   'Keep the 10 most useful ones.'),
  ('provider_methods_urls_https_check', '{urls}',
   'each must be an absolute https:// URL with a host (https://host/path), at most 2,048 characters, without spaces, invisible characters or a user name (user@host)',
   'Write each in full, starting with https://, one per line.'),
  ('provider_methods_urls_unique_check', '{urls}',
   'must not list the same URL twice',
   'Remove the repeated one.'),
  ('provider_methods_docs_url_check', '{docs_url}',
   'must be one absolute https:// URL with a host (https://host/path), at most 2,048 characters, without spaces, invisible characters or a user name (user@host)',
   'Write the official documentation''s full https:// address, or leave it empty.'),
  ('provider_methods_guidance_length_check', '{guidance}',
   'must hold some text, at most 8,000 characters',
   'Write the Purpose, Instructions and Notes, or shorten them.'),
  ('provider_methods_guidance_characters_check', '{guidance}',
   'must be plain text: no control characters but line breaks and tabs, and no invisible tag characters',
   'Remove them; they often come with text pasted from another program.'),
  ('provider_methods_source_check', '{source}',
   'must be 1 to 255 characters, without control characters, invisible ones or spaces at either end',
   'Name the catalog as you would recognise it in a list: its file''s name ("records.jsonl"), or a word of your own ("curated").'),
  ('provider_methods_enabled_needs_embedding_check', '{enabled}',
   'an enabled record must carry an embedding of its current provider, method and guidance',
   'Save it with the backoffice, `payrail-embedder edit` or `import`, which embed first; in SQL, disable it in the same UPDATE, run `payrail-embedder sync`, then enable it.'),
  ('provider_methods_embedding_content_check', '{}',
   'a vector must be the embedding of the record''s current provider, method and guidance',
   'Let the write path or `payrail-embedder sync` write vectors.'),
  ('provider_methods_embedding_model_check', '{}',
   'a vector, its model and its content hash are set together or not at all',
   'Let the write path or `payrail-embedder sync` write vectors.'),
  ('provider_methods_embedding_nonzero_check', '{}',
   'a vector cannot be all zeros',
   'Store the vector the model returned.'),
  ('provider_methods_version_check', '{}',
   'versions start at 1',
   'Leave the version to the database: its triggers number versions.')
on conflict (constraint_name) do update
  set fields = excluded.fields, rule = excluded.rule, remedy = excluded.remedy
  where r.fields operator(pg_catalog.<>) excluded.fields or r.rule operator(pg_catalog.<>) excluded.rule
     or r.remedy operator(pg_catalog.<>) excluded.remedy;

comment on table payrail.rules is
$$The rules of a record in words, one row per constraint (or unique index) of payrail.provider_methods.

What every interface says when a rule refuses a value: the field, the rule and what to do.
payrail.check_provider_method(...) lists the rules a record breaks, all at once.$$;
comment on column payrail.rules.constraint_name is 'The constraint or unique index that enforces the rule: the name in PostgreSQL''s error.';
comment on column payrail.rules.fields is 'The columns of payrail.provider_methods the rule is about (empty: none an operator edits).';
comment on column payrail.rules.rule is 'The rule in words, written to follow the field''s name: "Docs URL: must be ...".';
comment on column payrail.rules.remedy is 'What to do about a refused value.';
