-- Field rules of payrail.provider_methods (DESIGN.md, "One record = one provider method"):
-- every rule is a named constraint, so the error message names the rule that broke.
begin;
select plan(94);

-- The exact message PostgreSQL gives for a check violation on provider_methods.
create function pg_temp.violates(p_constraint text)
returns text
language sql
immutable
return format('new row for relation "provider_methods" violates check constraint "%s"', p_constraint);

-- Every field rule exists under its documented name.
select results_eq(
  $$select conname::text collate "default" from pg_constraint
    where conrelid = 'payrail.provider_methods'::regclass and contype = 'c' order by 1$$,
  $$values ('provider_methods_docs_url_ascii_host_check'), ('provider_methods_docs_url_check'),
           ('provider_methods_embedding_content_check'),
           ('provider_methods_embedding_model_check'), ('provider_methods_embedding_nonzero_check'),
           ('provider_methods_enabled_needs_embedding_check'), ('provider_methods_guidance_characters_check'),
           ('provider_methods_guidance_length_check'), ('provider_methods_method_check'),
           ('provider_methods_provider_check'), ('provider_methods_scripts_check'), ('provider_methods_source_check'),
           ('provider_methods_urls_ascii_host_check'), ('provider_methods_urls_count_check'),
           ('provider_methods_urls_https_check'), ('provider_methods_urls_unique_check'),
           ('provider_methods_version_check')$$,
  'provider_methods has one named check constraint per rule');
select index_is_unique('payrail', 'provider_methods', 'provider_methods_provider_method_key',
  'provider_methods_provider_method_key is a unique index');

-- provider and method: 1..120 characters after trimming, no control characters.
-- Each bad value is tried as the provider (method 'Pay') and as the method (provider 'Acme').
select throws_ok(
  format('insert into payrail.provider_methods (provider, method, guidance) values (%L, %L, %L)',
         case when c.col = 'provider' then v.value else 'Acme' end,
         case when c.col = 'method' then v.value else 'Pay' end,
         'Guidance.'),
  '23514', pg_temp.violates('provider_methods_' || c.col || '_check'),
  c.col || ': ' || v.label || ' is refused')
from (values (1, 'provider'), (2, 'method')) as c(n, col)
cross join (values
  (1, 'empty', ''),
  (2, 'white space only', '   '),
  (3, 'tab and newline only', E'\t\n'),
  (4, 'U+0001', E'Acme\x01'),
  (5, 'U+007F (DEL)', E'Acme\x7f'),
  (6, 'U+0085 (NEL)', E'Acme\u0085'),
  (7, 'a tab inside', E'Acme\tPay'),
  (8, 'a newline inside', E'Acme\nPay'),
  (9, 'a carriage return at the end', E'Acme\r'),
  (10, '121 characters', repeat('n', 121)),
  (11, '121 characters between spaces', '  ' || repeat('n', 121) || '  ')
) as v(n, label, value)
order by c.n, v.n;

select lives_ok(
  format('insert into payrail.provider_methods (provider, method, guidance) values (%L, %L, %L)',
         case when c.col = 'provider' then v.value else 'Acme' end,
         case when c.col = 'method' then v.value else 'Pay' end,
         'Guidance.'),
  c.col || ': ' || v.label || ' is accepted')
from (values (1, 'provider'), (2, 'method')) as c(n, col)
cross join (values
  (1, 'one character', 'A'),
  (2, 'exactly 120 characters', repeat('n', 120)),
  (3, '120 characters between spaces (counted after trimming)', '  ' || repeat('p', 120) || '  '),
  (4, '120 two-byte characters (characters, not bytes)', repeat('é', 120))
) as v(n, label, value)
order by c.n, v.n;

-- guidance: 1..8000 characters with something visible; newline and tab are the only controls allowed.
select throws_ok(
  format('insert into payrail.provider_methods (provider, method, guidance) values (%L, %L, %L)',
         'Acme', 'Guidance ' || v.n, v.value),
  '23514', pg_temp.violates(v.rule),
  'guidance: ' || v.label || ' is refused by ' || v.rule)
