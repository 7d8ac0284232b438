-- Golden queries (DESIGN.md, "Retrieval quality"): registry data with named rules, written by
-- operators through payrail.add_golden_query / remove_golden_query (or by hand, under the same
-- rules), read by operators and the embedder, refused to agents; a record they name is not
-- deleted unless they go with it; search answers the same with or without them.
begin;
select plan(56);
\ir include/error_of.sql

select payrail.set_embedding_model('test-model', 3);
select record_id as charge from payrail.save_provider_method(
  null, 0, 'Stripe', 'Create a PaymentIntent', '{}', null, 'Charge a card.', true, '[1,0,0]', 'test-model') \gset
select record_id as refund from payrail.save_provider_method(
  null, 0, 'Stripe', 'Create a refund', '{}', null, 'Give money back.', true, '[0,1,0]', 'test-model') \gset
select record_id as sms from payrail.save_provider_method(
  null, 0, 'Twilio', 'Send an SMS', '{}', null, 'Send a text message.', true, '[0,0,1]', 'test-model') \gset
select record_id as draft from payrail.save_provider_method(
  null, 0, 'Amadeus', 'Hotel Search', '{}', null, 'Find hotels.') \gset

-- What agents get before any golden query exists, to compare with what they get after.
create temporary table answers_before as
select q.query, s.* from (values ('stripe'), ('Twilio / Send an SMS'), ('charge a card')) as q(query),
  lateral payrail.search_provider_methods(q.query, case when q.query = 'charge a card' then '[1,0.1,0]'::vector end, 'test-model') as s;
grant select on answers_before to payrail_agent;

-- Operators add them; who and when are stamped, the records kept in the order given.
set local role payrail_operator;
select lives_ok(
  format($$select payrail.add_golden_query('charge the customer''s card in euros', array[%s, %s]::bigint[])$$, :charge, :refund),
  'operator: adds a golden query with its relevant records');
reset role;
select results_eq(
  $$select g.query, g.added_by, g.added_at <= clock_timestamp(), array_agg(r.record_id order by r.ordinal)
    from payrail.golden_queries as g join payrail.golden_query_records as r on r.golden_query_id = g.id group by g.id$$,
  format($$values ('charge the customer''s card in euros', 'payrail_operator', true, array[%s, %s]::bigint[])$$, :charge, :refund),
  '... stamped with the acting role and the time, its records in the order given');
select payrail.add_golden_query('give money back and text the customer', array[:refund, :sms]::bigint[]) as both_id \gset
select payrail.add_golden_query('refund an earlier charge', array[:refund]::bigint[]) as refund_only_id \gset

-- Search answers as it did before any golden query: they are no ranking input.
set local role payrail_agent;
select results_eq(
  $$select q.query, s.* from (values ('stripe'), ('Twilio / Send an SMS'), ('charge a card')) as q(query),
      lateral payrail.search_provider_methods(q.query, case when q.query = 'charge a card' then '[1,0.1,0]'::vector end, 'test-model') as s$$,
  'select * from answers_before',
  'agent: search answers as before the golden queries');
reset role;

-- The same query (as names compare) is refused in words, naming the rule.
select results_eq(
  format($$select e_sqlstate, e_constraint, e_message like 'golden query "charge the customer''s card in euros" exists already (added %% by %%)'
           from pg_temp.error_of($q$select payrail.add_golden_query('  CHARGE the customer''s  card in EUROS ', array[%s]::bigint[])$q$)$$, :sms),
  $$values ('23505', 'golden_queries_query_key', true)$$,
  'the same query (case, white space) is refused in words: golden_queries_query_key');
select results_eq(
  format($$select e_sqlstate, e_constraint from pg_temp.error_of(
    $q$select payrail.add_golden_query(E'charge\u200b the customer''s card in ｅｕｒｏｓ', array[%s]::bigint[])$q$)$$, :sms),
  $$values ('23505', 'golden_queries_query_key')$$,
  '... and so are invisible characters and compatibility forms');
select throws_ok(
  $$insert into payrail.golden_queries (query) values ('Refund an EARLIER charge')$$,
  '23505', null, 'a direct insert of the same query is refused by the unique key too');

-- The query obeys the search query's rules.
select results_eq(
  format($$select e_sqlstate, e_constraint from pg_temp.error_of($q$select payrail.add_golden_query(E' \t\u200b', array[%s]::bigint[])$q$)$$, :sms),
  $$values ('23514', 'golden_queries_query_check')$$,
  'an empty query (white space and invisible characters) is refused: golden_queries_query_check');
