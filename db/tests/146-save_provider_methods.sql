-- payrail.save_provider_methods: a batch saved in one statement, all or nothing, or answered in
-- words (refused, conflict, needs_embedding, ready), and its JSON form. The judgment's record
-- lookups are in 142-delete_provider_method.sql; who may call it, in 900-grants__write_path*.sql.
begin;
select plan(29);
\ir include/error_of.sql

-- A batch of changes in JSON, as psql users write it.
create function pg_temp.saved(p_changes text, p_embed_drafts boolean default true)
returns setof payrail.provider_method_outcome
language sql
as $$ select * from payrail.save_provider_methods(payrail.provider_method_changes(p_changes::jsonb), p_embed_drafts) $$;
-- The content hash a vector must name, of a record's text as stored, as a JSON string ("\\x...").
create function pg_temp.hash_of(p_provider text, p_method text, p_guidance text)
returns text
language sql
as $$ select pg_catalog.to_jsonb(payrail._content_hash(p_provider, p_method, p_guidance))::text $$;

-- New content needs a vector: nothing is saved, the answer gives the text and says the registry has no model yet.
select results_eq(
  $$select outcome, provider, embedding_text, embedding_content_hash = payrail._content_hash('Acme', 'Geocode', 'Turns addresses into coordinates.'),
           embedding_model, reason
    from pg_temp.saved('[{"provider": " Acme ", "method": "Geocode", "guidance": "Turns addresses into coordinates.", "enabled": true}]')$$,
  $$values ('needs_embedding', 'Acme', E'Acme: Geocode\nTurns addresses into coordinates.', true, null::text, 'a new record')$$,
  'new content: answered needs_embedding, with the text to embed (names as stored) and its content hash');
select is((select count(*)::int from payrail.provider_methods), 0, '... and nothing is saved');
select is((select count(*)::int from payrail.embedding_model), 0, '... nor any model chosen');

-- Called again with the vector: saved, and its model becomes the registry's.
select results_eq(
  format($$select outcome, record_version, provider, enabled, has_current_vector from pg_temp.saved('[{"provider": " Acme ",
    "method": "Geocode", "guidance": "Turns addresses into coordinates.", "enabled": true, "embedding": [1, 0, 0],
    "embedding_model": "test-model", "embedding_content_hash": %s}]')$$,
    pg_temp.hash_of('Acme', 'Geocode', 'Turns addresses into coordinates.')),
  $$values ('created', 1, 'Acme', true, true)$$,
  'with the vector: created, enabled, with a current vector');
select results_eq('select name, dimensions from payrail.embedding_model', $$values ('test-model', 3)$$,
  '... and the first vector chose the registry''s model');
select id as acme from payrail.provider_methods where provider = 'Acme' \gset

-- Now the model is named in the answer.
select results_eq(
  $$select outcome, embedding_model, embedding_dimensions, reason from pg_temp.saved('[{"provider": "Acme", "method": "Geocode", "guidance": "Rewritten."}]')$$,
  $$values ('needs_embedding', 'test-model', 3, 'its provider, method or guidance changes')$$,
  'changed content: needs_embedding, naming the registry''s model and its dimensions');

-- A vector of other content is stale, never saved: the answer asks for the content's again.
select results_eq(
  format($$select outcome, reason from pg_temp.saved('[{"record_id": %s, "provider": "Acme", "method": "Geocode",
    "guidance": "Rewritten.", "embedding": [0, 1, 0], "embedding_model": "test-model", "embedding_content_hash": %s}]')$$,
    :acme, pg_temp.hash_of('Acme', 'Geocode', 'Turns addresses into coordinates.')),
  $$values ('needs_embedding', 'the embedding given was made from other content than this change''s (stale)')$$,
  'stale vector: refused as stale, answered needs_embedding');
select is((select guidance from payrail.provider_methods where id = :acme), 'Turns addresses into coordinates.', '... and nothing is saved');
-- Stale even where the record holds a current vector of its own (someone embedded it meanwhile):
-- the record as stored, or a URL-only edit, with a vector of other content is never saved.
select results_eq(
  format($$select outcome from pg_temp.saved('[{"record_id": %s, "embedding": [0, 1, 0], "embedding_model": "test-model",
    "embedding_content_hash": %s}]')$$, :acme, pg_temp.hash_of('Acme', 'Geocode', 'Another text.')),
  $$values ('needs_embedding')$$,
  'stale vector of a record as stored that holds a current one: needs_embedding, never saved');