from (values
  (1, 'empty', '', 'provider_methods_guidance_length_check'),
  (2, 'white space only', '   ', 'provider_methods_guidance_length_check'),
  (3, 'newlines and tabs only', E'\n\t\n', 'provider_methods_guidance_length_check'),
  (4, '8001 characters', repeat('g', 8001), 'provider_methods_guidance_length_check'),
  (5, 'a carriage return', E'Purpose\r\nInstructions', 'provider_methods_guidance_characters_check'),
  (6, 'U+0001', E'Purpose\x01', 'provider_methods_guidance_characters_check'),
  (7, 'a vertical tab', E'Purpose\x0bNotes', 'provider_methods_guidance_characters_check'),
  (8, 'a form feed', E'Purpose\x0cNotes', 'provider_methods_guidance_characters_check'),
  (9, 'an escape (U+001B)', E'Purpose\x1b[31m', 'provider_methods_guidance_characters_check'),
  (10, 'U+007F (DEL)', E'Purpose\x7f', 'provider_methods_guidance_characters_check'),
  (11, 'U+0085 (NEL)', E'Purpose\u0085Notes', 'provider_methods_guidance_characters_check')
) as v(n, label, value, rule)
order by v.n;

select lives_ok(
  format('insert into payrail.provider_methods (provider, method, guidance) values (%L, %L, %L)',
         'Acme', 'Guidance ok ' || v.n, v.value),
  'guidance: ' || v.label || ' is accepted')
from (values
  (1, 'one character', 'x'),
  (2, 'exactly 8000 characters', repeat('g', 8000)),
  (3, '8000 two-byte characters (characters, not bytes)', repeat('é', 8000)),
  (4, 'newlines and tabs (the template)', E'Purpose: find hotels.\nInstructions:\n\t1. Read the docs.\nNotes: none.')
) as v(n, label, value)
order by v.n;

-- urls: 0..10 absolute https:// URLs, each at most 2048 characters, no white space, no duplicates, no NULL.
select throws_ok(
  format('insert into payrail.provider_methods (provider, method, guidance, urls) values (%L, %L, %L, %L::text[])',
         'Acme', 'Urls ' || v.n, 'Guidance.', v.value),
  '23514', pg_temp.violates(v.rule),
  'urls: ' || v.label || ' is refused by ' || v.rule)
from (values
  (1, 'an http:// URL', array['http://api.example.com/v1'], 'provider_methods_urls_https_check'),
  (2, 'a relative URL', array['/v1/hotels'], 'provider_methods_urls_https_check'),
  (3, 'a URL without scheme', array['api.example.com/v1'], 'provider_methods_urls_https_check'),
  (4, 'a javascript: URL', array['javascript:alert(1)'], 'provider_methods_urls_https_check'),
  (5, 'https:// without a host', array['https:///v1'], 'provider_methods_urls_https_check'),
  (6, 'a URL with a space', array['https://api.example.com/hotel search'], 'provider_methods_urls_https_check'),
  (7, 'a URL with a tab', array[E'https://api.example.com/\tv1'], 'provider_methods_urls_https_check'),
  (8, 'a URL with a trailing newline', array[E'https://api.example.com/v1\n'], 'provider_methods_urls_https_check'),
  (9, 'an empty string', array[''], 'provider_methods_urls_https_check'),
  (10, 'a URL of 2049 characters', array['https://example.com/' || repeat('a', 2029)], 'provider_methods_urls_https_check'),
  (11, 'a NULL element', array['https://api.example.com/v1', null], 'provider_methods_urls_https_check'),
  (12, 'one bad URL among good ones', array['https://a.example.com', 'ftp://b.example.com'], 'provider_methods_urls_https_check'),
  (13, '11 URLs', array(select 'https://example.com/' || i from generate_series(1, 11) as i), 'provider_methods_urls_count_check'),
  (14, 'a two-dimensional array', '{{https://a.example.com},{https://b.example.com}}'::text[], 'provider_methods_urls_count_check'),
  (15, 'a duplicate URL', array['https://a.example.com', 'https://b.example.com', 'https://a.example.com'], 'provider_methods_urls_unique_check'),
  (16, 'user info (the host is evil.example)', array['https://docs.example@evil.example/'], 'provider_methods_urls_https_check'),
  (17, 'user and password', array['https://user:secret@api.example.com/v1'], 'provider_methods_urls_https_check')
) as v(n, label, value, rule)
order by v.n;

