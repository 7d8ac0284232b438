-- The write path's rules in the database: record versions, stored names, and
-- payrail.save_provider_method (optimistic concurrency, upsert by name, vectors with content).
begin;
select plan(33);

select payrail.set_embedding_model('test-model', 3);

-- The vector columns and version of one record.
create function pg_temp.state_of(p_id bigint)
returns table (version integer, enabled boolean, embedding text, embedding_model text, current_vector boolean)
language sql
as $$
  select pm.version, pm.enabled, pm.embedding::text, pm.embedding_model, pm.embedding_content_hash = pm.content_hash
  from payrail.provider_methods as pm where pm.id = p_id
$$;

-- Versions: 1 when created; one more for every change of a public field or enabled; none for vectors.
select results_eq(
  $$select record_version, outcome from payrail.save_provider_method(
      null, 0, 'Acme', 'Geocode', '{}', null, 'Turns addresses into coordinates.')$$,
  $$values (1, 'created'::text)$$,
  'save: a new record is created at version 1');
create temporary table ids as select id as acme from payrail.provider_methods where provider = 'Acme';
grant select on ids to public;
select is((select version from payrail.provider_methods), 1, 'version: 1 when created');
update payrail.provider_methods set docs_url = 'https://docs.acme.example';
select is((select version from payrail.provider_methods), 2, 'version: a URL edit is a new version');
update payrail.provider_methods set docs_url = docs_url;
select is((select version from payrail.provider_methods), 2, 'version: an update that changes nothing is not');
select updated_at as saved_at from payrail.provider_methods \gset
update payrail.provider_methods
set embedding = '[1,0,0]', embedding_model = 'test-model', embedding_content_hash = content_hash;
select is((select version from payrail.provider_methods), 2, 'version: a vector-only write (sync) is not a new version');
select is((select updated_at from payrail.provider_methods), :'saved_at'::timestamptz,
  'version: ... and keeps when the version was saved');
update payrail.provider_methods set version = 40;
select is((select version from payrail.provider_methods), 2, 'version: nobody sets it by hand (the trigger keeps it)');

-- Stored names: trimmed of spaces and in Unicode NFC; a tab or line break is refused, not trimmed.
select lives_ok(
  $$insert into payrail.provider_methods (provider, method, guidance)
    values (E'\u00a0 Cafe\u0301 Maps ', E'Lookup\u3000', 'Guidance.')$$,
  'names: spaces around a name, NBSP and ideographic space included, are accepted');
select results_eq(
  $$select provider, method from payrail.provider_methods where provider like 'Caf%'$$,
  $$values (E'Caf\u00e9 Maps', 'Lookup')$$,
  'names: ... and stored trimmed, in NFC (e + combining acute is stored as one character)');
select throws_ok(
  $$insert into payrail.provider_methods (provider, method, guidance) values (E'Acme\t', 'Tabbed', 'Guidance.')$$,
  '23514', null, 'names: a trailing tab is refused, never silently dropped');
select throws_ok(
  $$insert into payrail.provider_methods (provider, method, guidance) values (E'Caf\u00e9 Maps', 'lookup', 'Guidance.')$$,
  '23505', null, 'names: the same name in another Unicode form is the same record (unique)');

-- Optimistic concurrency: a save names the version it read.
select throws_ok(
  format($$select * from payrail.save_provider_method(%s, 1, 'Acme', 'Geocode', '{}', null, 'Other.')$$, (select acme from ids)),
  'PYE03', null, 'save: a save of version 1 when version 2 is stored is refused (PYE03)');
select is((select guidance from payrail.provider_methods where id = (select acme from ids)),
  'Turns addresses into coordinates.', '... and changes nothing');
select results_eq(
  format($$select record_version, outcome from payrail.save_provider_method(
      %s, 2, 'Acme', 'Geocode', '{https://api.acme.example/geocode}', 'https://docs.acme.example',
      'Turns addresses into coordinates.')$$, (select acme from ids)),
  $$values (3, 'updated'::text)$$,
  'save: a save of the stored version is saved as the next version');
select results_eq(
  $$select version, current_vector from pg_temp.state_of((select acme from ids))$$,
  $$values (3, true)$$,
  'save: a URL-only save keeps the vector');
select results_eq(
  format($$select record_version, outcome from payrail.save_provider_method(
      %s, 3, 'Acme', 'Geocode', '{https://api.acme.example/geocode}', 'https://docs.acme.example',
      'Turns addresses into coordinates.')$$, (select acme from ids)),
  $$values (3, 'unchanged'::text)$$,
  'save: a save that changes nothing writes nothing and makes no version');