select results_eq(
  format($$select outcome from pg_temp.saved('[{"record_id": %s, "provider": "Acme", "method": "Geocode", "urls": ["https://other.example"],
    "guidance": "Turns addresses into coordinates.", "embedding": [0, 1, 0], "embedding_model": "test-model", "embedding_content_hash": %s}]')$$,
    :acme, pg_temp.hash_of('Acme', 'Geocode', 'Another text.')),
  $$values ('needs_embedding')$$,
  'stale vector with a URL-only edit: needs_embedding, never saved');
select is((select embedding::text from payrail.provider_methods where id = :acme), '[1,0,0]', '... and the record keeps its vector');

-- A vector of another model or dimensions is the caller's configuration: PYE02.
select results_eq(
  format($$select e_sqlstate from pg_temp.error_of(%L)$$, format($q$select * from pg_temp.saved('[{"record_id": %s, "provider": "Acme",
    "method": "Geocode", "guidance": "Rewritten.", "embedding": [0, 1], "embedding_model": "test-model", "embedding_content_hash": %s}]')$q$,
    :acme, pg_temp.hash_of('Acme', 'Geocode', 'Rewritten.'))),
  $$values ('PYE02')$$,
  'another model''s vector: PYE02');

-- A URL-only edit keeps the vector: saved at once, one version more.
select results_eq(
  format($$select outcome, record_version, has_current_vector from pg_temp.saved('[{"record_id": %s, "expected_version": 1,
    "provider": "Acme", "method": "Geocode", "urls": ["https://api.acme.example"], "guidance": "Turns addresses into coordinates."}]')$$, :acme),
  $$values ('updated', 2, true)$$,
  'URL-only edit: updated at once, the vector kept');
select results_eq(
  format($$select outcome, record_version from pg_temp.saved('[{"record_id": %s, "expected_version": 2, "provider": "Acme", "method": "Geocode",
    "urls": ["https://api.acme.example"], "guidance": "Turns addresses into coordinates."}]')$$, :acme),
  $$values ('unchanged', 2)$$,
  'the same values again: unchanged, no version');

-- Every rule a change breaks, in words, all at once; nothing of the batch is saved.
select results_eq(
  $$select change, outcome, (select pg_catalog.array_agg(r ->> 'constraint' order by r ->> 'constraint') from pg_catalog.jsonb_array_elements(rules) as r)
    from pg_temp.saved('[{"provider": "Globex", "method": "Pay", "guidance": "Pays."},
                         {"provider": "Initech", "method": "Bad", "urls": ["http://x.example", "http://x.example"], "docs_url": "ftp://docs", "guidance": " "}]',
                        false)$$,
  $$values (1, 'ready', null::text[]),
           (2, 'refused', array['provider_methods_docs_url_check', 'provider_methods_guidance_length_check',
                                'provider_methods_urls_https_check', 'provider_methods_urls_unique_check'])$$,
  'refused: every rule the change breaks, named; the valid change is ready, not saved');
select results_eq(
  $$select r ->> 'rule', r -> 'fields', r ->> 'remedy' <> ''
    from pg_temp.saved('[{"provider": "Initech", "method": "Bad", "urls": ["http://x.example"], "guidance": "Fine."}]'),
         pg_catalog.jsonb_array_elements(rules) as r$$,
  $$values ('each must be an absolute https:// URL with a host (https://host/path), at most 2,048 characters, without spaces, invisible characters or a user name (user@host); not so: "http://x.example"',
            '["urls"]'::jsonb, true)$$,
  '... each in payrail.check_provider_method''s words, with its fields and what to do');
select is((select count(*)::int from payrail.provider_methods where provider in ('Globex', 'Initech')), 0, '... and nothing is saved');

-- Two changes of one record; two new records that look alike (the later one is told, naming the earlier).
select results_eq(
  $$select change, outcome, same_as from pg_temp.saved('[{"provider": "Globex", "method": "Pay", "guidance": "Pays."},
                                                         {"provider": "GLOBEX", "method": "pay", "guidance": "Pays more."}]', false)$$,
  $$values (1, 'ready', null::integer), (2, 'refused', 1)$$,
  'the same record twice: the later change refused, naming the earlier');