select lives_ok(
  format('insert into payrail.provider_methods (provider, method, guidance, urls) values (%L, %L, %L, %L::text[])',
         'Acme', 'Urls ok ' || v.n, 'Guidance.', v.value),
  'urls: ' || v.label || ' is accepted')
from (values
  (1, 'no URL at all', '{}'::text[]),
  (2, 'exactly 10 URLs', array(select 'https://example.com/' || i from generate_series(1, 10) as i)),
  (3, 'a URL of exactly 2048 characters', array['https://example.com/' || repeat('a', 2028)]),
  (4, 'URLs with port, path, query and fragment', array['https://api.example.com:8443/v1/hotels?city=Paris#avail'])
) as v(n, label, value)
order by v.n;
select is(
  (select char_length(urls[1]) from payrail.provider_methods where method = 'Urls ok 3'),
  2048,
  'urls: the 2048-character URL is stored whole');

-- docs_url: NULL or one absolute https:// URL.
select lives_ok(
  $$insert into payrail.provider_methods (provider, method, guidance, docs_url) values ('Acme', 'Docs null', 'Guidance.', null)$$,
  'docs_url: NULL is accepted');
select lives_ok(
  $$insert into payrail.provider_methods (provider, method, guidance, docs_url)
    values ('Acme', 'Docs https', 'Guidance.', 'https://docs.example.com/hotels')$$,
  'docs_url: an https:// URL is accepted');
select throws_ok(
  $$insert into payrail.provider_methods (provider, method, guidance, docs_url)
    values ('Acme', 'Docs http', 'Guidance.', 'http://docs.example.com/hotels')$$,
  '23514', pg_temp.violates('provider_methods_docs_url_check'),
  'docs_url: an http:// URL is refused');
select throws_ok(
  $$insert into payrail.provider_methods (provider, method, guidance, docs_url)
    values ('Acme', 'Docs relative', 'Guidance.', '/docs/hotels')$$,
  '23514', pg_temp.violates('provider_methods_docs_url_check'),
  'docs_url: a relative URL is refused');
select throws_ok(
  $$insert into payrail.provider_methods (provider, method, guidance, docs_url)
    values ('Acme', 'Docs space', 'Guidance.', 'https://docs.example.com/hotel search')$$,
  '23514', pg_temp.violates('provider_methods_docs_url_check'),
  'docs_url: a URL with a space is refused');
select throws_ok(
  $$update payrail.provider_methods set docs_url = 'javascript:alert(1)' where method = 'Docs https'$$,
  '23514', pg_temp.violates('provider_methods_docs_url_check'),
  'docs_url: an update to a javascript: URL is refused too');

-- (provider, method) is unique ignoring case and runs of white space.
select lives_ok(
  $$insert into payrail.provider_methods (provider, method, guidance) values ('Globex Travel', 'Hotel Search', 'Guidance.')$$,
  'unique: the first Globex Travel / Hotel Search is accepted');
select throws_ok(
  $$insert into payrail.provider_methods (provider, method, guidance) values ('Globex Travel', 'Hotel Search', 'Other guidance.')$$,
  '23505', 'duplicate key value violates unique constraint "provider_methods_provider_method_key"',
  'unique: the same pair again is refused');
select throws_ok(
  $$insert into payrail.provider_methods (provider, method, guidance) values ('GLOBEX TRAVEL', 'hotel search', 'Guidance.')$$,
  '23505', 'duplicate key value violates unique constraint "provider_methods_provider_method_key"',
  'unique: the pair in another case is refused');