select throws_ok(
  $$select * from payrail.save_provider_method(999999, 1, 'Gone', 'Record', '{}', null, 'Guidance.')$$,
  'PYE03', null, 'save: a save of a record deleted meanwhile is refused (PYE03)');
select throws_ok(
  $$select * from payrail.save_provider_method(null, 0, ' acme ', 'GEOCODE', '{}', null, 'Guidance.')$$,
  '23505', null, 'save: a new record (expected version 0) under an existing name is refused (unique_violation)');
select is((select count(*)::int from payrail.provider_methods where provider ilike 'acme'), 1, '... and nothing is added');

-- Upsert by name (no id): the record named so, compared as the unique key compares.
select results_eq(
  $$select outcome from payrail.save_provider_method(
      null, null, 'ACME', 'geocode', '{https://api.acme.example/geocode}', 'https://docs.acme.example',
      'Turns addresses into coordinates.')$$,
  $$values ('updated'::text)$$,
  'save: by name, another spelling of the name is the same record (its spelling is saved)');
select is((select provider from payrail.provider_methods where id = (select acme from ids)), 'ACME',
  '... the record keeps its id and takes the new spelling');

-- Vectors: a content change needs one for an enabled record; with one, it stays enabled.
-- (The new spelling was new content: the draft lost its vector. Embed it and enable it.)
update payrail.provider_methods
set enabled = true, embedding = '[1,0,0]', embedding_model = 'test-model', embedding_content_hash = content_hash
where id = (select acme from ids);
select throws_ok(
  format($$select * from payrail.save_provider_method(%s, null, 'ACME', 'geocode', '{}', null, 'Rewritten.')$$,
         (select acme from ids)),
  '23514', null, 'save: new content for an enabled record without a vector is refused');
select results_eq(
  format($$select outcome from payrail.save_provider_method(
      %s, null, 'ACME', 'geocode', '{}', null, 'Rewritten.', null, '[0,1,0]', 'test-model')$$, (select acme from ids)),
  $$values ('updated'::text)$$,
  'save: new content with its vector is saved');
select results_eq(
  $$select enabled, embedding, current_vector from pg_temp.state_of((select acme from ids))$$,
  $$values (true, '[0,1,0]', true)$$,
  '... the record stays enabled, with the new vector, current for its content');
select throws_ok(
  format($$select * from payrail.save_provider_method(
      %s, null, 'ACME', 'geocode', '{}', null, 'Again.', null, '[0,1,0,0]', 'test-model')$$, (select acme from ids)),
  'PYE02', null, 'save: a vector of other dimensions than the registry model''s is refused (PYE02)');
select throws_ok(
  format($$select * from payrail.save_provider_method(
      %s, null, 'ACME', 'geocode', '{}', null, 'Again.', null, '[0,1,0]', 'other-model')$$, (select acme from ids)),
  'PYE02', null, 'save: a vector of another model is refused (PYE02)');
select results_eq(
  $$select record_version, outcome from payrail.save_provider_method(
      null, 0, 'Initech', 'Draft', '{}', null, 'A draft.', null, '[0,0,1]', 'test-model')$$,
  $$values (1, 'created'::text)$$,
  'save: a new draft can come with its vector');
select results_eq(
  $$select s.enabled, s.current_vector from payrail.provider_methods as pm, pg_temp.state_of(pm.id) as s where pm.provider = 'Initech'$$,
  $$values (false, true)$$,
  '... a draft (p_enabled null) with a current vector');
select results_eq(
  $$select record_version, outcome from payrail.save_provider_method(
      null, null, 'Initech', 'Draft', '{}', null, 'A draft.', true)$$,
  $$values (2, 'updated'::text)$$,
  'save: enabling a draft that has a current vector needs no new one');

-- Operators save; the vector columns need the embedder's privileges too.
set local role payrail_operator;
select lives_ok(
  $$select * from payrail.save_provider_method(null, null, 'Initech', 'Draft', '{https://initech.example}', null, 'A draft.')$$,
  'privileges: an operator saves a URL-only edit');
select throws_ok(
  $$select * from payrail.save_provider_method(null, null, 'Initech', 'Draft', '{}', null, 'New text.', null, '[1,0,0]', 'test-model')$$,
  '42501', null, 'privileges: an operator alone cannot write a vector');
reset role;
set local role payrail_agent;
select throws_ok(
  $$select * from payrail.save_provider_method(null, null, 'Agent', 'Write', '{}', null, 'Guidance.')$$,
  '42501', null, 'privileges: an agent cannot save');
reset role;

-- History entries carry the version they kept.
select results_eq(
  format($$select version from payrail.provider_method_history where provider_method_id = %s order by id$$,
         (select acme from ids)),
  $$values (1), (2), (3), (4), (5)$$,
  'history: each entry names the version it kept');

select * from finish();
rollback;
