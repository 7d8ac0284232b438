-- Every documented SQLSTATE of the search functions (DESIGN.md, "Search": bad input gets a clear,
-- documented SQLSTATE, never a silent or partial answer).
begin;
select plan(29);

select payrail.set_embedding_model('test-model', 3);
insert into payrail.provider_methods (provider, method, guidance, enabled, embedding, embedding_model, embedding_content_hash)
values ('Acme', 'Hotel Search', 'Find hotels.', true, '[1,0,0]', 'test-model',
        payrail._content_hash('Acme', 'Hotel Search', 'Find hotels.'));

-- 22023 invalid_parameter_value: an empty, white-space-only, NULL or over-long query.
select throws_ok(
  $$select * from payrail.search_provider_methods('', '[1,0,0]')$$,
  '22023', 'query is empty', '22023: an empty query');
select throws_ok(
  $$select * from payrail.search_provider_methods(E' \t\n ', '[1,0,0]')$$,
  '22023', 'query is empty', '22023: a white-space-only query');
select throws_ok(
  $$select * from payrail.search_provider_methods(null, '[1,0,0]')$$,
  '22023', 'query is empty', '22023: a NULL query');
select throws_ok(
  $$select * from payrail.search_provider_methods(repeat('x', 2001), '[1,0,0]')$$,
  '22023', 'query is 2001 characters long; the limit is 2,000', '22023: a 2001-character query');
select throws_ok(
  $$select * from payrail.search_provider_methods(repeat('é', 2001), '[1,0,0]')$$,
  '22023', 'query is 2001 characters long; the limit is 2,000', '22023: the limit counts characters, not bytes');
select throws_ok(
  $$select * from payrail.search_provider_methods(repeat('x', 2001))$$,
  '22023', null, '22023: the length is checked before the missing embedding');
select results_eq(
  $$select provider, method from payrail.search_provider_methods(repeat('x', 2000), '[1,0,0]')$$,
  $$values ('Acme', 'Hotel Search')$$,
  'a 2000-character query is accepted');
select results_eq(
  $$select provider, method from payrail.search_provider_methods(repeat('é', 2000), '[1,0,0]')$$,
  $$values ('Acme', 'Hotel Search')$$,
  'a 2000-character query of two-byte characters is accepted');

-- 22023 invalid_parameter_value: the zero vector has no cosine distance.
select throws_ok(
  $$select * from payrail.search_provider_methods('find a hotel', '[0,0,0]')$$,
  '22023', 'query embedding is the zero vector, which has no cosine distance', '22023: a zero query vector');
select throws_ok(
  $$select * from payrail.search_provider_methods('find a hotel', '[0,0,0]', 'test-model')$$,
  '22023', null, '22023: a zero query vector, model named');

-- query_takes_name_path checks its query the same way.
select throws_ok(
  $$select payrail.query_takes_name_path('')$$,
  '22023', 'query is empty', 'query_takes_name_path: 22023 for an empty query');
select throws_ok(
  $$select payrail.query_takes_name_path('   ')$$,
  '22023', 'query is empty', 'query_takes_name_path: 22023 for a white-space-only query');
select throws_ok(
  $$select payrail.query_takes_name_path(null)$$,
  '22023', 'query is empty', 'query_takes_name_path: 22023 for a NULL query');
select throws_ok(
  $$select payrail.query_takes_name_path(repeat('x', 2001))$$,
  '22023', null, 'query_takes_name_path: 22023 for a 2001-character query');
select is(
  payrail.query_takes_name_path(repeat('x', 2000)), false,
  'query_takes_name_path: a 2000-character query is accepted');

-- PYE01: a query that is not a name needs a query embedding.
select throws_ok(
  $$select * from payrail.search_provider_methods('find a hotel')$$,
  'PYE01', 'this query is not a provider or method name, so it needs a query embedding',
  'PYE01: a non-name query without an embedding');
select throws_ok(
  $$select * from payrail.search_provider_methods('find a hotel', null, 'test-model')$$,
  'PYE01', null, 'PYE01: a model name alone is no embedding');
update payrail.provider_methods set enabled = false;
select throws_ok(
  $$select * from payrail.search_provider_methods('acme')$$,
  'PYE01', null, 'PYE01: the name of a disabled record is not a name (no silent empty answer)');
update payrail.provider_methods set enabled = true;
select results_eq(
  $$select provider, method from payrail.search_provider_methods('acme')$$,
  $$values ('Acme', 'Hotel Search')$$,
  'a name query needs no embedding');

-- PYE02: the query embedding is not from the registry's model.
select throws_ok(
  $$select * from payrail.search_provider_methods('find a hotel', '[1,0,0,0]')$$,
  'PYE02', 'query embedding is from model unnamed (4 dimensions), but the registry uses test-model (3 dimensions)',
  'PYE02: a query vector with more dimensions');
select throws_ok(
  $$select * from payrail.search_provider_methods('find a hotel', '[1,0]')$$,
  'PYE02', null, 'PYE02: a query vector with fewer dimensions');
select throws_ok(
  $$select * from payrail.search_provider_methods('find a hotel', '[1,0,0]', 'other-model')$$,
  'PYE02', 'query embedding is from model other-model (3 dimensions), but the registry uses test-model (3 dimensions)',
  'PYE02: a query_embedding_model other than the registry''s');
select throws_ok(
  $$select * from payrail.search_provider_methods('find a hotel', '[1,0,0]', 'TEST-MODEL')$$,
  'PYE02', null, 'PYE02: model names compare exactly');
select results_eq(
  $$select provider, method from payrail.search_provider_methods('find a hotel', '[1,0,0]', 'test-model')$$,
  $$values ('Acme', 'Hotel Search')$$,
  'the registry''s model name is accepted');
select throws_ok(
  $$select * from payrail.search_provider_methods('find a hotel', '[0,0,0,0]')$$,
  '22023', null, '22023: a zero vector is refused before its dimensions are compared, even with no model yet');

-- NaN and infinity never reach the search: pgvector refuses them as input with 22000 data_exception.
select throws_ok(
  $$select '[NaN,1,0]'::vector$$,
  '22000', 'NaN not allowed in vector', '22000: pgvector refuses a NaN element');
select throws_ok(
  $$select * from payrail.search_provider_methods('find a hotel', '[NaN,1,0]')$$,
  '22000', 'NaN not allowed in vector', '22000: a NaN query vector');
select throws_ok(
  $$select * from payrail.search_provider_methods('find a hotel', array['NaN', 1, 0]::real[]::vector)$$,
  '22000', 'NaN not allowed in vector', '22000: a NaN query vector cast from real[]');
select throws_ok(
  $$select * from payrail.search_provider_methods('find a hotel', '[Infinity,1,0]')$$,
  '22000', 'infinite value not allowed in vector', '22000: an infinite query vector');

select * from finish();
rollback;
