-- payrail.provider_method_half_vectors, search's first pass, holds exactly the enabled records'
-- unit embeddings in half precision, whatever writes provider_methods.
begin;
select plan(15);

create function pg_temp.half_vectors_match(p_description text)
returns text
language sql
as $$
  select set_eq(
    'select provider_method_id, unit_embedding::text from payrail.provider_method_half_vectors',
    'select id, (l2_normalize(embedding)::halfvec)::text from payrail.provider_methods where enabled',
    p_description)
$$;

create function pg_temp.embed(p_provider text, p_method text, p_guidance text, p_embedding text)
returns void
language sql
as $$
  update payrail.provider_methods
  set guidance = p_guidance, embedding = p_embedding::vector, embedding_model = 'test-model',
      embedding_content_hash = payrail._content_hash(provider, method, p_guidance)
  where provider = p_provider and method = p_method
$$;

select payrail.set_embedding_model('test-model', 3);
insert into payrail.provider_methods (provider, method, guidance)
values ('Globex', 'Flights', 'Find flights.'), ('Draftco', 'Staged', 'A draft.'), ('Draftco', 'Bare', 'No vector yet.');
select pg_temp.embed('Globex', 'Flights', 'Find flights.', '[0,1e-9,-2]');
select pg_temp.embed('Draftco', 'Staged', 'A draft.', '[1,1,0]');
select pg_temp.half_vectors_match('drafts, with a vector or without, have no row');

update payrail.provider_methods set enabled = true where method = 'Flights';
insert into payrail.provider_methods (provider, method, guidance, enabled, embedding, embedding_model, embedding_content_hash)
values ('Acme', 'Hotels', 'Find hotels.', true, '[3,0,4]', 'test-model', payrail._content_hash('Acme', 'Hotels', 'Find hotels.'));
select pg_temp.half_vectors_match('enabling a draft and inserting an enabled record add their rows');
select is(
  (select unit_embedding::text from payrail.provider_method_half_vectors
   join payrail.provider_methods as pm on pm.id = provider_method_id where pm.method = 'Hotels'),
  '[0.6,0,0.8]'::halfvec::text,
  'the row holds the embedding scaled to unit length');

update payrail.provider_methods set enabled = true where method = 'Staged';
select pg_temp.half_vectors_match('enabling a draft adds its row');

update payrail.provider_methods set enabled = false where method = 'Flights';
select pg_temp.half_vectors_match('disabling a record removes its row');

select pg_temp.embed('Acme', 'Hotels', 'Find hotels, with live prices.', '[0,2,0]');
select pg_temp.half_vectors_match('a content edit with a fresh vector replaces the row');

update payrail.provider_methods set urls = '{https://acme.example/hotels}' where method = 'Hotels';
select pg_temp.half_vectors_match('a URL-only edit keeps the row');

update payrail.provider_methods set guidance = 'A changed draft.' where method = 'Flights';
select pg_temp.half_vectors_match('a draft''s content edit (its vector dropped) leaves no row');

select pg_temp.embed('Draftco', 'Bare', 'Now embedded.', '[1,2,3]');
update payrail.provider_methods set enabled = true where method = 'Bare';
select pg_temp.half_vectors_match('embedding then enabling a draft adds its row');

delete from payrail.provider_methods where method = 'Staged';
select pg_temp.half_vectors_match('deleting a record removes its row');

-- A model switch replaces every vector in one transaction.
insert into payrail.embedding_staging (provider_method_id, model, content_hash, embedding)
select id, 'next-model', content_hash, pg_catalog.array_fill(id::real, array[2])::vector
from payrail.provider_methods where embedding is not null;
select payrail.switch_embedding_model('next-model', 2);
select pg_temp.half_vectors_match('a model switch replaces every row with the new model''s vector');
select is(
  (select count(*)::int from payrail.provider_method_half_vectors where vector_dims(unit_embedding) <> 2),
  0,
  'after the switch no row of the old model''s dimensions is left');

-- Nobody writes the table by hand: operators read it (preview_search runs as them), nobody else.
select ok(
  not has_table_privilege('payrail_operator', 'payrail.provider_method_half_vectors', 'insert, update, delete')
  and not has_table_privilege('payrail_embedder', 'payrail.provider_method_half_vectors', 'select, insert, update, delete')
  and not has_table_privilege('payrail_agent', 'payrail.provider_method_half_vectors', 'select, insert, update, delete'),
  'no role may write the half-precision vectors; only operators may read them');

set local role payrail_operator;
select lives_ok(
  $$update payrail.provider_methods set enabled = false where method = 'Bare'$$,
  'an operator''s edit updates the table through the trigger, without a privilege on it');
reset role;
select pg_temp.half_vectors_match('after the operator''s edit');

select * from finish();
rollback;
