-- payrail.preview_search: what search would answer with one draft counted as enabled, through the
-- same helper as search_provider_methods (so the same paths, order and errors), changing nothing.
begin;
select plan(24);

select payrail.set_embedding_model('test-model', 3);
insert into payrail.provider_methods (provider, method, guidance, enabled, embedding, embedding_model, embedding_content_hash)
select f.provider, f.method, f.guidance, f.enabled, f.embedding::vector,
       case when f.embedding is not null then 'test-model' end,
       case when f.embedding is not null then payrail._content_hash(f.provider, f.method, f.guidance) end
from (values
  ('Acme',    'Hotel Search', 'Find hotels.',    true,  '[1,0.5,0]'),
  ('Globex',  'Flights',      'Find flights.',   true,  '[0,1,0]'),
  ('Initech', 'Weather',      'Get forecasts.',  true,  '[0,0,1]'),
  ('Umbrella','Rooms',        'Room rates.',     true,  '[0.5,0.5,0]'),
  -- Nearest of all to the hotel query below, but a draft.
  ('Draftco', 'Hotel Search', 'Find hotels now.', false, '[1,0,0]'),
  ('Draftco', 'Unembedded',   'No vector yet.',   false, null)
) as f(provider, method, guidance, enabled, embedding);

-- What search answers once the draft is really enabled, then the draft again.
create temporary table enabled_answer as select 1 as query_id, 0 as position, ''::text as provider, ''::text as method with no data;
update payrail.provider_methods set enabled = true where provider = 'Draftco' and method = 'Hotel Search';
insert into enabled_answer
select 1, row_number() over (), s.provider, s.method from payrail.search_provider_methods('find a hotel', '[1,0.1,0]') as s;
insert into enabled_answer
select 2, row_number() over (), s.provider, s.method from payrail.search_provider_methods('hotel search') as s;
insert into enabled_answer
select 3, row_number() over (), s.provider, s.method from payrail.search_provider_methods('Draftco') as s;
update payrail.provider_methods set enabled = false where provider = 'Draftco' and method = 'Hotel Search';
grant select on enabled_answer to public;

-- Semantic path.
select results_eq(
  $$select provider, method from payrail.preview_search('Draftco', 'Hotel Search', 'find a hotel', '[1,0.1,0]')$$,
  $$select provider, method from enabled_answer where query_id = 1 order by position$$,
  'semantic path: preview equals what search answers with the draft enabled');
select results_eq(
  $$select provider, method from payrail.preview_search('Draftco', 'Hotel Search', 'find a hotel', '[1,0.1,0]')$$,
  $$values ('Draftco', 'Hotel Search'), ('Acme', 'Hotel Search'), ('Umbrella', 'Rooms')$$,
  'semantic path: the draft takes its place by cosine distance');
select results_eq(
  $$select provider, method from payrail.preview_search('Draftco', 'Hotel Search', 'find a hotel', '[1,0.1,0]', 'test-model')$$,
  $$select provider, method from enabled_answer where query_id = 1 order by position$$,
  'semantic path: the model name may be passed, as to search');
select results_eq(
  $$select provider, method, urls, docs_url, guidance
    from payrail.preview_search('Draftco', 'Hotel Search', 'find a hotel', '[1,0.1,0]') limit 1$$,
  $$select provider, method, urls, docs_url, guidance from payrail.provider_methods
    where provider = 'Draftco' and method = 'Hotel Search'$$,
  'semantic path: the draft comes back with its public fields, as search would show it');

-- Name path: the draft's names count too, in the documented order.
select results_eq(
  $$select provider, method from payrail.preview_search('Draftco', 'Hotel Search', 'hotel search')$$,
  $$select provider, method from enabled_answer where query_id = 2 order by position$$,
  'name path: preview equals search with the draft enabled (method name match)');
select results_eq(
  $$select provider, method from payrail.preview_search('Draftco', 'Hotel Search', 'Draftco')$$,
  $$select provider, method from enabled_answer where query_id = 3 order by position$$,
  'name path: the draft''s provider name becomes a name');
select results_eq(
  $$select provider, method from payrail.preview_search('Draftco', 'Hotel Search', 'Draftco')$$,
  $$values ('Draftco', 'Hotel Search')$$,
  'name path: ... and only the previewed draft counts, not the other draft of that provider');