select throws_ok(
  $$insert into payrail.provider_methods (provider, method, guidance) values ('  globex   travel ', ' Hotel    Search', 'Guidance.')$$,
  '23505', 'duplicate key value violates unique constraint "provider_methods_provider_method_key"',
  'unique: the pair with extra and surrounding spaces is refused');
select lives_ok(
  $$insert into payrail.provider_methods (provider, method, guidance) values ('Globex Travel', 'Hotel Search Pro', 'Guidance.')$$,
  'unique: another method of the same provider is accepted');
select lives_ok(
  $$insert into payrail.provider_methods (provider, method, guidance) values ('Globex', 'Travel Hotel Search', 'Guidance.')$$,
  'unique: the same words split differently between provider and method are another pair');
select lives_ok(
  $$insert into payrail.provider_methods (provider, method, guidance) values ('Initech', 'Hotel Search', 'Guidance.')$$,
  'unique: the same method of another provider is accepted');
select throws_ok(
  $$update payrail.provider_methods set provider = 'GLOBEX  travel' where provider = 'Initech'$$,
  '23505', 'duplicate key value violates unique constraint "provider_methods_provider_method_key"',
  'unique: an update of the provider onto an existing pair is refused');
select throws_ok(
  $$update payrail.provider_methods set method = 'HOTEL SEARCH' where method = 'Hotel Search Pro'$$,
  '23505', 'duplicate key value violates unique constraint "provider_methods_provider_method_key"',
  'unique: an update of the method onto an existing pair is refused');

-- source: where the record came from, in words; 'psql' for a write that names none.
select is(
  (select source from payrail.provider_methods where provider = 'Initech'),
  'psql',
  'source: an INSERT that names none says psql (the column''s default)');
select lives_ok(
  $$insert into payrail.provider_methods (provider, method, guidance, source) values ('Source Test', 'Longest', 'G.', repeat('s', 255))$$,
  'source: 255 characters are accepted');
select lives_ok(
  $$insert into payrail.provider_methods (provider, method, guidance, source) values ('Source Test', 'Words', 'G.', 'Katalog März 2026.jsonl')$$,
  'source: a file name with spaces and letters of any language is accepted');
select throws_ok(
  $$insert into payrail.provider_methods (provider, method, guidance, source) values ('Source Test', 'Long', 'G.', repeat('s', 256))$$,
  '23514', pg_temp.violates('provider_methods_source_check'), 'source: 256 characters are refused');
select throws_ok(
  $$insert into payrail.provider_methods (provider, method, guidance, source) values ('Source Test', 'Empty', 'G.', '')$$,
  '23514', pg_temp.violates('provider_methods_source_check'), 'source: an empty one is refused');
select throws_ok(
  $$insert into payrail.provider_methods (provider, method, guidance, source) values ('Source Test', 'Padded', 'G.', ' bulk.jsonl')$$,
  '23514', pg_temp.violates('provider_methods_source_check'), 'source: white space at its start is refused');
select throws_ok(
  $$insert into payrail.provider_methods (provider, method, guidance, source) values ('Source Test', 'Ideographic', 'G.', E'bulk.jsonl\u3000')$$,
  '23514', pg_temp.violates('provider_methods_source_check'), 'source: Unicode white space at its end is refused');
select throws_ok(
  $$insert into payrail.provider_methods (provider, method, guidance, source) values ('Source Test', 'Escape', 'G.', E'bulk\u001b[31m.jsonl')$$,
  '23514', pg_temp.violates('provider_methods_source_check'), 'source: a control character (a terminal escape) is refused');
select throws_ok(
  $$insert into payrail.provider_methods (provider, method, guidance, source) values ('Source Test', 'Bidi', 'G.', E'curated\u202e.jsonl')$$,
  '23514', pg_temp.violates('provider_methods_source_check'), 'source: an invisible character (a bidi override) is refused');
select throws_ok(
  $$update payrail.provider_methods set source = null where provider = 'Initech'$$,
  '23502', null, 'source: NULL is refused');

select * from finish();
rollback;
