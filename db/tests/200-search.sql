-- payrail.search_provider_methods and payrail.query_takes_name_path (DESIGN.md, "Search").
begin;
select plan(38);

-- Before any embedding model is set there is no vector, so the semantic path has no answer.
select is_empty(
  $$select * from payrail.search_provider_methods('find cheap flights', '[1,0,0]')$$,
  'no registry model yet: the semantic path returns no rows');

-- PYE01's detail names the registry's model, so a client learns what to embed with from the name
-- path's answer alone (payrail_embedder's agent path reads it: tests/postgres/test_round_trips.py).
create function pg_temp.detail_of(p_sql text) returns text language plpgsql as $f$
declare
  v_detail text;
begin
  execute p_sql;
  return 'no error';
exception when others then
  get stacked diagnostics v_detail = pg_exception_detail;
  return v_detail;
end
$f$;
select is(pg_temp.detail_of($$select * from payrail.search_provider_methods('find cheap flights')$$),
          'The registry has no embedding model yet.', 'PYE01 before any model: its detail says there is none');

-- Fixtures. Vectors are chosen so cosine distances can be worked out by hand; for the query
-- [1,0,0] the exact order differs from the order by inner product or by L2 distance.
-- "beta" is stored in lower case so that its raw and its normalized
-- sort positions differ ("Acme" < "Globex" < "Pay" < "beta" byte-wise, but acme < beta < globex < pay).
select payrail.set_embedding_model('test-model', 3);
select is(pg_temp.detail_of($$select * from payrail.search_provider_methods('find cheap flights')$$),
          'The registry''s embedding model is test-model (3 dimensions).', 'PYE01: its detail names the registry''s model');
insert into payrail.provider_methods
  (provider, method, urls, docs_url, guidance, enabled, embedding, embedding_model, embedding_content_hash)
select f.provider, f.method, f.urls, f.docs_url, f.guidance, f.enabled, f.embedding::vector,
       case when f.embedding is not null then 'test-model' end,
       case when f.embedding is not null then payrail._content_hash(f.provider, f.method, f.guidance) end
from (values
  ('Acme',         'Flights',      '{}'::text[], null, 'Book flights.',   true,  '[1,0,0]'),
  ('Acme',         'Hotel Search', '{}',         null, 'Find hotels.',    true,  '[0,1,0]'),
  ('Acme',         'Pay',          '{}',         null, 'Pay Acme.',       true,  '[0,0,1]'),
  ('Acme',         'Weather',      '{}',         null, 'Get forecasts.',  true,  '[10,10,0]'),
  ('Globex',       'Pay',          '{}',         null, 'Pay Globex.',     true,  '[1,0,1]'),
  ('Pay',          'Invoices',     '{https://api.pay.example/v1/invoices,https://pay.example/pricing}',
                                   'https://docs.pay.example/invoices',
                                   E'Purpose: issue invoices.\nInstructions:\n\tPOST /v1/invoices.\nNotes: none.',
                                                                        true,  '[0,1,1]'),
  ('Hotel',        'Search',       '{}',         null, 'Search hotels.',  true,  '[1,1,1]'),
  ('beta',       'Pay',          '{}',         null, 'Pay beta.',       true,  '[0,-1,0]'),
  ('Hotel Search', 'Bookings',     '{}',         null, 'Book rooms.',     true,  '[0,0,-1]'),
  -- Disabled drafts: one sorts first among the "pay" methods and is nearest to [1,0,0].
  ('Aardvark',     'Pay',          '{}',         null, 'Pay Aardvark.',   false, '[1,0,0]'),
  ('Aardvark',     'Hotel Search', '{}',         null, 'Draft.',          false, null)
) as f(provider, method, urls, docs_url, guidance, enabled, embedding);

-- Name path: provider names; order by normalized method; at most 3.
select results_eq(
  $$select provider, method from payrail.search_provider_methods('acme')$$,
  $$values ('Acme', 'Flights'), ('Acme', 'Hotel Search'), ('Acme', 'Pay')$$,
  'name path: a provider name returns its first 3 methods by normalized method name');
