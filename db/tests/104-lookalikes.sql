-- No record can pose as another: names and docs hosts compared by UTS #39's skeleton, mixed
-- scripts refused unless the operator says so, hosts in their ASCII (IDNA) form; attacked in
-- psql as an operator, every refusal in words that name the record imitated.
begin;
select plan(30);

insert into payrail.provider_methods (provider, method, docs_url, guidance)
values ('Stripe', 'Create charge', 'https://docs.stripe.com/api', 'Purpose: charge a card.'),
       ('PayPal', 'Orders', 'https://developer.paypal.com/docs', 'Purpose: orders.'),
       ('Café Maps', 'Geocode', null, 'Purpose: geocode.');

set local role payrail_operator;

-- The skeleton (UTS #39) of what the eye reads.
select is(payrail._lookalike_key('Strіpe'), payrail._lookalike_key('Stripe'), 'key: a Cyrillic і looks like i');
select is(payrail._lookalike_key('PayPaI'), payrail._lookalike_key('PayPal'), 'key: a capital I looks like l');
select is(payrail._lookalike_key('Ｓｔｒｉｐｅ'), payrail._lookalike_key('𝐒𝐭𝐫𝐢𝐩𝐞'), 'key: fullwidth and mathematical letters look like theirs');
select isnt(payrail._lookalike_key('Stripe 2'), payrail._lookalike_key('Stripe 3'), 'key: different digits look different');
-- Names compare ignoring case: OpenAL is the name OpenAl, which reads as OpenAI.
select is(payrail._lookalike_key('OpenAL'), payrail._lookalike_key('OpenAI'), 'key: case is ignored after the skeleton, as names compare');

-- Look-alikes of an existing record's provider, method and docs host are refused, naming it.
select throws_ok(
  $$insert into payrail.provider_methods (provider, method, guidance, mixed_scripts) values ('Strіpe', 'Payout', 'G.', true)$$,
  '23514',
  -- The fixtures are this test's own transaction's: a record a reader could not look up by id.
  'provider "Strіpe" looks like the provider of another record of this same change (another line of the same file), "Stripe / Create charge", without being the same: they differ only in characters that look alike',
  'provider: a Cyrillic lookalike of Stripe is refused, naming the record it imitates, even with mixed scripts allowed');
select throws_like(
  $$insert into payrail.provider_methods (provider, method, guidance) values ('PayPaI', 'Payouts', 'G.')$$,
  '%looks like the provider of % "PayPal / Orders"%',
  'provider: PayPaI (a capital I for the l) is refused');
select throws_like(
  $$insert into payrail.provider_methods (provider, method, guidance) values ('ＰａｙＰａＩ', 'Payouts', 'G.')$$,
  '%looks like the provider of % "PayPal / Orders"%',
  'provider: its fullwidth form is refused too');
select throws_like(
  $$insert into payrail.provider_methods (provider, method, guidance, mixed_scripts) values ('Cafе́ Maps', 'Route', 'G.', true)$$,
  '%looks like the provider of % "Café Maps / Geocode"%',
  'provider: a Cyrillic е under a combining accent looks like é, and is refused');
select throws_like(
  $$insert into payrail.provider_methods (provider, method, guidance, mixed_scripts) values ('Acme', 'Create chаrge', 'G.', true)$$,
  '%method "Create chаrge" looks like the method of % "Stripe / Create charge"%',
  'method: a Cyrillic а in another provider''s method is refused');
select throws_like(
  $$update payrail.provider_methods set provider = 'Strlpe' || chr(1110) where provider = 'PayPal'$$,
  '%',
  'provider: an update can pose as another record no more than an insert');
select lives_ok(
  $$insert into payrail.provider_methods (provider, method, guidance) values ('STRIPE', 'Refund', 'G.')$$,
  'provider: the same name in another case is the same provider, not a lookalike');
select lives_ok(
  $$insert into payrail.provider_methods (provider, method, guidance) values ('Stripes', 'Charge', 'G.')$$,
  'provider: a name that looks different is accepted');

-- Mixed scripts: refused in words, unless the operator says the name mixes them on purpose.
select throws_ok(
  $$insert into payrail.provider_methods (provider, method, guidance) values ('Ѕquare', 'Terminal', 'G.')$$,
  '23514', 'new row for relation "provider_methods" violates check constraint "provider_methods_scripts_check"',
  'scripts: a Cyrillic Ѕ among Latin letters is refused');
select is(
  (select rule from payrail.check_provider_method(null, 'Ѕquare', 'Terminal', '{}', null, 'G.')
   where constraint_name = 'provider_methods_scripts_check'),
  (select rule from payrail.rules where constraint_name = 'provider_methods_scripts_check')
    || ' ("Ѕquare" is Cyrillic, Latin; "Terminal" is Latin)',
  'scripts: the words say which scripts the name mixes');
select lives_ok(
  $$insert into payrail.provider_methods (provider, method, guidance) values ('楽天 Pay', 'Checkout', 'G.')$$,
  'scripts: Latin with Japanese is accepted without a word (UTS #39 Highly Restrictive)');
select lives_ok(
  $$insert into payrail.provider_methods (provider, method, guidance) values ('Яндекс', 'Карты', 'G.')$$,
  'scripts: a name of one script other than Latin is accepted');
select lives_ok(
  $$insert into payrail.provider_methods (provider, method, guidance, mixed_scripts) values ('Ѕquare', 'Terminal', 'G.', true)$$,
  'scripts: accepted once the operator says the name mixes scripts on purpose');
select lives_ok(
  $$update payrail.provider_methods set mixed_scripts = false, provider = 'Square' where provider = 'Ѕquare'$$,
  'scripts: taking the word back with a name of one script is accepted');
select is(
  (select array[mixed_scripts::text, provider] from payrail.provider_method_history
   where operation = 'update' order by id desc limit 1),
  array['true', 'Ѕquare'],
  'scripts: the history keeps the version that had the operator''s word');

-- Hosts: stored and compared in their ASCII (IDNA) form.
select throws_ok(
  $$insert into payrail.provider_methods (provider, method, guidance, docs_url) values ('Bücher', 'Search', 'G.', 'https://bücher.example/api')$$,
  '23514', 'new row for relation "provider_methods" violates check constraint "provider_methods_docs_url_ascii_host_check"',
  'hosts: a docs host in Unicode is refused in SQL');
select throws_ok(
  $$insert into payrail.provider_methods (provider, method, guidance, urls) values ('Bücher', 'Search', 'G.', '{https://b%C3%BCcher.example/}')$$,
  '23514', 'new row for relation "provider_methods" violates check constraint "provider_methods_urls_ascii_host_check"',
  'hosts: a percent-escaped host, which browsers decode, is refused');
select lives_ok(
  $$insert into payrail.provider_methods (provider, method, guidance, docs_url, urls)
    values ('Bücher', 'Search', 'G.', 'https://xn--bcher-kva.example/api', '{https://[2001:db8::1]:8443/v1}')$$,
  'hosts: the xn-- form and an IPv6 address are accepted');
select throws_like(
  $$insert into payrail.provider_methods (provider, method, guidance, docs_url) values ('Acme', 'Docs', 'G.', 'https://docs.xn--strpe-p2e.com/api')$$,
  '%docs host of % "Stripe / Create charge" (docs.stripe.com, and this one is docs.xn--strpe-p2e.com)%',
  'hosts: a Punycode docs host that reads docs.strіpe.com is refused, naming the record');
select throws_like(
  $$insert into payrail.provider_methods (provider, method, guidance, docs_url) values ('Acme', 'Docs', 'G.', 'https://developer.paypa1.com/docs')$$,
  '%docs host of % "PayPal / Orders"%',
  'hosts: an ASCII docs host with a digit 1 for the l is refused');
select lives_ok(
  $$insert into payrail.provider_methods (provider, method, guidance, docs_url) values ('Stripe', 'Refunds', 'G.', 'https://DOCS.stripe.com/refunds')$$,
  'hosts: the same host (any case, another path) is no lookalike');

-- Every rule a record breaks, in one call, with the record it imitates.
select results_eq(
  $$select constraint_name from payrail.check_provider_method(null, 'Strіpe', 'Create chаrge', '{}', 'https://docs.xn--strpe-p2e.com/', 'G.', true)
    order by 1$$,
  $$values ('provider_methods_docs_url_lookalike_check'), ('provider_methods_method_lookalike_check'), ('provider_methods_provider_lookalike_check')$$,
  'check: the provider, method and docs host lookalikes all at once');
select is(
  (select rule from payrail.check_provider_method(
     (select id from payrail.provider_methods where provider = 'Stripe' and method = 'Create charge'),
     'Stripe', 'Create charge', '{}', 'https://docs.stripe.com/api', 'G.')),
  null,
  'check: a record does not imitate itself');

-- A registry that held look-alikes before the rule lists them.
reset role;
alter table payrail.provider_methods disable trigger tg_provider_methods__refuse_lookalikes;
insert into payrail.provider_methods (provider, method, guidance) values ('Paypa1', 'Old', 'G.');
alter table payrail.provider_methods enable trigger tg_provider_methods__refuse_lookalikes;
set local role payrail_operator;
select results_eq(
  $$select field, looks_like_record_id from payrail.find_lookalikes()
    where record_id = (select id from payrail.provider_methods where provider = 'Paypa1')$$,
  $$values ('provider', (select id from payrail.provider_methods where provider = 'PayPal'))$$,
  'find_lookalikes: a look-alike stored before the rule is listed with the record it looks like');
select lives_ok(
  $$update payrail.provider_methods set guidance = 'New.' where provider = 'Paypa1'$$,
  'an old look-alike can still be edited (its names unchanged) until it is renamed');

select * from finish();
rollback;