select results_eq(
  format($$select e_sqlstate, e_constraint from pg_temp.error_of($q$select payrail.add_golden_query(repeat('x', 2001), array[%s]::bigint[])$q$)$$, :sms),
  $$values ('23514', 'golden_queries_query_check')$$,
  'a query over 2,000 characters is refused');
select lives_ok(
  format($$select payrail.add_golden_query(repeat('界', 2000), array[%s]::bigint[])$$, :sms),
  'a query of 2,000 characters of any script is a golden query (its key fits: a digest)');
-- The constraint and search's own check refuse exactly the same queries. Each insert is rolled
-- back (an accepted one too): the name of the constraint that refused it, or NULL.
create function pg_temp.refused_by(p_query text) returns text language plpgsql as $f$
declare
  v_constraint text;
begin
  insert into payrail.golden_queries (query) values (p_query);
  raise exception 'accepted';
exception when others then
  get stacked diagnostics v_constraint = constraint_name;
  return nullif(v_constraint, '');
end
$f$;
create temporary table candidate_queries (query text);
insert into candidate_queries values
  (''), (' '), (E'\t\n'), (E'\u00a0\u2028'), (E'\u200b\u2060'), (E'\ufeff'), (E'\u3000x'), ('x'), (repeat('y', 2000)),
  (repeat('y', 2001)), (repeat(' ', 2001)), (E'\u200b' || repeat('z', 1999)), (E'x\u0085');
select results_eq(
  $$select c.query, (pg_temp.error_of(format('select payrail._check_query(%L)', c.query))).e_sqlstate is not null
    from candidate_queries as c order by 1$$,
  $$select c.query, pg_temp.refused_by(c.query) is not distinct from 'golden_queries_query_check' from candidate_queries as c order by 1$$,
  'golden_queries_query_check refuses exactly the queries search refuses');
select is((select count(*)::int from candidate_queries as c where pg_temp.refused_by(c.query) is not null), 8,
  '... eight of them, which the check sees');

-- At least one relevant record, at most 100, each once, each existing.
select results_eq(
  $$select e_sqlstate, e_constraint, e_message from pg_temp.error_of($q$select payrail.add_golden_query('book a hotel', '{}')$q$)$$,
  $$values ('23514', 'golden_queries_relevant_check', 'golden query "book a hotel" names no relevant record: it needs at least one')$$,
  'a golden query without relevant records is refused in words: golden_queries_relevant_check');
set constraints payrail.golden_queries_relevant_check immediate;
select results_eq(
  $$select e_sqlstate, e_constraint from pg_temp.error_of($q$insert into payrail.golden_queries (query) values ('book a hotel')$q$)$$,
  $$values ('23514', 'golden_queries_relevant_check')$$,
  '... and so is one inserted by hand without any (the rule is checked at commit)');
select results_eq(
  format($$select e_sqlstate, e_constraint from pg_temp.error_of('delete from payrail.golden_query_records where golden_query_id = %s')$$, :refund_only_id),
  $$values ('23514', 'golden_queries_relevant_check')$$,
  '... and so is taking its last record away');
set constraints payrail.golden_queries_relevant_check deferred;
select results_eq(
  format($$select e_sqlstate, e_constraint, e_message from pg_temp.error_of('select payrail.add_golden_query(''book a hotel'', array[%s, %s, %s]::bigint[])')$$,
         :draft, :sms, :draft),
  $$values ('23505', 'golden_query_records_pkey', 'golden query "book a hotel" names provider method "Amadeus / Hotel Search" twice')$$,
  'a record named twice is refused in words');
select results_eq(
  $$select e_sqlstate, e_constraint, e_message from pg_temp.error_of('select payrail.add_golden_query(''book a hotel'', array[-1, null]::bigint[])')$$,
  $$values ('23503', 'golden_query_records_record_id_fkey', 'golden query "book a hotel" names no provider method with id -1, NULL')$$,
  'records that do not exist are refused, naming them');
select results_eq(
  format($$select e_sqlstate, e_constraint from pg_temp.error_of('select payrail.add_golden_query(''book a hotel'', array_fill(%s::bigint, array[101]))')$$, :draft),
  $$values ('23514', 'golden_query_records_ordinal_check')$$,
  'more than 100 relevant records are refused');
select lives_ok(
  format($$select payrail.add_golden_query('book a hotel', array[%s]::bigint[])$$, :draft),
  'a draft may be relevant (eval warns that search never returns it)');
select is((select count(*)::int from payrail.golden_queries where query like 'book a hotel%'), 1, '... and the refused ones left nothing behind');

