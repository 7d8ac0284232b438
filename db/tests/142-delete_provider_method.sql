-- The write path's rules as functions psql users call too: delete_provider_method (the same
-- edit-conflict rule and words as save_provider_method), the batch's judgment, the one statement of
-- "has a current vector" (provider_method_states) and of a stored vector's length. Named after
-- delete_provider_method (functions/142); the judgment (146) and the states (schema/070) share its records.
begin;
select plan(25);
\ir include/error_of.sql

select payrail.set_embedding_model('test-model', 3);
select record_id as acme from payrail.save_provider_method(
  null, 0, 'Acme', 'Geocode', '{}', null, 'Turns addresses into coordinates.', true, '[1,0,0]', 'test-model') \gset
select record_id as draft from payrail.save_provider_method(
  null, 0, 'Acme', 'Route', '{}', null, 'Plans routes.') \gset
-- Version 2 of Acme / Geocode.
select record_version as acme_version from payrail.save_provider_method(:acme, 1, 'Acme', 'Geocode',
  '{https://api.acme.example}', null, 'Turns addresses into coordinates.') \gset

-- Delete: refused with the save's conflict code and words when the version read is stale.
select results_eq(
  format($$select e_sqlstate, e_message, e_hint from pg_temp.error_of('select payrail.delete_provider_method(%s, 1)')$$, :acme),
  $$values ('PYE03', 'provider method "Acme / Geocode" changed since it was read: version 1 was read, version 2 is saved now',
            'Read the record again, merge your change into it, and save with its new version.')$$,
  'delete: a stale version is refused with PYE03, in the words of a stale save');
select results_eq(
  format($$select e_sqlstate, e_message from pg_temp.error_of(
    $q$select * from payrail.save_provider_method(%s, 1, 'Acme', 'Geocode', '{}', null, 'Other.')$q$)$$, :acme),
  $$values ('PYE03', 'provider method "Acme / Geocode" changed since it was read: version 1 was read, version 2 is saved now')$$,
  '... the same words a stale save gets');
select is((select count(*)::int from payrail.provider_methods where id = :acme), 1, '... and nothing is deleted');
select is(payrail.delete_provider_method(:acme, 2), 2, 'delete: the version read is deleted, and returned');
select is((select count(*)::int from payrail.provider_methods where id = :acme), 0, '... the record is gone');
select is(
  (select version from payrail.provider_method_history where provider_method_id = :acme order by id desc limit 1), 2,
  '... and its history keeps the deleted version');
select results_eq(
  format($$select e_sqlstate, e_message, e_hint from pg_temp.error_of('select payrail.delete_provider_method(%s, 2)')$$, :acme),
  format($$values ('PYE03', 'provider method %s was deleted since it was read',
                  'Save it as a new record, or restore it from its history.')$$, :acme),
  'delete: a record deleted meanwhile is refused with PYE03 (deleted since it was read)');
select is(payrail.delete_provider_method(:draft, null), 1, 'delete: no version read (NULL) deletes whatever is stored');

-- Operators delete through it with their own privileges; agents and the embedder alone cannot.
select record_id as other from payrail.save_provider_method(null, 0, 'Beta', 'Lookup', '{}', null, 'Looks things up.') \gset
set local role payrail_operator;
select is(payrail.delete_provider_method(:other, 1), 1, 'delete: an operator deletes through it');
reset role;
set local role payrail_agent;
select throws_ok(format('select payrail.delete_provider_method(%s, 1)', :other), '42501', null,
  'delete: an agent may not call it');
reset role;
set local role payrail_embedder;
select throws_ok(format('select payrail.delete_provider_method(%s, 1)', :other), '42501', null,
  'delete: nor may the embedder alone');
reset role;

-- The write path's judgment (payrail.save_provider_methods, functions/146): each change's record
-- (by id, or by name as the unique key compares), its names as stored, whether it needs a vector,
-- and its conflict, in the order asked; nothing is written while one needs a vector or conflicts.
select record_id as geo from payrail.save_provider_method(
  null, 0, 'Acme', 'Geocode', '{}', null, 'Turns addresses into coordinates.', true, '[1,0,0]', 'test-model') \gset
select record_id as route from payrail.save_provider_method(
  null, 0, 'Acme', 'Route', '{}', null, 'Plans routes.') \gset
select results_eq(
  format($$select record_id, record_version, provider, method, outcome, case when outcome = 'conflict' then reason end
    from payrail.save_provider_methods(payrail.provider_method_changes(pg_catalog.jsonb_build_array(
      pg_catalog.jsonb_build_object('record_id', %1$s, 'expected_version', 1, 'provider', ' Acme ', 'method', 'Geocode',
                                    'guidance', 'Turns addresses into coordinates.'),
      pg_catalog.jsonb_build_object('provider', 'acme', 'method', 'geocode', 'guidance', 'Rewritten.'),
      pg_catalog.jsonb_build_object('expected_version', 0, 'provider', 'New', 'method', 'Thing', 'guidance', 'Does things.'),
      pg_catalog.jsonb_build_object('record_id', %2$s, 'expected_version', 1, 'provider', 'Acme', 'method', 'Route',
                                    'guidance', 'Plans routes.', 'enabled', true),
      pg_catalog.jsonb_build_object('record_id', 999999, 'expected_version', 1, 'provider', 'Gone', 'method', 'Away', 'guidance', 'x'))))$$,
    :geo, :route),
  format($$values
    (%1$s::bigint, 1, 'Acme', 'Geocode', 'ready', null::text),
    (%1$s, 1, 'acme', 'geocode', 'needs_embedding', null),
    (null, null, 'New', 'Thing', 'needs_embedding', null),
    (%2$s, 1, 'Acme', 'Route', 'needs_embedding', null),
    (null, null, 'Gone', 'Away', 'conflict', 'provider method 999999 was deleted since it was read')$$, :geo, :route),
  'judgment: each change''s record (by id, or by name as the unique key compares), names as stored, '
    || 'whether it needs a vector (new or changed content, enabled without one), and its conflict');
