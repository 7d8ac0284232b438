-- The rules in words (payrail.rules) and payrail.check_provider_method: every rule a record breaks,
-- all at once, each with its fields, its words and what to do.
begin;
select plan(15);

-- Every constraint, the unique index and the lookalike trigger's rules of provider_methods have
-- their words, and no words name a rule that does not exist.
select set_eq(
  $$select constraint_name from payrail.rules$$,
  $$select c.conname::text from pg_catalog.pg_constraint as c
    where c.conrelid = 'payrail.provider_methods'::regclass and c.contype = 'c'
    union all select 'provider_methods_provider_method_key'
    union all select payrail._lookalike_constraint(f) from unnest(array['provider', 'method', 'docs_url']) as f$$,
  'rules: one row of words for each rule of provider_methods');
select is_empty(
  $$select constraint_name from payrail.rules where rule = '' or remedy = '' or rule ~ 'violates'$$,
  'rules: each says the rule and what to do, never PostgreSQL''s constraint text');

-- A record that breaks nothing.
select is_empty(
  $$select * from payrail.check_provider_method(null, 'Acme', 'Geocode', '{https://api.acme.example}', 'https://docs.acme.example', 'Purpose: geocode.')$$,
  'check: a record that breaks no rule gives no row');

-- Four fields wrong at once: each rule says so, each once, in one call.
select results_eq(
  $$select constraint_name, fields from payrail.check_provider_method(
      null, repeat('x', 121), 'Geocode', '{http://api.acme.example,http://api.acme.example}', 'ftp://docs.acme.example', ' ')
    order by constraint_name$$,
  $$values ('provider_methods_docs_url_check', '{docs_url}'::text[]),
           ('provider_methods_guidance_length_check', '{guidance}'::text[]),
           ('provider_methods_provider_check', '{provider}'::text[]),
           ('provider_methods_urls_https_check', '{urls}'::text[]),
           ('provider_methods_urls_unique_check', '{urls}'::text[])$$,
  'check: every rule a record breaks, all at once');
select is(
  (select rule || ' ' || remedy from payrail.check_provider_method(null, 'Acme', 'Geocode', '{}', 'http://docs.acme.example', 'G.')),
  (select rule || ' ' || remedy from payrail.rules where constraint_name = 'provider_methods_docs_url_check'),
  'check: a broken rule comes with its words from payrail.rules');

-- A refusal of a URL list names the entries that break it, and only those.
select is(
  (select rule from payrail.check_provider_method(null, 'Acme', 'Geocode',
     '{https://api.acme.example,http://old.acme.example,https://ok.acme.example}', null, 'G.')),
  (select rule from payrail.rules where constraint_name = 'provider_methods_urls_https_check')
    || '; not so: "http://old.acme.example"',
  'check: a refused URL list says which URL breaks the rule');
select is(
  (select rule from payrail.check_provider_method(null, 'Acme', 'Geocode',
     '{https://a.example,https://b.example,https://a.example}', null, 'G.')),
  'must not list the same URL twice; listed twice: "https://a.example"',
  'check: a URL listed twice is named');
select is(
  (select rule from payrail.check_provider_method(null, 'Acme', 'Geocode',
     array['ftp://1', 'ftp://2', E'ftp://3\u0007', 'ftp://4', 'ftp://5', 'ftp://6', 'ftp://7'], null, 'G.')
   where constraint_name = 'provider_methods_urls_https_check'),
  (select rule from payrail.rules where constraint_name = 'provider_methods_urls_https_check')
    || '; not so: "ftp://1", "ftp://2", "ftp://3\u0007", "ftp://4", "ftp://5" and 2 more',
  'check: at most five URLs are named, quoted with their control characters escaped');

-- Names as they are stored: trimmed spaces are no problem, a name taken by another record is.
insert into payrail.provider_methods (provider, method, guidance) values ('Acme', 'Geocode', 'Purpose: geocode.');
select results_eq(
  $$select constraint_name, fields from payrail.check_provider_method(null, '  ACME ', 'geocode', '{}', null, 'G.')$$,
  $$values ('provider_methods_provider_method_key', '{provider,method}'::text[])$$,
  'check: a new record may not take the name of another, compared as the unique key compares');
select is(
  (select rule from payrail.check_provider_method(null, '  ACME ', 'geocode', '{}', null, 'G.')),
  (select rule from payrail.rules where constraint_name = 'provider_methods_provider_method_key')
    || ': another record of this same change (another line of the same file), "Acme / Geocode"',
  'check: a taken name names the record that holds it (here written by the same transaction)');
select is_empty(
  format($$select * from payrail.check_provider_method(%s, 'ACME', 'Geocode', '{}', null, 'G.')$$,
         (select id from payrail.provider_methods where provider = 'Acme')),
  'check: a record keeps its own name');

-- It writes nothing.
select is((select count(*)::int from payrail.provider_methods), 1, 'check: nothing is written');

-- Operators may ask; agents may not, nor read the rules.
set local role payrail_operator;
select lives_ok(
  $$select * from payrail.check_provider_method(null, 'A', 'B', '{}', null, 'G.')$$,
  'operator: can check a record');
select ok(
  (select rule from payrail.check_provider_method(null, 'A', 'B', '{http://x.example}', null, 'G.')) like '%not so: "http://x.example"',
  'operator: the refusal names the URL for an operator too');
reset role;
set local role payrail_agent;
select throws_ok($$select * from payrail.check_provider_method(null, 'A', 'B', '{}', null, 'G.')$$, '42501', null,
  'agent: cannot call check_provider_method');
reset role;

select * from finish();
rollback;
