-- Model switch (DESIGN.md, "Embeddings"): vectors of the new model are staged while the old model
-- stays in force, then payrail.switch_embedding_model switches everything in one transaction.
begin;
select plan(31);

\ir include/error_of.sql

-- Old model: 3 dimensions. New model: 2 dimensions, with an order of its own.
select payrail.set_embedding_model('old-model', 3);
insert into payrail.provider_methods (provider, method, guidance, enabled, embedding, embedding_model, embedding_content_hash)
select f.provider, f.method, f.guidance, f.enabled, f.embedding::vector,
       case when f.embedding is not null then 'old-model' end,
       case when f.embedding is not null then payrail._content_hash(f.provider, f.method, f.guidance) end
from (values
  ('Acme',    'Hotels',  'Find hotels.',   true,  '[1,0,0]'),
  ('Globex',  'Flights', 'Find flights.',  true,  '[0,1,0]'),
  ('Initech', 'Weather', 'Get forecasts.', true,  '[0,0,1]'),
  ('Draftco', 'Staged',  'A draft.',       false, '[1,1,0]'),
  ('Draftco', 'Edited',  'Another draft.', false, '[1,0,1]')
) as f(provider, method, guidance, enabled, embedding);

create temporary table before_switch as
select provider, method from payrail.search_provider_methods('find a hotel', '[0.9,0.2,0.1]', 'old-model');
select results_eq(
  $$select provider, method from before_switch$$,
  $$values ('Acme', 'Hotels'), ('Globex', 'Flights'), ('Initech', 'Weather')$$,
  'before: search orders by the old model''s vectors');

-- Staging, as payrail-embedder model switch does it: as the embedder role, any number of transactions.
set local role payrail_embedder;
select lives_ok(
  $$insert into payrail.embedding_staging (provider_method_id, model, content_hash, embedding)
    select pm.id, 'new-model', pm.content_hash, v.embedding::vector
    from payrail.provider_methods as pm
    join (values ('Acme', '[0,1]'), ('Globex', '[1,0]'), ('Initech', '[1,1]')) as v(provider, embedding) using (provider)$$,
  'staging: the embedder stages new-model vectors of the enabled records');
reset role;

-- Until the switch, the old model stays in force.
select results_eq(
  $$select provider, method from payrail.search_provider_methods('find a hotel', '[0.9,0.2,0.1]', 'old-model')$$,
  $$select provider, method from before_switch$$,
  'staging: search with the old model still answers, exactly as before');
select results_eq(
  $$select name, dimensions from payrail.get_embedding_model()$$,
  $$values ('old-model', 3)$$,
  'staging: get_embedding_model still names the old model');
select throws_ok(
  $$select * from payrail.search_provider_methods('find a hotel', '[1,0]', 'new-model')$$,
  'PYE02', null,
  'staging: a query embedded with the new model is refused (PYE02), not ranked');

-- Staging refuses what could never be switched in.
select throws_ok(
  $$insert into payrail.embedding_staging (provider_method_id, model, content_hash, embedding)
    select id, 'new-model', content_hash, '[0,0]' from payrail.provider_methods where method = 'Staged'$$,
  '23514', 'new row for relation "embedding_staging" violates check constraint "embedding_staging_embedding_nonzero_check"',
  'staging: a zero vector is refused');
select throws_ok(
  $$insert into payrail.embedding_staging (provider_method_id, model, content_hash, embedding)
    values (-1, 'new-model', sha256('x'), '[1,0]')$$,
  '23503', null,
  'staging: a vector for a record that does not exist is refused');
select throws_ok(
  $$insert into payrail.embedding_staging (provider_method_id, model, content_hash, embedding)
    select id, E'bad\nmodel', content_hash, '[1,0]' from payrail.provider_methods where method = 'Staged'$$,
  '23514', null,
  'staging: a model name with a control character is refused');

-- A record edited after staging has no staged vector of its current content: the switch is refused.
update payrail.provider_methods set urls = '{https://acme.example/hotels}' where provider = 'Acme';
update payrail.provider_methods
set guidance = 'Find flights fast.',
    embedding = '[0,1,0.5]', embedding_model = 'old-model',
    embedding_content_hash = payrail._content_hash('Globex', 'Flights', 'Find flights fast.')
where provider = 'Globex';
set local role payrail_embedder;
select throws_ok(
  $$select * from payrail.switch_embedding_model('new-model', 2)$$,
  'PYE02',
  'cannot switch to model new-model (2 dimensions): 1 enabled provider method(s) have no staged embedding of their current content by it: "Globex / Flights"',
  'switch: refused (PYE02) while an enabled record lacks a staged vector of its current content, naming it');
reset role;
select alike(
  (select e_hint from pg_temp.error_of($$select * from payrail.switch_embedding_model('new-model', 2)$$)),
  '%payrail-embedder%model switch new-model%',
  'switch: ... with a hint to run payrail-embedder model switch');