-- Every match, in the same order, is what a golden query's wanted record is ranked in: search's
-- three are its first three, and Acme / Weather has rank 4 (payrail_embedder's wanted_ranks).
select results_eq(
  $$select m.provider, m.method, m.ordinality from rows from (payrail._name_path_matches('acme')) with ordinality as m$$,
  $$values ('Acme', 'Flights', 1::bigint), ('Acme', 'Hotel Search', 2), ('Acme', 'Pay', 3), ('Acme', 'Weather', 4)$$,
  'name path: _name_path_matches returns every match in search''s order, search the first 3');
select results_eq(
  $$select provider, method from payrail.search_provider_methods(E'  ACME \t')$$,
  $$values ('Acme', 'Flights'), ('Acme', 'Hotel Search'), ('Acme', 'Pay')$$,
  'name path: case and surrounding white space of the query do not matter');
select results_eq(
  $$select provider, method from payrail.search_provider_methods('BETA')$$,
  $$values ('beta', 'Pay')$$,
  'name path: stored names compare normalized too');

-- Name path: method names; a provider match comes before method matches; disabled records never.
select results_eq(
  $$select provider, method from payrail.search_provider_methods('pay')$$,
  $$values ('Pay', 'Invoices'), ('Acme', 'Pay'), ('beta', 'Pay')$$,
  'name path: provider match first, then method matches by normalized provider (drafts skipped)');
select results_eq(
  $$select provider, method from payrail.search_provider_methods('invoices')$$,
  $$values ('Pay', 'Invoices')$$,
  'name path: a method name alone');

-- Name path: "provider method" and "provider / method" pairs.
select results_eq(
  $$select provider, method from payrail.search_provider_methods('Acme Pay')$$,
  $$values ('Acme', 'Pay')$$,
  'name path: a "provider method" pair returns that record only');
select results_eq(
  $$select provider, method from payrail.search_provider_methods(E'acme\t  /   PAY ')$$,
  $$values ('Acme', 'Pay')$$,
  'name path: a "provider / method" pair, any case and spacing');
select results_eq(
  $$select provider, method from payrail.search_provider_methods('Hotel / Search')$$,
  $$values ('Hotel', 'Search')$$,
  'name path: the slash form matches the pair, not the method "Hotel Search"');

-- Name path order: pair matches, then provider matches, then method matches.
select results_eq(
  $$select provider, method from payrail.search_provider_methods('hotel search')$$,
  $$values ('Hotel', 'Search'), ('Hotel Search', 'Bookings'), ('Acme', 'Hotel Search')$$,
  'name path: pair match, then provider match, then method match');

-- Name path: the full row.
select results_eq(
  $$select * from payrail.search_provider_methods('Pay Invoices')$$,
  $$values ('Pay', 'Invoices',
            '{https://api.pay.example/v1/invoices,https://pay.example/pricing}'::text[],
            'https://docs.pay.example/invoices',
            E'Purpose: issue invoices.\nInstructions:\n\tPOST /v1/invoices.\nNotes: none.')$$,
  'name path: returns provider, method, urls, docs_url and guidance as stored');

-- The name path wins even when an embedding is passed.
select results_eq(
  $$select provider, method from payrail.search_provider_methods('acme', '[0,0,1]')$$,
  $$values ('Acme', 'Flights'), ('Acme', 'Hotel Search'), ('Acme', 'Pay')$$,
  'name path wins over a passed embedding');

-- query_takes_name_path tells, without any vector, whether a query takes the name path.
select is(payrail.query_takes_name_path('acme'), true, 'query_takes_name_path: a provider name');
select is(payrail.query_takes_name_path(' INVOICES '), true, 'query_takes_name_path: a method name');
select is(payrail.query_takes_name_path('acme  pay'), true, 'query_takes_name_path: a "provider method" pair');
select is(payrail.query_takes_name_path('Acme / Pay'), true, 'query_takes_name_path: a "provider / method" pair');
select is(payrail.query_takes_name_path('find cheap flights'), false, 'query_takes_name_path: a question is not a name');
select is(payrail.query_takes_name_path('aardvark'), false, 'query_takes_name_path: the name of a disabled record only is not a name');
select is(payrail.query_takes_name_path('acme/pay'), false, 'query_takes_name_path: a pair without the spaced slash is not a name');
select is(payrail.query_takes_name_path('acme pay now'), false, 'query_takes_name_path: a name with extra words is not a name');

-- Semantic path: exact cosine order over all enabled records; ties by normalized provider, then method.
-- Query [1,0,0]: Acme/Flights 0; Acme/Weather and Globex/Pay 1-1/sqrt(2) (tie); Hotel/Search 1-1/sqrt(3);
-- the five orthogonal records 1. The draft Aardvark/Pay (distance 0) never shows.
select results_eq(
  $$select provider, method from payrail.search_provider_methods('find cheap flights', '[1,0,0]')$$,
  $$values ('Acme', 'Flights'), ('Acme', 'Weather'), ('Globex', 'Pay')$$,
  'semantic path: nearest by cosine distance (not inner product, not L2), draft skipped, tie by provider');
-- Query [0,0,1]: Acme/Pay 0; Globex/Pay and Pay/Invoices 1-1/sqrt(2) (tie).
select results_eq(
  $$select provider, method from payrail.search_provider_methods('settle a bill', '[0,0,1]')$$,
  $$values ('Acme', 'Pay'), ('Globex', 'Pay'), ('Pay', 'Invoices')$$,
  'semantic path: a second query, tie broken by normalized provider');
select results_eq(
  $$select provider, method from payrail.search_provider_methods('settle a bill', '[0,0,5]')$$,
  $$values ('Acme', 'Pay'), ('Globex', 'Pay'), ('Pay', 'Invoices')$$,
  'semantic path: the length of the query vector does not matter');
-- Query [-1,0,0]: five records at exactly distance 1; normalized order is
-- acme/hotel search, acme/pay, beta/pay, hotel search/bookings, pay/invoices.
select results_eq(
  $$select provider, method from payrail.search_provider_methods('something else', '[-1,0,0]')$$,
  $$values ('Acme', 'Hotel Search'), ('Acme', 'Pay'), ('beta', 'Pay')$$,
  'semantic path: a five-way tie is broken by normalized provider, then normalized method');
-- Query [0,1,1]: Pay/Invoices 0; Hotel/Search 1-2/sqrt(6); Acme/Hotel Search and Acme/Pay 1-1/sqrt(2) (tie).
select results_eq(
  $$select * from payrail.search_provider_methods('issue an invoice', '[0,1,1]')$$,
  $$values ('Pay', 'Invoices',
            '{https://api.pay.example/v1/invoices,https://pay.example/pricing}'::text[],
            'https://docs.pay.example/invoices',
            E'Purpose: issue invoices.\nInstructions:\n\tPOST /v1/invoices.\nNotes: none.'),
           ('Hotel', 'Search', '{}'::text[], null, 'Search hotels.'),
           ('Acme', 'Hotel Search', '{}'::text[], null, 'Find hotels.')$$,
  'semantic path: returns the full rows, no score');
select is(
  (select count(*) from payrail.search_provider_methods('anything at all', '[0.3,-0.2,0.9]'))::int,
  3,
  'semantic path: at most 3 rows out of 9 enabled records');
select is_empty(
  $$select * from payrail.search_provider_methods('find cheap flights', '[1,0,0]') where provider = 'Aardvark'$$,
  'semantic path: the nearest record, a draft, is not returned');

-- Semantic path over ALL enabled records: disabling the first three reveals the next three, and so on,
-- following the full order for [1,0,0] worked out above.
update payrail.provider_methods set enabled = false
where (provider, method) in (('Acme', 'Flights'), ('Acme', 'Weather'), ('Globex', 'Pay'));
select results_eq(
  $$select provider, method from payrail.search_provider_methods('find cheap flights', '[1,0,0]')$$,
  $$values ('Hotel', 'Search'), ('Acme', 'Hotel Search'), ('Acme', 'Pay')$$,
  'semantic path: ranks 4-6 of the exact order once ranks 1-3 are disabled');
update payrail.provider_methods set enabled = false
where (provider, method) in (('Hotel', 'Search'), ('Acme', 'Hotel Search'), ('Acme', 'Pay'));
select results_eq(
  $$select provider, method from payrail.search_provider_methods('find cheap flights', '[1,0,0]')$$,
  $$values ('beta', 'Pay'), ('Hotel Search', 'Bookings'), ('Pay', 'Invoices')$$,
  'semantic path: ranks 7-9 of the exact order once ranks 1-6 are disabled');
update payrail.provider_methods set enabled = false where (provider, method) = ('beta', 'Pay');
select results_eq(
  $$select provider, method from payrail.search_provider_methods('find cheap flights', '[1,0,0]')$$,
  $$values ('Hotel Search', 'Bookings'), ('Pay', 'Invoices')$$,
  'semantic path: fewer than 3 enabled records give fewer rows');

-- Disabled records leave the name path too.
select is(payrail.query_takes_name_path('acme'), false, 'name path: a provider whose records are all disabled is no name');
select results_eq(
  $$select provider, method from payrail.search_provider_methods('pay')$$,
  $$values ('Pay', 'Invoices')$$,
  'name path: only the still-enabled match is returned');
select is_empty(
  $$select * from payrail.search_provider_methods('acme', '[1,0,0]') where provider = 'Acme'$$,
  'semantic path: once "acme" is no name, the semantic answer holds none of its disabled records');

-- With no enabled record at all the semantic path is empty, not an error.
update payrail.provider_methods set enabled = false;
select is_empty(
  $$select * from payrail.search_provider_methods('find cheap flights', '[1,0,0]')$$,
  'semantic path: no enabled record gives no rows');
select is(payrail.query_takes_name_path('pay invoices'), false, 'name path: nothing enabled, no name');

select * from finish();
rollback;