select results_eq(
  $$select change, outcome, rules -> 0 ->> 'constraint', case when outcome = 'refused' then reason like '%another record of this same change%' end
    from pg_temp.saved(E'[{"provider": "Newco", "method": "Pay", "guidance": "Pays."},
                          {"provider": "Newc\u043e", "method": "Refund", "guidance": "Refunds.", "mixed_scripts": true}]', false)$$,
  $$values (1, 'ready', null, null::boolean), (2, 'refused', 'provider_methods_provider_lookalike_check', true)$$,
  'look-alikes within one batch: refused in words, naming the other change');

-- Drafts without vectors, when asked: saved at once.
select results_eq(
  $$select outcome, enabled, has_current_vector from pg_temp.saved('[{"provider": "Globex", "method": "Pay", "guidance": "Pays."}]', false)$$,
  $$values ('created', false, false)$$,
  'p_embed_drafts false: a new draft saved without a vector');
select id as globex from payrail.provider_methods where provider = 'Globex' \gset

-- The record as stored (no fields): enabling a draft without a vector needs one; disabling is saved.
select results_eq(
  format($$select outcome, reason from pg_temp.saved('[{"record_id": %s, "enabled": true}]', false)$$, :globex),
  $$values ('needs_embedding', 'it will be enabled, and has no vector of its current content')$$,
  'as stored: enabling a draft without a vector needs one');
select results_eq(
  format($$select outcome, enabled from pg_temp.saved('[{"record_id": %s, "enabled": false}]', false)$$, :acme),
  $$values ('updated', false)$$,
  'as stored: disabling is saved');
select results_eq(
  format($$select outcome, reason from pg_temp.saved('[{"record_id": 999999, "enabled": false}]')$$),
  $$values ('conflict', 'provider method 999999 was deleted since it was read')$$,
  'as stored: a record deleted is a conflict');

-- The embedder alone (sync) writes a record's vector as stored; never its fields.
set local role payrail_embedder;
select results_eq(
  format($$select outcome, has_current_vector from pg_temp.saved('[{"record_id": %s, "embedding": [0, 0, 1], "embedding_model": "test-model",
    "embedding_content_hash": %s}]')$$, :globex, pg_temp.hash_of('Globex', 'Pay', 'Pays.')),
  $$values ('updated', true)$$,
  'embedder alone: writes the vector of a record as stored');
select results_eq(
  format($$select e_sqlstate from pg_temp.error_of(%L)$$, format($q$select * from pg_temp.saved('[{"record_id": %s, "provider": "Globex",
    "method": "Pay", "urls": ["https://globex.example"], "guidance": "Pays."}]')$q$, :globex)),
  $$values ('42501')$$,
  'embedder alone: may not save a public field');
reset role;

-- JSON: a key that names no attribute is refused, naming it; so is an element that is no object.
select results_eq(
  $$select e_sqlstate, e_message from pg_temp.error_of($q$select payrail.provider_method_changes('[{"provider": "A", "docsUrl": "https://d"}]')$q$)$$,
  $$values ('22023', 'change 1: no field is called "docsUrl"')$$,
  'JSON: an unknown key is refused, never dropped');
select results_eq(
  $$select e_sqlstate, e_message from pg_temp.error_of($q$select payrail.provider_method_changes('[{"provider": "A"}, 3]')$q$)$$,
  $$values ('22023', 'change 2: a JSON number, not an object')$$,
  'JSON: an element that is no object is refused');
select results_eq(
  $$select e_sqlstate from pg_temp.error_of($q$select payrail.provider_method_changes('{"provider": "A"}')$q$)$$,
  $$values ('22023')$$,
  'JSON: an object instead of an array is refused');

-- The same text as the package embeds (payrail_embedder.embedders.record_text).
select is(payrail._embedding_text('Acme', 'Geocode', E'Line one.\nLine two.'), E'Acme: Geocode\nLine one.\nLine two.',
  'text: "provider: method", a line break, the guidance');

select * from finish();
rollback;