-- By record: a rename keeps them.
update payrail.provider_methods
set provider = 'Stripe Inc', embedding = '[0,1,0]', embedding_model = 'test-model',
    embedding_content_hash = payrail._content_hash('Stripe Inc', method, guidance)
where id = :refund;
select results_eq(
  format($$select pm.provider, pm.method from payrail.golden_query_records as r join payrail.provider_methods as pm on pm.id = r.record_id
           where r.golden_query_id = %s$$, :refund_only_id),
  $$values ('Stripe Inc', 'Create a refund')$$,
  'a renamed record stays relevant, under its new name');

-- A record golden queries name is not deleted, and the refusal says which.
select results_eq(
  format($$select e_sqlstate, e_constraint, e_message, e_hint like '%%p_with_golden_queries => true%%'
           from pg_temp.error_of('select payrail.delete_provider_method(%s, null)')$$, :refund),
  $$values ('23503', 'golden_query_records_record_id_fkey',
            'provider method "Stripe Inc / Create a refund" is not deleted: 3 golden queries name it: "charge the customer''s card in euros", "give money back and text the customer", "refund an earlier charge"', true)$$,
  'delete: refused while golden queries name the record, naming them, with what to do');
set local role payrail_operator;
select throws_ok(format('delete from payrail.provider_methods where id = %s', :sms), '23503',
  format('provider method "Twilio / Send an SMS" is not deleted: 2 golden queries name it: "give money back and text the customer", "%s…"', repeat('界', 99)),
  'a delete in SQL is refused the same way (long queries cut to 100 characters)');
reset role;
select is((select count(*)::int from payrail.provider_methods where id in (:refund, :sms)), 2, '... and nothing is deleted');
select is(
  (select count(*)::int from (select payrail.add_golden_query(format('question %s', n), array[:charge]::bigint[]) from generate_series(1, 6) as n) as added),
  6, 'six more golden queries name Create a PaymentIntent');
select matches(
  (pg_temp.error_of(format('select payrail.delete_provider_method(%s, null)', :charge))).e_message,
  ': 7 golden queries name it: "charge the customer''s card in euros", "question 1", "question 2", "question 3", "question 4" and 2 more$',
  'delete: with many, the first five by age and how many more');

-- Unless they go with it: it leaves them, and a query it alone answered goes too.
set local role payrail_operator;
select is(payrail.delete_provider_method(:refund, null, p_with_golden_queries => true), 2,
  'delete with its golden queries: an operator may');
reset role;
select results_eq(
  $$select g.query, array_agg(r.record_id order by r.ordinal) from payrail.golden_queries as g
    join payrail.golden_query_records as r on r.golden_query_id = g.id
    where g.query in ('charge the customer''s card in euros', 'give money back and text the customer', 'refund an earlier charge')
    group by g.id order by g.id$$,
  format($$values ('charge the customer''s card in euros', array[%s]::bigint[]), ('give money back and text the customer', array[%s]::bigint[])$$, :charge, :sms),
  '... the queries naming other records too keep those; the one it alone answered is gone');
select is((select count(*)::int from payrail.provider_methods where id = :refund), 0, '... and the record is deleted');

-- Removing a golden query: by its query as names compare; its records stay.
select is(payrail.remove_golden_query('GIVE money back and text the customer'), :both_id::bigint, 'remove: by the query, ignoring case');
select is((select count(*)::int from payrail.golden_query_records where golden_query_id = :both_id), 0, '... its records go with it');
select is((select count(*)::int from payrail.provider_methods where id = :sms), 1, '... the record it named stays');
select results_eq(
  $$select e_sqlstate, e_message from pg_temp.error_of('select payrail.remove_golden_query(''never added'')')$$,
  $$values ('P0002', 'there is no golden query "never added"')$$,
  'remove: an unknown query is refused in words');

-- Operators write only the query and its records; who and when are never theirs.
set local role payrail_operator;
select throws_ok($$insert into payrail.golden_queries (query, added_by) values ('forged', 'someone_else')$$, '42501', null,
  'operator: cannot write added_by');
select throws_ok($$update payrail.golden_queries set query = 'changed'$$, '42501', null, 'operator: cannot update a golden query');
select lives_ok(
  format($$with g as (insert into payrail.golden_queries (query) values ('send a text by hand') returning id)
           insert into payrail.golden_query_records (golden_query_id, record_id, ordinal) select g.id, %s, 1 from g$$, :sms),
  'operator: can write a golden query in SQL, under the same rules');
reset role;
select is((select added_by from payrail.golden_queries where query = 'send a text by hand'), 'payrail_operator', '... stamped as the operator');

