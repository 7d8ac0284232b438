-- Rules 1-3 of DESIGN.md ("Rules the database enforces") and the one-model-per-registry rule.
begin;
select plan(55);

create function pg_temp.violates(p_constraint text)
returns text
language sql
immutable
return format('new row for relation "provider_methods" violates check constraint "%s"', p_constraint);

\ir include/error_of.sql

-- The embedding columns of one record, vector as its binary form (byte-for-byte comparisons).
create function pg_temp.embedding_of(p_provider text, p_method text)
returns table (enabled boolean, embedding bytea, embedding_model text, embedding_content_hash bytea)
language sql
as $$
  select pm.enabled, vector_send(pm.embedding), pm.embedding_model, pm.embedding_content_hash
  from payrail.provider_methods as pm
  where pm.provider = p_provider and pm.method = p_method
$$;

-- Rule 1: a vector needs a registry model to belong to.
select throws_ok(
  $$insert into payrail.provider_methods (provider, method, guidance, embedding, embedding_model, embedding_content_hash)
    values ('Acme', 'Early', 'Guidance.', '[1,0,0]', 'test-model', payrail._content_hash('Acme', 'Early', 'Guidance.'))$$,
  'PYE02', null,
  'rule 1: a vector before any registry model is refused (PYE02)');

-- The registry model can be chosen, and changed while no record holds a vector.
select lives_ok($$select payrail.set_embedding_model('first-model', 8)$$, 'model: the first model is set');
select lives_ok($$select payrail.set_embedding_model('test-model', 3)$$, 'model: it can change while no vector exists');
select results_eq(
  $$select name, dimensions from payrail.get_embedding_model()$$,
  $$values ('test-model', 3)$$,
  'model: get_embedding_model returns the model now in force');

-- Rule 1: an enabled record needs an embedding of its current content by the registry's model.
select throws_ok(
  $$insert into payrail.provider_methods (provider, method, guidance, enabled) values ('Acme', 'No Vector', 'Guidance.', true)$$,
  '23514', pg_temp.violates('provider_methods_enabled_needs_embedding_check'),
  'rule 1: an enabled record without a vector is refused');
select throws_ok(
  $$insert into payrail.provider_methods (provider, method, guidance, enabled, embedding, embedding_model, embedding_content_hash)
    values ('Acme', 'Wrong Hash', 'Guidance.', true, '[1,0,0]', 'test-model', payrail._content_hash('Acme', 'Wrong Hash', 'Other guidance.'))$$,
  '23514', pg_temp.violates('provider_methods_embedding_content_check'),
  'rule 1: a vector made from other content (wrong content hash) is refused');
select throws_ok(
  $$insert into payrail.provider_methods (provider, method, guidance, enabled, embedding, embedding_model, embedding_content_hash)
    values ('Acme', 'Other Model', 'Guidance.', true, '[1,0,0]', 'other-model', payrail._content_hash('Acme', 'Other Model', 'Guidance.'))$$,
  'PYE02', null,
  'rule 1: a vector from another model is refused (PYE02)');
select throws_ok(
  $$insert into payrail.provider_methods (provider, method, guidance, enabled, embedding, embedding_model, embedding_content_hash)
    values ('Acme', 'Other Dims', 'Guidance.', true, '[1,0,0,0]', 'test-model', payrail._content_hash('Acme', 'Other Dims', 'Guidance.'))$$,
  'PYE02', null,
  'rule 1: a vector with other dimensions than the model''s is refused (PYE02)');
select throws_ok(
  $$insert into payrail.provider_methods (provider, method, guidance, embedding, embedding_content_hash)
    values ('Acme', 'No Model', 'Guidance.', '[1,0,0]', payrail._content_hash('Acme', 'No Model', 'Guidance.'))$$,
  'PYE02', null,
  'rule 1: a vector that does not say its model is refused (PYE02)');
select throws_ok(
  $$insert into payrail.provider_methods (provider, method, guidance, embedding_model, embedding_content_hash)
    values ('Acme', 'Model Only', 'Guidance.', 'test-model', payrail._content_hash('Acme', 'Model Only', 'Guidance.'))$$,
  '23514', pg_temp.violates('provider_methods_embedding_model_check'),
  'rule 1: a model and content hash without a vector are refused');