select results_eq(
  $$select provider, method from payrail.preview_search('  draftco ', 'HOTEL   search', 'find a hotel', '[1,0.1,0]') limit 1$$,
  $$values ('Draftco', 'Hotel Search')$$,
  'the draft is named ignoring case and runs of white space');

-- An enabled record: the answer is search's own.
select results_eq(
  $$select provider, method from payrail.preview_search('Globex', 'Flights', 'find a hotel', '[1,0.1,0]')$$,
  $$select provider, method from payrail.search_provider_methods('find a hotel', '[1,0.1,0]')$$,
  'an enabled record previews as plain search');

-- Nothing changed: search still does not see the draft.
select results_eq(
  $$select provider, method from payrail.search_provider_methods('find a hotel', '[1,0.1,0]')$$,
  $$values ('Acme', 'Hotel Search'), ('Umbrella', 'Rooms'), ('Globex', 'Flights')$$,
  'search is unchanged: the draft stays invisible');
select is(
  (select enabled from payrail.provider_methods where provider = 'Draftco' and method = 'Hotel Search'), false,
  'the draft is still a draft');
select throws_ok(
  $$select * from payrail.search_provider_methods('Draftco')$$,
  'PYE01', null, 'the draft''s name is still no name to search');

-- Errors: the preview's own, then search's.
select throws_ok(
  $$select * from payrail.preview_search('Nobody', 'Nothing', 'find a hotel', '[1,0,0]')$$,
  'P0002', 'there is no provider method "Nobody / Nothing" to preview',
  'an unknown record is no_data_found (P0002), naming it');
select throws_ok(
  $$select * from payrail.preview_search('Draftco', 'Unembedded', 'find a hotel', '[1,0,0]')$$,
  '55000', 'provider method "Draftco / Unembedded" has no embedding of its current content, so search could not place it',
  'a draft without a vector is object_not_in_prerequisite_state (55000)');
create function pg_temp.hint_of(p_sql text) returns text language plpgsql as $$
declare v_hint text;
begin
  execute p_sql;
  return null;
exception when others then
  get stacked diagnostics v_hint = pg_exception_hint;
  return v_hint;
end
$$;
select alike(
  pg_temp.hint_of($$select * from payrail.preview_search('Draftco', 'Unembedded', 'find a hotel', '[1,0,0]')$$),
  '%payrail-embedder sync%',
  '... with a hint to run payrail-embedder sync');
select throws_ok(
  $$select * from payrail.preview_search('Draftco', 'Hotel Search', '  ', '[1,0,0]')$$,
  '22023', 'query is empty', 'an empty query is 22023, as in search');
select throws_ok(
  $$select * from payrail.preview_search('Draftco', 'Hotel Search', repeat('x', 2001), '[1,0,0]')$$,
  '22023', null, 'an over-long query is 22023, as in search');
select throws_ok(
  $$select * from payrail.preview_search('Draftco', 'Hotel Search', 'find a hotel')$$,
  'PYE01', null, 'a query that is no name needs an embedding (PYE01), as in search');
select throws_ok(
  $$select * from payrail.preview_search('Draftco', 'Hotel Search', 'find a hotel', '[1,0]')$$,
  'PYE02', null, 'a vector of other dimensions is PYE02, as in search');
select throws_ok(
  $$select * from payrail.preview_search('Draftco', 'Hotel Search', 'find a hotel', '[1,0,0]', 'other-model')$$,
  'PYE02', null, 'a vector from another model is PYE02, as in search');
select throws_ok(
  $$select * from payrail.preview_search('Draftco', 'Hotel Search', 'find a hotel', '[0,0,0]')$$,
  '22023', null, 'the zero vector is 22023, as in search');

-- Operators preview; agents and the embedder cannot.
set local role payrail_operator;
select results_eq(
  $$select provider, method from payrail.preview_search('Draftco', 'Hotel Search', 'find a hotel', '[1,0.1,0]')$$,
  $$select provider, method from enabled_answer where query_id = 1 order by position$$,
  'operator: can preview');
reset role;
set local role payrail_agent;
select throws_ok(
  $$select * from payrail.preview_search('Draftco', 'Hotel Search', 'find a hotel', '[1,0.1,0]')$$,
  '42501', null, 'agent: cannot preview (it would show drafts)');
reset role;
set local role payrail_embedder;
select throws_ok(
  $$select * from payrail.preview_search('Draftco', 'Hotel Search', 'find a hotel', '[1,0.1,0]')$$,
  '42501', null, 'embedder: cannot preview');
reset role;

select * from finish();
rollback;
