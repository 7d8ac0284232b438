-- payrail.list_provider_methods: the records list, its filters, its state rule (the one view's
-- has_current_vector), its pages in both directions, and its count.
begin;
select plan(10);
\ir include/error_of.sql

select payrail.set_embedding_model('test-model', 3);
insert into payrail.provider_methods (provider, method, guidance, enabled, embedding, embedding_model, embedding_content_hash)
values ('acme', 'Geocode', 'Turns addresses into coordinates.', true, '[1,0,0]', 'test-model',
        payrail._content_hash('acme', 'Geocode', 'Turns addresses into coordinates.')),
       ('Acme', 'Route', 'Plans routes.', false, '[0,1,0]', 'test-model', payrail._content_hash('Acme', 'Route', 'Plans routes.'));
insert into payrail.provider_methods (provider, method, urls, guidance)
values ('Beta', 'Lookup', '{https://beta.example/ACME}', 'Looks things up.'), ('Gamma', 'Pay', '{}', 'Pays.');

select results_eq(
  $$select provider, method, state, embedded, matching from payrail.list_provider_methods()$$,
  $$values ('acme', 'Geocode', 'enabled', true, null::bigint), ('Acme', 'Route', 'draft', true, null),
           ('Beta', 'Lookup', 'draft needing an embedding', false, null), ('Gamma', 'Pay', 'draft needing an embedding', false, null)$$,
  'whole list: by provider and method ignoring case, each with its state; no count');
select results_eq(
  $$select count(*)::int from payrail.list_provider_methods() as l
    join payrail.provider_method_states as s using (id)
    where l.embedded <> s.has_current_vector$$,
  $$values (0)$$,
  'state: a record''s vector is current by payrail.provider_method_states'' rule');
select results_eq(
  $$select provider, method, matching from payrail.list_provider_methods('ACME')$$,
  $$values ('acme', 'Geocode', 3::bigint), ('Acme', 'Route', 3), ('Beta', 'Lookup', 3)$$,
  'text: in any field (a URL too), ignoring case, counted');
select results_eq(
  $$select provider, matching from payrail.list_provider_methods('acme', 'draft needing an embedding')$$,
  $$values ('Beta', 1::bigint)$$,
  'state: a draft needing an embedding');
select results_eq(
  $$select provider from payrail.list_provider_methods(null, 'enabled')$$,
  $$values ('acme')$$,
  'state alone: enabled');
select results_eq(
  $$select provider, method from payrail.list_provider_methods(null, null, 2, 'acme', 'route', (select id from payrail.provider_methods where method = 'Route'))$$,
  $$values ('Beta', 'Lookup'), ('Gamma', 'Pay')$$,
  'a page after a cursor');
select results_eq(
  $$select provider, method from payrail.list_provider_methods(null, null, 2, 'gamma', 'pay', (select id from payrail.provider_methods where method = 'Pay'), true)$$,
  $$values ('Beta', 'Lookup'), ('Acme', 'Route')$$,
  'a page before a cursor, in reverse order');
select results_eq(
  $$select id, state, matching from payrail.list_provider_methods('acme', null, 2, 'zzz', 'zzz', 0)$$,
  $$values (null::bigint, null::text, 3::bigint)$$,
  'an empty filtered page: one row of NULLs but the count');
select results_eq(
  $$select e_sqlstate from pg_temp.error_of($q$select * from payrail.list_provider_methods(null, 'disabled')$q$)$$,
  $$values ('22023')$$,
  'state: another is refused');
set local role payrail_agent;
select throws_ok('select * from payrail.list_provider_methods()', '42501', null, 'agents cannot list records');
reset role;

select * from finish();
rollback;