select throws_ok(
  $$insert into payrail.provider_methods (provider, method, guidance, embedding, embedding_model, embedding_content_hash)
    values ('Acme', 'Zero', 'Guidance.', '[0,0,0]', 'test-model', payrail._content_hash('Acme', 'Zero', 'Guidance.'))$$,
  '23514', pg_temp.violates('provider_methods_embedding_nonzero_check'),
  'rule 1: the zero vector is refused');

select lives_ok(
  $$insert into payrail.provider_methods (provider, method, guidance, enabled, embedding, embedding_model, embedding_content_hash)
    values ('Acme', 'Hotel Search', 'Find hotels.', true, '[0.1,0.2,0.3]', 'test-model',
            payrail._content_hash('Acme', 'Hotel Search', 'Find hotels.')),
           ('Acme', 'Flights', 'Find flights.', true, '[0.3,0.2,0.1]', 'test-model',
            payrail._content_hash('Acme', 'Flights', 'Find flights.')),
           ('Acme', 'Weather', 'Get forecasts.', true, '[0.125,-2.5,3.75]', 'test-model',
            payrail._content_hash('Acme', 'Weather', 'Get forecasts.'))$$,
  'rule 1: enabled records with current vectors by the registry model are accepted');
select lives_ok(
  $$insert into payrail.provider_methods (provider, method, guidance, embedding, embedding_model, embedding_content_hash)
    values ('Acme', 'Draft With Vector', 'Draft guidance.', '[1,1,0]', 'test-model',
            payrail._content_hash('Acme', 'Draft With Vector', 'Draft guidance.'))$$,
  'rule 1: a draft with a current vector is accepted');
select lives_ok(
  $$insert into payrail.provider_methods (provider, method, guidance) values ('Acme', 'Draft', 'Draft guidance.')$$,
  'rule 1: a draft without a vector is accepted');
select throws_ok(
  $$update payrail.provider_methods set enabled = true where method = 'Draft'$$,
  '23514', pg_temp.violates('provider_methods_enabled_needs_embedding_check'),
  'rule 1: enabling a draft that has no vector is refused');

-- One model per registry: once vectors exist, set_embedding_model only accepts the current model.
select throws_ok(
  $$select payrail.set_embedding_model('other-model', 3)$$,
  'PYE02', null,
  'model: set_embedding_model to another name once vectors exist is refused (PYE02)');
select throws_ok(
  $$select payrail.set_embedding_model('test-model', 4)$$,
  'PYE02', null,
  'model: set_embedding_model to other dimensions once vectors exist is refused (PYE02)');
select lives_ok(
  $$select payrail.set_embedding_model('test-model', 3)$$,
  'model: set_embedding_model is idempotent for the current model');
select results_eq(
  $$select name, dimensions from payrail.get_embedding_model()$$,
  $$values ('test-model', 3)$$,
  'model: the registry model is unchanged');

-- Rule 2: a content edit of an enabled record without a fresh vector is refused, with a way forward.
select throws_ok(
  $$update payrail.provider_methods set guidance = 'Find hotels fast.' where method = 'Hotel Search'$$,
  '23514',
  'provider method "Acme / Hotel Search" is enabled, so a change to its provider, method or guidance needs a fresh embedding',
  'rule 2: a guidance edit of an enabled record without a vector is refused');
select results_eq(
  $$select e_sqlstate, e_constraint, e_table from pg_temp.error_of(
      'update payrail.provider_methods set guidance = ''Find hotels fast.'' where method = ''Hotel Search''')$$,
  $$values ('23514', 'provider_methods_enabled_needs_embedding_check', 'provider_methods')$$,
  'rule 2: the refusal names the enabled-needs-embedding rule and the table');
select alike(
  (select e_hint from pg_temp.error_of(
     $$update payrail.provider_methods set guidance = 'Find hotels fast.' where method = 'Hotel Search'$$)),
  '%payrail-embedder import%',
  'rule 2: the hint points to payrail-embedder import');
