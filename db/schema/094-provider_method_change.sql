-- The registry's search path (010-schema.sql), so this file alone, rerun, leaves the same catalog.
do $$ begin perform pg_catalog.set_config('search_path', payrail._search_path(), false); end $$;

-- One change of a batch that payrail.save_provider_methods takes (db/functions/146): a new record,
-- an edit with the version it was made from, or a record as stored (no fields: to embed, enable or
-- disable it); and what became of it, one row of its answer. A type has no "create or replace":
-- each is created once, and a change of its attributes is an upgrade step (db/CONVENTIONS.md).
do $$
begin
  if pg_catalog.to_regtype('payrail.provider_method_change') is null then
    create type payrail.provider_method_change as (
      record_id bigint,
      expected_version integer,
      provider text,
      method text,
      urls text[],
      docs_url text,
      guidance text,
      enabled boolean,
      mixed_scripts boolean,
      embedding vector,
      embedding_model text,
      embedding_content_hash bytea
    );
  end if;
  if pg_catalog.to_regtype('payrail.provider_method_outcome') is null then
    create type payrail.provider_method_outcome as (
      change integer,
      outcome text,
      record_id bigint,
      record_version integer,
      provider text,
      method text,
      enabled boolean,
      has_current_vector boolean,
      reason text,
      rules jsonb,
      same_as integer,
      embedding_text text,
      embedding_content_hash bytea,
      embedding_model text,
      embedding_dimensions integer,
      name_key text
    );
  end if;
end
$$;

comment on type payrail.provider_method_change is
$$One change of a batch for payrail.save_provider_methods: a record's public fields, whom they are for, and the vector the caller made, if any.

payrail.provider_method_changes(jsonb) builds an array of them from JSON, one object a change,
keyed by these attributes' names.$$;
comment on column payrail.provider_method_change.record_id is
  'The record to change; NULL: the record of this provider and method (names compare as the unique key does), or a new one.';
comment on column payrail.provider_method_change.expected_version is
  'The version the change was made from: another version now is a conflict (PYE03''s words); 0: the record must be new; NULL: no check (import).';
comment on column payrail.provider_method_change.provider is
  'The provider as written (stored trimmed, in NFC). NULL with method, urls, docs_url and guidance: the record as stored.';
comment on column payrail.provider_method_change.method is 'The method as written (stored trimmed, in NFC).';
comment on column payrail.provider_method_change.urls is 'The URLs; NULL: none.';
comment on column payrail.provider_method_change.docs_url is 'The docs URL; NULL: none.';
comment on column payrail.provider_method_change.guidance is 'The guidance.';
comment on column payrail.provider_method_change.enabled is 'Enabled after the save; NULL: as it is (a new record: a draft).';
comment on column payrail.provider_method_change.mixed_scripts is
  'The operator''s word that the names mix scripts on purpose; NULL: as it is (a new record: not said).';
comment on column payrail.provider_method_change.embedding is
  'The vector of embedding_text that save_provider_methods answered for this change, by the registry''s model; NULL: none made.';
comment on column payrail.provider_method_change.embedding_model is 'The model that made embedding.';
comment on column payrail.provider_method_change.embedding_content_hash is
  'The embedding_content_hash save_provider_methods answered with the text the vector was made from: a vector of other content is stale, never saved.';

comment on type payrail.provider_method_outcome is
$$What payrail.save_provider_methods did with one change of its batch, or why it did not save it.

Saved (the whole batch): created, updated or unchanged. Not saved (nothing of the batch): refused
(every rule it breaks, in rules), conflict (saved or deleted by someone else since it was read),
needs_embedding (embed embedding_text with the model named and call again with the vector), or
ready (nothing stands in its way: another change of the batch does).$$;
comment on column payrail.provider_method_outcome.change is 'The change''s position in the batch, from 1.';
comment on column payrail.provider_method_outcome.outcome is
  'created, updated, unchanged (saved); refused, conflict, needs_embedding, ready (nothing of the batch saved).';
comment on column payrail.provider_method_outcome.record_id is 'The record; NULL for a new one that was not saved.';
comment on column payrail.provider_method_outcome.record_version is 'Its version after the save; not saved: the version read.';
comment on column payrail.provider_method_outcome.provider is 'The provider as it is (or would be) stored: trimmed, in NFC.';
comment on column payrail.provider_method_outcome.method is 'The method as it is (or would be) stored.';
comment on column payrail.provider_method_outcome.enabled is 'Enabled after the save (or as it would be).';
comment on column payrail.provider_method_outcome.has_current_vector is
  'Whether the record has (or would have) a vector of its current content by the registry''s model (payrail.provider_method_states).';
comment on column payrail.provider_method_outcome.reason is 'Why it was not saved, in words: the rules it breaks, the conflict, or why it needs a vector.';
comment on column payrail.provider_method_outcome.rules is
  'refused: every rule the change breaks, [{"constraint", "fields", "rule", "remedy"}] (fields: the columns it is about), as payrail.check_provider_method and payrail.rules say them.';
comment on column payrail.provider_method_outcome.same_as is 'refused as a change of the same record as an earlier change of the batch: that change''s position.';
comment on column payrail.provider_method_outcome.embedding_text is 'needs_embedding: the text to embed (payrail._embedding_text of the names as stored and the guidance).';
comment on column payrail.provider_method_outcome.embedding_content_hash is
  'needs_embedding: the hash of that content, to pass back with the vector (provider_method_change.embedding_content_hash).';
comment on column payrail.provider_method_outcome.embedding_model is
  'needs_embedding: the registry''s model, to embed with (NULL: it has none yet; the first vector saved chooses it).';
comment on column payrail.provider_method_outcome.embedding_dimensions is 'needs_embedding: the dimensions of the registry''s model.';
comment on column payrail.provider_method_outcome.name_key is
  'The unique key of the record''s names (payrail._normalize_name of provider and method, joined by U+001F): two changes with the same key are for the same record.';
