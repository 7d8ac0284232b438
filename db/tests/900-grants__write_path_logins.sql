-- The write path as the logins that run it: import, edit and the backoffice need a login holding
-- payrail_operator and payrail_embedder, which creates and edits records with their vectors.
begin;
select plan(10);

select payrail.set_embedding_model('test-model', 3);
create role payrail_test_writer;
grant payrail_operator, payrail_embedder to payrail_test_writer;
create role payrail_test_operator;
grant payrail_operator to payrail_test_operator;

set local role payrail_test_writer;
select results_eq(
  $$select record_version, outcome from payrail.save_provider_method(
      null, 0, 'Acme', 'Geocode', '{}', null, 'Turns addresses into coordinates.', true, '[1,0,0]', 'test-model')$$,
  $$values (1, 'created'::text)$$,
  'operator and embedder: creates an enabled record with its vector');
select results_eq(
  $$select record_version, outcome from payrail.save_provider_method(
      (select id from payrail.provider_methods where provider = 'Acme'), 1, 'Acme', 'Geocode', '{}', null,
      'Turns street addresses into coordinates.', null, '[0,1,0]', 'test-model')$$,
  $$values (2, 'updated'::text)$$,
  'operator and embedder: saves new content of an enabled record with its new vector');
select results_eq(
  $$select enabled, embedding_content_hash = content_hash from payrail.provider_methods where provider = 'Acme'$$,
  $$values (true, true)$$,
  'operator and embedder: the record stays enabled with the vector of its content');
reset role;

set local role payrail_test_operator;
select throws_ok(
  $$select * from payrail.save_provider_method(
      null, 0, 'Globex', 'Pay', '{}', null, 'Pays.', false, '[1,0,0]', 'test-model')$$,
  '42501', 'permission denied for table provider_methods',
  'operator alone: cannot save a vector');
-- The batch, as psql users call it: URL-only edits without the embedder; content waits for a vector.
select results_eq(
  $$select outcome, record_version from payrail.save_provider_methods(payrail.provider_method_changes(
      '[{"provider": "Acme", "method": "Geocode", "urls": ["https://api.acme.example"], "guidance": "Turns street addresses into coordinates."}]'))$$,
  $$values ('updated', 3)$$,
  'operator alone: a URL-only edit of the batch is saved, the vector kept');
select results_eq(
  $$select outcome, embedding_model from payrail.save_provider_methods(payrail.provider_method_changes(
      '[{"provider": "Acme", "method": "Geocode", "guidance": "Rewritten."}]'))$$,
  $$values ('needs_embedding', 'test-model')$$,
  'operator alone: new content of an enabled record needs a vector, and is not saved');
select throws_ok(
  $$select * from payrail.save_provider_methods(payrail.provider_method_changes(
      '[{"provider": "Acme", "method": "Geocode", "guidance": "Rewritten.", "embedding": [0, 0, 1], "embedding_model": "test-model"}]'))$$,
  '42501', null,
  'operator alone: cannot bring a vector (the model''s lock is the embedder''s)');
select results_eq(
  $$select outcome from payrail.save_provider_methods(payrail.provider_method_changes(
      '[{"provider": "Hooli", "method": "Mail", "guidance": "Mails."}]'), p_embed_drafts => false)$$,
  $$values ('created')$$,
  'operator alone: a draft is saved without a vector when asked (sync embeds it)');
reset role;
set local role payrail_agent;
select throws_ok(
  $$select * from payrail.save_provider_methods(payrail.provider_method_changes('[{"provider": "Agent", "method": "Write", "guidance": "x"}]'))$$,
  '42501', null, 'agent: cannot call the batch');
reset role;

set local role payrail_embedder;
select throws_ok(
  $$insert into payrail.provider_methods (provider, method, guidance, embedding, embedding_model, embedding_content_hash)
    values ('Evil', 'Insert', 'x', '[1,0,0]', 'test-model', null)$$,
  '42501', 'permission denied for table provider_methods',
  'embedder alone: cannot insert a record');
reset role;

select * from finish();
rollback;