select alike(
  (select e_hint from pg_temp.error_of(
     $$update payrail.provider_methods set guidance = 'Find hotels fast.' where method = 'Hotel Search'$$)),
  '%enabled = false in the same UPDATE%',
  'rule 2: the hint explains disabling in the same UPDATE');
select throws_ok(
  $$update payrail.provider_methods set provider = 'Acme Inc' where method = 'Hotel Search'$$,
  '23514', null,
  'rule 2: a provider edit of an enabled record without a vector is refused');
select throws_ok(
  $$update payrail.provider_methods set method = 'Hotel Finder' where method = 'Hotel Search'$$,
  '23514', null,
  'rule 2: a method edit of an enabled record without a vector is refused');
select throws_ok(
  $$update payrail.provider_methods set provider = 'ACME' where method = 'Hotel Search'$$,
  '23514', null,
  'rule 2: even a case-only provider edit changes the content and is refused');
select lives_ok(
  $$update payrail.provider_methods set guidance = guidance, provider = provider where method = 'Hotel Search'$$,
  'rule 2: an UPDATE that rewrites the same content is not an edit');
select results_eq(
  $$select * from pg_temp.embedding_of('Acme', 'Hotel Search')$$,
  $$values (true, vector_send('[0.1,0.2,0.3]'), 'test-model', payrail._content_hash('Acme', 'Hotel Search', 'Find hotels.'))$$,
  'rule 2: ... and keeps the vector');

-- Rule 2: the same edit with enabled = false in the same UPDATE succeeds and drops the vector.
select lives_ok(
  $$update payrail.provider_methods set guidance = 'Find hotels fast.', enabled = false where method = 'Hotel Search'$$,
  'rule 2: the edit with enabled = false in the same UPDATE succeeds');
select results_eq(
  $$select * from pg_temp.embedding_of('Acme', 'Hotel Search')$$,
  $$values (false, null::bytea, null::text, null::bytea)$$,
  'rule 2: ... and the record becomes a draft without its stale vector');
select results_eq(
  $$select guidance from payrail.provider_methods where method = 'Hotel Search'$$,
  $$values ('Find hotels fast.')$$,
  'rule 2: ... with the new guidance saved');

-- Rule 2: a draft's content edit simply drops its stale vector.
select lives_ok(
  $$update payrail.provider_methods set guidance = 'New draft guidance.' where method = 'Draft With Vector'$$,
  'rule 2: a content edit of a draft with a vector succeeds');
select results_eq(
  $$select * from pg_temp.embedding_of('Acme', 'Draft With Vector')$$,
  $$values (false, null::bytea, null::text, null::bytea)$$,
  'rule 2: ... and drops the stale vector, its model and its content hash');

-- Rule 2: an edit that carries a fresh vector (the write path) is saved with it.
select lives_ok(
  $$update payrail.provider_methods
    set method = 'Flight Search', guidance = 'Find flights fast.',
        embedding = '[0.5,0.25,-1]', embedding_model = 'test-model',
        embedding_content_hash = payrail._content_hash('Acme', 'Flight Search', 'Find flights fast.')
    where method = 'Flights'$$,
  'rule 2: a content edit of an enabled record with a fresh vector succeeds');
select results_eq(
  $$select * from pg_temp.embedding_of('Acme', 'Flight Search')$$,
  $$values (true, vector_send('[0.5,0.25,-1]'), 'test-model', payrail._content_hash('Acme', 'Flight Search', 'Find flights fast.'))$$,
  'rule 2: ... and the record stays enabled with the fresh vector');
select is(
  (select content_hash from payrail.provider_methods where method = 'Flight Search'),
  payrail._content_hash('Acme', 'Flight Search', 'Find flights fast.'),
  'rule 2: ... whose content hash is that of the new content');
select throws_ok(
  $$update payrail.provider_methods
    set guidance = 'Find flights faster.', embedding = '[0.5,0.5,-1]', embedding_model = 'test-model'
    where method = 'Flight Search'$$,
  '23514', pg_temp.violates('provider_methods_embedding_content_check'),
  'rule 2: a new vector that still carries the old content hash is refused');