select throws_ok(
  $$select * from payrail.switch_embedding_model('new-model', 3)$$,
  'PYE02', null,
  'switch: staged vectors of other dimensions than the ones named do not count');
select results_eq(
  $$select name, dimensions from payrail.get_embedding_model()$$,
  $$values ('old-model', 3)$$,
  'switch: a refused switch leaves the model...');
select is(
  (select count(*)::int from payrail.provider_methods where embedding_model = 'old-model'), 5,
  '... and every vector as it was');
select is(
  (select count(*)::int from payrail.embedding_staging), 3, '... and the staged vectors for a retry');

-- Re-staging the edited record (a rerun of model switch), plus one of the two drafts.
insert into payrail.embedding_staging (provider_method_id, model, content_hash, embedding)
select pm.id, 'new-model', pm.content_hash, v.embedding::vector
from payrail.provider_methods as pm
join (values ('Flights', '[1,0.5]'), ('Staged', '[0.5,1]')) as v(method, embedding) using (method)
on conflict (provider_method_id, model) do update set content_hash = excluded.content_hash, embedding = excluded.embedding;

set local role payrail_embedder;
select results_eq(
  $$select * from payrail.switch_embedding_model('new-model', 2)$$,
  $$values (4::bigint, 1::bigint)$$,
  'switch: succeeds as the embedder, reporting 4 records given their staged vector and 1 draft cleared');
reset role;
select lives_ok('set constraints all immediate', 'switch: the commit-time model check passes');
select results_eq(
  $$select name, dimensions from payrail.get_embedding_model()$$,
  $$values ('new-model', 2)$$,
  'switch: the registry''s model is the new one');
select results_eq(
  $$select method, enabled, embedding_model, vector_send(embedding) from payrail.provider_methods order by id$$,
  $$values ('Hotels', true, 'new-model', vector_send('[0,1]')),
           ('Flights', true, 'new-model', vector_send('[1,0.5]')),
           ('Weather', true, 'new-model', vector_send('[1,1]')),
           ('Staged', false, 'new-model', vector_send('[0.5,1]')),
           ('Edited', false, null, null)$$,
  'switch: every staged vector moved in; the draft without one lost its old-model vector');
select is_empty($$select * from payrail.embedding_staging$$, 'switch: the staging table is emptied');
select results_eq(
  $$select provider from payrail.provider_method_history order by id$$,
  $$values ('Acme'), ('Globex')$$,
  'switch: moving vectors is no new version of any record (only the two edits above are)');

-- After the switch: the new model answers, the old one is refused with a clear error.
select results_eq(
  $$select provider, method from payrail.search_provider_methods('find a flight', '[1,0.4]', 'new-model')$$,
  $$values ('Globex', 'Flights'), ('Initech', 'Weather'), ('Acme', 'Hotels')$$,
  'after: search orders by the new model''s vectors');
select throws_ok(
  $$select * from payrail.search_provider_methods('find a hotel', '[0.9,0.2,0.1]', 'old-model')$$,
  'PYE02', 'query embedding is from model old-model (3 dimensions), but the registry uses new-model (2 dimensions)',
  'after: a client still embedding with the old model gets PYE02 naming both models, never a ranking');
select throws_ok(
  $$select * from payrail.search_provider_methods('find a hotel', '[0.9,0.2,0.1]')$$,
  'PYE02', null,
  'after: an old-model vector without a model name is refused by its dimensions');
select throws_ok(
  $$select * from payrail.search_provider_methods('find a hotel', '[0.9,0.2]', 'old-model')$$,
  'PYE02', null,
  'after: a vector of the right dimensions that names another model is refused');
select results_eq(
  $$select provider, method from payrail.search_provider_methods('Acme')$$,
  $$values ('Acme', 'Hotels')$$,
  'after: the name path needs no vector, so it never noticed the switch');

-- The old model's vectors cannot come back in.
select throws_ok(
  $$update payrail.provider_methods
    set embedding = '[1,0,1]', embedding_model = 'old-model', embedding_content_hash = content_hash
    where method = 'Edited'$$,
  'PYE02', null,
  'after: writing an old-model vector is refused (PYE02)');

-- Switching to the model in force changes nothing; a switch with no record at all just sets the model.
select results_eq(
  $$select * from payrail.switch_embedding_model('new-model', 2)$$,
  $$values (0::bigint, 0::bigint)$$,
  'switch: to the model in force, with nothing staged, moves nothing and clears nothing');
delete from payrail.provider_methods;
select lives_ok(
  $$select * from payrail.switch_embedding_model('third-model', 5)$$,
  'switch: an empty registry switches without staging');
select lives_ok('set constraints all immediate', '... and passes the commit-time check');

-- Operators and agents cannot switch or stage.
set local role payrail_operator;
select throws_ok($$select * from payrail.switch_embedding_model('operator-model', 2)$$, '42501', null,
  'operator: cannot switch the model');
select throws_ok($$select * from payrail.embedding_staging$$, '42501', null, 'operator: cannot read the staging table');
reset role;

select * from finish();
rollback;