select results_eq(
  format($$select outcome, reason from payrail.save_provider_methods(payrail.provider_method_changes(pg_catalog.jsonb_build_array(
      pg_catalog.jsonb_build_object('record_id', %s, 'expected_version', 7, 'provider', 'Acme', 'method', 'Geocode',
                                    'guidance', 'Turns addresses into coordinates.'))))$$, :geo),
  $$values ('conflict', 'provider method "Acme / Geocode" changed since it was read: version 7 was read, version 1 is saved now')$$,
  'judgment: a change of another version than stored is a conflict, in payrail._edit_conflict''s words');
select is((select count(*)::int from payrail.provider_methods), 2, '... and nothing is written');

-- One statement of "has a current vector": a vector by the registry's model of the current content.
select results_eq(
  'select id, has_current_vector from payrail.provider_method_states order by id',
  format('values (%s::bigint, true), (%s, false)', :geo, :route),
  'states: the embedded record has a current vector, the draft without one has none');
update payrail.provider_methods set enabled = false where id = :geo;
update payrail.provider_methods set guidance = 'Turns addresses into points.' where id = :geo;
select is((select has_current_vector from payrail.provider_method_states where id = :geo), false,
  'states: a draft whose content changed has none (its stale vector was cleared)');
select embedded as switched from payrail.switch_embedding_model('next-model', 3) \gset
update payrail.provider_methods
set embedding = '[0,1,0]', embedding_model = 'next-model', embedding_content_hash = content_hash where id = :geo;
select is((select has_current_vector from payrail.provider_method_states where id = :geo), true,
  'states: a vector by the registry''s model (after a switch) is current');
select is(
  (select count(*)::int from payrail.provider_method_states as s join payrail.provider_methods as pm using (id)
   where s.has_current_vector <> (pm.embedding is not null and pm.embedding_model = (select name from payrail.embedding_model))),
  0, 'states: has_current_vector is the rule for every record');
select is((select count(*)::int from payrail.provider_method_states), (select count(*)::int from payrail.provider_methods),
  'states: one row per record');
set local role payrail_agent;
select throws_ok('select * from payrail.provider_method_states', '42501', null, 'states: agents read no record');
reset role;
-- A deploy reruns its file: the view, unchanged, is not replaced (which would lock the records
-- list out until the deploy commits).
\ir ../schema/070-provider_method_states.sql
select is_empty(
  $$select mode from pg_locks
    where relation = 'payrail.provider_method_states'::regclass and pid = pg_backend_pid() and mode = 'AccessExclusiveLock'$$,
  'states: a rerun of its file leaves the view as it is, unlocked');

-- One statement of a stored vector's length, for the records and for a switch's staged vectors.
select results_eq(
  $$select payrail._is_storable_vector_length(v::vector) from unnest(array[
      '[1,0,0]', '[0,0,0]', '[4294967296,0,0]', '[4.3e9,0,0]', '[2.3283064365386963e-10,0,0]', '[2e-10,0,0]']) as v$$,
  $$values (true), (true), (true), (false), (true), (false)$$,
  'length: 2^-32..2^32 is stored, beyond is not (zero is the nonzero rules'' business)');
select results_eq(
  format($$select e_sqlstate, e_message from pg_temp.error_of(
    'update payrail.provider_methods set embedding = ''[0,5e9,0]'' where id = %s')$$, :geo),
  $$values ('22023', 'embedding for provider method "Acme / Geocode" has length 5000000000; a stored vector''s length must be between 2^-32 and 2^32')$$,
  'length: a record''s vector beyond it is refused (22023)');
select results_eq(
  format($$select e_sqlstate, e_constraint from pg_temp.error_of(
    $q$insert into payrail.embedding_staging (provider_method_id, model, content_hash, embedding)
       select id, 'third-model', content_hash, '[0,0,1e-11]' from payrail.provider_methods where id = %s$q$)$$, :geo),
  $$values ('23514', 'embedding_staging_embedding_length_check')$$,
  'length: so is a staged vector, before a switch would fail on it');
select lives_ok(
  format($$insert into payrail.embedding_staging (provider_method_id, model, content_hash, embedding)
    select id, 'third-model', content_hash, '[0,0,1]' from payrail.provider_methods where id = %s$$, :geo),
  'length: a staged vector of unit length is stored');

select * from finish();
rollback;