select throws_ok(
  $$update payrail.provider_methods
    set guidance = 'Find flights faster.', embedding = '[0.5,0.5,-1]', embedding_model = 'other-model',
        embedding_content_hash = payrail._content_hash('Acme', 'Flight Search', 'Find flights faster.')
    where method = 'Flight Search'$$,
  'PYE02', null,
  'rule 2: a fresh vector from another model is refused (PYE02)');

-- Rule 3: URL-only edits and enabling/disabling keep the vector byte for byte.
select lives_ok(
  $$update payrail.provider_methods set urls = '{https://api.example.com/weather}' where method = 'Weather'$$,
  'rule 3: a urls-only edit of an enabled record succeeds');
select results_eq(
  $$select * from pg_temp.embedding_of('Acme', 'Weather')$$,
  $$values (true, vector_send('[0.125,-2.5,3.75]'), 'test-model', payrail._content_hash('Acme', 'Weather', 'Get forecasts.'))$$,
  'rule 3: ... and keeps the vector');
select lives_ok(
  $$update payrail.provider_methods set docs_url = 'https://docs.example.com/weather' where method = 'Weather'$$,
  'rule 3: a docs_url-only edit of an enabled record succeeds');
select results_eq(
  $$select * from pg_temp.embedding_of('Acme', 'Weather')$$,
  $$values (true, vector_send('[0.125,-2.5,3.75]'), 'test-model', payrail._content_hash('Acme', 'Weather', 'Get forecasts.'))$$,
  'rule 3: ... and keeps the vector');
select lives_ok(
  $$update payrail.provider_methods set enabled = false where method = 'Weather'$$,
  'rule 3: disabling succeeds');
select results_eq(
  $$select * from pg_temp.embedding_of('Acme', 'Weather')$$,
  $$values (false, vector_send('[0.125,-2.5,3.75]'), 'test-model', payrail._content_hash('Acme', 'Weather', 'Get forecasts.'))$$,
  'rule 3: ... and keeps the vector');
select lives_ok(
  $$update payrail.provider_methods set enabled = true, urls = '{}', docs_url = null where method = 'Weather'$$,
  'rule 3: enabling again (with URL edits in the same UPDATE) succeeds');
select results_eq(
  $$select * from pg_temp.embedding_of('Acme', 'Weather')$$,
  $$values (true, vector_send('[0.125,-2.5,3.75]'), 'test-model', payrail._content_hash('Acme', 'Weather', 'Get forecasts.'))$$,
  'rule 3: ... and keeps the vector');

-- Rule 1, at commit: changing payrail.embedding_model while old vectors remain is refused.
-- The check is a deferred constraint trigger; "set constraints all immediate" runs it now.
select lives_ok(
  $$update payrail.embedding_model set name = 'other-model'$$,
  'model switch: the model row itself can change inside a transaction');
select throws_ok(
  'set constraints all immediate',
  'PYE02', 'stored embeddings would no longer match the registry''s embedding model',
  'model switch: ... but vectors of the old model left behind are refused at commit (PYE02)');
select lives_ok(
  $$update payrail.provider_methods set embedding_model = 'other-model' where embedding is not null$$,
  'model switch: re-embedding every record with the new model in the same transaction succeeds');
select lives_ok(
  'set constraints all immediate',
  'model switch: ... and then the switch passes the commit-time check');
set constraints all deferred;
select lives_ok(
  $$update payrail.embedding_model set dimensions = 4$$,
  'model switch: changing the dimensions is deferred too');
select throws_ok(
  'set constraints all immediate',
  'PYE02', 'stored embeddings would no longer match the registry''s embedding model',
  'model switch: ... and refused at commit while 3-dimension vectors remain (PYE02)');
update payrail.embedding_model set dimensions = 3;
select lives_ok(
  'set constraints all immediate',
  'model switch: back to 3 dimensions the commit-time check passes again');
set constraints all deferred;
select lives_ok(
  $$delete from payrail.embedding_model$$,
  'model switch: deleting the model row is deferred too');
select throws_ok(
  'set constraints all immediate',
  'PYE02', 'stored embeddings would no longer match the registry''s embedding model',
  'model switch: ... and refused at commit while vectors remain (PYE02)');

select * from finish();
rollback;