-- The embedder reads them (eval, model tune); agents cannot even see them.
set local role payrail_embedder;
select cmp_ok((select count(*)::int from payrail.golden_queries), '>', 0, 'embedder: reads golden queries');
select lives_ok('select * from payrail.golden_query_records', 'embedder: reads their records');
select throws_ok($$select payrail.add_golden_query('embedder question', array[1]::bigint[])$$, '42501', null, 'embedder: cannot add one');
select throws_ok('delete from payrail.golden_queries', '42501', null, 'embedder: cannot delete them');
reset role;
set local role payrail_agent;
select throws_ok('select * from payrail.golden_queries', '42501', 'permission denied for table golden_queries', 'agent: cannot read golden queries');
select throws_ok('select * from payrail.golden_query_records', '42501', 'permission denied for table golden_query_records', 'agent: cannot read their records');
select throws_ok($$select * from payrail._golden_query_named('refund an earlier charge')$$, '42501', null, 'agent: cannot look one up');
select throws_ok($$select payrail.add_golden_query('agent question', array[1]::bigint[])$$, '42501', null, 'agent: cannot add one');
select throws_ok($$select payrail.remove_golden_query('send a text by hand')$$, '42501', null, 'agent: cannot remove one');
reset role;

-- Their vectors (golden_query_embeddings): the embedder writes them, operators read them, agents nothing.
select payrail.add_golden_query('turn an address into coordinates', array[:charge]::bigint[]) as vector_query_id \gset
set local role payrail_embedder;
select lives_ok(
  format($$insert into payrail.golden_query_embeddings (golden_query_id, model, query, embedding)
           values (%s, 'test-model', 'turn an address into coordinates', '[1,0.5,0]')$$, :vector_query_id),
  'embedder: keeps a golden query''s vector');
select throws_ok(
  format($$insert into payrail.golden_query_embeddings (golden_query_id, model, query, embedding) values (%s, 'other-model', 'x', '[0,0,0]')$$, :vector_query_id),
  '23514', null, '... never the zero vector, which search refuses as a query');
reset role;
set local role payrail_operator;
select is((select count(*)::int from payrail.golden_query_embeddings), 1, 'operator: reads them');
select throws_ok($$delete from payrail.golden_query_embeddings$$, '42501', null, 'operator: cannot write them');
reset role;
set local role payrail_agent;
select throws_ok('select * from payrail.golden_query_embeddings', '42501', 'permission denied for table golden_query_embeddings',
  'agent: cannot read their vectors');
reset role;
select is(payrail.remove_golden_query('turn an address into coordinates'), :vector_query_id::bigint, 'a golden query removed ...');
select is((select count(*)::int from payrail.golden_query_embeddings), 0, '... takes its vectors with it');

select is(
  (select count(*)::int from pg_proc where pronamespace = 'payrail'::regnamespace and prosrc like '%golden%'
     and proname in ('search_provider_methods', '_search', '_first_pass', '_name_path_matches', 'query_takes_name_path', 'preview_search')),
  0, 'no search function reads a golden query');

-- The language a golden query is in: eval's rule for a tag, by add_golden_query or by hand.
set local role payrail_operator;
select payrail.add_golden_query('eine Karte belasten', array[:charge]::bigint[], 'de') as german_id \gset
select is((select g.language from payrail.golden_queries as g where g.id = :german_id), 'de', 'operator: adds a golden query with its language');
select lives_ok(
  $$insert into payrail.golden_queries (query, language) values ('Karte belasten, von Hand', 'zh-Hant');
    insert into payrail.golden_query_records (golden_query_id, record_id, ordinal)
    select id, (select min(id) from payrail.provider_methods), 1 from payrail.golden_queries where query = 'Karte belasten, von Hand'$$,
  'operator: writes a language by hand, in any case');
select results_eq(
  $$select t.tag, (pg_temp.error_of(pg_catalog.format('select payrail.add_golden_query(%L, array[1]::bigint[], %L)', 'q ' || t.tag, t.tag))).e_constraint
    from (values ('e'), ('english-uk'), ('en_US'), ('zh Hans'), ('日本'), ('UNTAGGED'), ('')) as t(tag) order by t.tag collate "C"$$,
  $$values ('', 'golden_queries_language_check'::text), ('UNTAGGED', 'golden_queries_language_check'), ('e', 'golden_queries_language_check'),
           ('en_US', 'golden_queries_language_check'), ('english-uk', 'golden_queries_language_check'),
           ('zh Hans', 'golden_queries_language_check'), ('日本', 'golden_queries_language_check')$$,
  'a language that is no tag (2 to 8 letters, digits and hyphens; never "untagged") is refused, naming the rule');
reset role;

select * from finish();
rollback;
