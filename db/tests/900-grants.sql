-- Roles and privileges (DESIGN.md, "PostgreSQL, everywhere real" and rule 4), and the house rules
-- every object in schema payrail follows (STYLE.md: pinned search_path, comments everywhere).
begin;
select plan(48);

-- The three group roles exist and cannot log in.
select results_eq(
  $$select rolname::text collate "default", rolcanlogin, rolsuper
    from pg_roles where rolname in ('payrail_agent', 'payrail_operator', 'payrail_embedder') order by 1$$,
  $$values ('payrail_agent', false, false), ('payrail_embedder', false, false), ('payrail_operator', false, false)$$,
  'roles payrail_agent, payrail_embedder and payrail_operator exist, without login or superuser');

-- payrail_embedder chooses the registry's first model.
set local role payrail_embedder;
select lives_ok(
  $$select payrail.set_embedding_model('test-model', 3)$$,
  'embedder: can set the registry''s first embedding model');
reset role;

-- Fixtures, as the owner (idempotent if the embedder already set the model).
select payrail.set_embedding_model('test-model', 3);
insert into payrail.provider_methods (provider, method, guidance, enabled, embedding, embedding_model, embedding_content_hash)
select f.provider, f.method, f.guidance, f.enabled, f.embedding::vector,
       case when f.embedding is not null then 'test-model' end,
       case when f.embedding is not null then payrail._content_hash(f.provider, f.method, f.guidance) end
from (values
  ('Acme',    'Hotel Search', 'Find hotels.',    true,  '[1,0,0]'),
  ('Globex',  'Pay',          'Pay Globex.',     true,  '[0,1,0]'),
  -- A draft with a vector nearest to the agent's query below, and one without.
  ('Draftco', 'Secret',       'Not public yet.', false, '[1,0,0]'),
  ('Opco',    'Ready',        'Ready to go.',    false, '[0,0,1]'),
  ('Opco',    'Unembedded',   'Needs a vector.', false, null)
) as f(provider, method, guidance, enabled, embedding);

-- payrail_agent: the search functions only; no table; drafts stay invisible (rule 4).
set local role payrail_agent;
select lives_ok($$select * from payrail.search_provider_methods('acme')$$,
  'agent: can execute search_provider_methods');
select lives_ok($$select payrail.query_takes_name_path('acme')$$,
  'agent: can execute query_takes_name_path');
select lives_ok($$select * from payrail.get_embedding_model()$$,
  'agent: can execute get_embedding_model');
select results_eq(
  $$select name, dimensions from payrail.get_embedding_model()$$,
  $$values ('test-model', 3)$$,
  'agent: reads the registry''s model');
select results_eq(
  $$select provider, method from payrail.search_provider_methods('find a hotel', '[1,0,0]')$$,
  $$values ('Acme', 'Hotel Search'), ('Globex', 'Pay')$$,
  'agent: the semantic path returns enabled records only, not the nearest draft');
select is_empty(
  $$select * from payrail.search_provider_methods('draftco secret', '[1,0,0]') where provider = 'Draftco'$$,
  'agent: searching for a draft by its name does not return it');
select is(payrail.query_takes_name_path('Draftco'), false,
  'agent: the name of a draft is not a name to the agent');
select throws_ok(
  $$select * from payrail.provider_methods$$,
  '42501', 'permission denied for table provider_methods', 'agent: cannot select from payrail.provider_methods');
select throws_ok(
  $$select * from payrail.embedding_model$$,
  '42501', 'permission denied for table embedding_model', 'agent: cannot select from payrail.embedding_model');
select throws_ok(
  $$insert into payrail.provider_methods (provider, method, guidance) values ('Evil', 'Insert', 'x')$$,
  '42501', 'permission denied for table provider_methods', 'agent: cannot insert into payrail.provider_methods');
select throws_ok(
  $$select * from payrail._name_path_matches('draftco')$$,
  '42501', 'permission denied for function _name_path_matches', 'agent: cannot execute the internal helper _name_path_matches');
select throws_ok(
  $$select payrail.set_embedding_model('evil-model', 3)$$,
  '42501', 'permission denied for function set_embedding_model', 'agent: cannot execute set_embedding_model');
reset role;

-- payrail_operator: edits the public fields and enabled; never the vector columns.
set local role payrail_operator;
select lives_ok(
  $$insert into payrail.provider_methods (provider, method, urls, docs_url, guidance, enabled)
    values ('Opco', 'New', '{https://api.opco.example/new}', 'https://docs.opco.example/new', 'A new method.', false)$$,
  'operator: can insert a record with the public fields and enabled');
select lives_ok(
  $$update payrail.provider_methods
    set provider = 'Opco Inc', method = 'Newer', guidance = 'A newer method.'
    where provider = 'Opco' and method = 'New'$$,
  'operator: can update provider, method and guidance of a draft');
select lives_ok(
  $$update payrail.provider_methods
    set urls = '{https://api.opco.example/newer}', docs_url = 'https://docs.opco.example/newer'
    where provider = 'Opco Inc'$$,
  'operator: can update urls and docs_url');
select lives_ok(
  $$update payrail.provider_methods set enabled = true where provider = 'Opco' and method = 'Ready'$$,
  'operator: can enable a draft that has a current vector');
select lives_ok(
  $$update payrail.provider_methods set enabled = false where provider = 'Acme'$$,
  'operator: can disable a record');
select results_eq(
  $$select provider, method, enabled, embedding is not null from payrail.provider_methods
    where provider in ('Opco', 'Opco Inc', 'Acme') order by provider, method$$,
  $$values ('Acme', 'Hotel Search', false, true), ('Opco', 'Ready', true, true),
           ('Opco', 'Unembedded', false, false), ('Opco Inc', 'Newer', false, false)$$,
  'operator: the edits are saved, vectors kept by enabling and disabling');
select throws_ok(
  $$update payrail.provider_methods set embedding = '[0,0,1]' where provider = 'Opco' and method = 'Unembedded'$$,
  '42501', 'permission denied for table provider_methods', 'operator: cannot update embedding');
select throws_ok(
  $$update payrail.provider_methods set embedding_model = 'test-model' where provider = 'Opco' and method = 'Unembedded'$$,
  '42501', 'permission denied for table provider_methods', 'operator: cannot update embedding_model');
select throws_ok(
  $$update payrail.provider_methods set embedding_content_hash = content_hash where provider = 'Opco' and method = 'Unembedded'$$,
  '42501', 'permission denied for table provider_methods', 'operator: cannot update embedding_content_hash');
select throws_ok(
  $$insert into payrail.provider_methods (provider, method, guidance, embedding, embedding_model, embedding_content_hash)
    values ('Opco', 'Forged', 'x', '[1,0,0]', 'test-model', sha256('x'))$$,
  '42501', 'permission denied for table provider_methods', 'operator: cannot insert a vector');
select throws_ok(
  $$update payrail.provider_methods set created_at = now() where provider = 'Opco'$$,
  '42501', 'permission denied for table provider_methods', 'operator: cannot update internal timestamps');
select throws_ok(
  $$select payrail.set_embedding_model('operator-model', 3)$$,
  '42501', 'permission denied for function set_embedding_model', 'operator: cannot execute set_embedding_model');
select throws_ok(
  $$update payrail.embedding_model set name = 'operator-model'$$,
  '42501', 'permission denied for table embedding_model', 'operator: cannot update payrail.embedding_model');
select lives_ok(
  $$delete from payrail.provider_methods where provider = 'Opco Inc'$$,
  'operator: can delete a record');
select lives_ok(
  $$select * from payrail.search_provider_methods('globex')$$,
  'operator: can execute search_provider_methods');
reset role;

-- payrail_embedder: reads content and writes vectors; never the public fields or enabled.
set local role payrail_embedder;
select results_eq(
  $$select provider, method, guidance, content_hash is not null
    from payrail.provider_methods where embedding is null order by provider, method$$,
  $$values ('Opco', 'Unembedded', 'Needs a vector.', true)$$,
  'embedder: reads the content of records without a vector');
select lives_ok(
  $$update payrail.provider_methods
    set embedding = '[0,1,1]', embedding_model = 'test-model', embedding_content_hash = content_hash
    where provider = 'Opco' and method = 'Unembedded'$$,
  'embedder: can update embedding, embedding_model and embedding_content_hash');
select throws_ok(
  $$update payrail.provider_methods set guidance = 'Rewritten.' where provider = 'Opco'$$,
  '42501', 'permission denied for table provider_methods', 'embedder: cannot update guidance');
select throws_ok(
  $$update payrail.provider_methods set provider = 'Rewritten' where provider = 'Opco'$$,
  '42501', 'permission denied for table provider_methods', 'embedder: cannot update provider');
select throws_ok(
  $$update payrail.provider_methods set enabled = true where provider = 'Opco'$$,
  '42501', 'permission denied for table provider_methods', 'embedder: cannot update enabled');
select throws_ok(
  $$insert into payrail.provider_methods (provider, method, guidance) values ('Embedco', 'New', 'x')$$,
  '42501', 'permission denied for table provider_methods', 'embedder: cannot insert records');
select throws_ok(
  $$delete from payrail.provider_methods where provider = 'Opco'$$,
  '42501', 'permission denied for table provider_methods', 'embedder: cannot delete records');
reset role;
select results_eq(
  $$select vector_send(embedding), embedding_model from payrail.provider_methods where method = 'Unembedded'$$,
  $$values (vector_send('[0,1,1]'), 'test-model')$$,
  'embedder: the vector it wrote is saved');

-- House rules: functions pin their search_path; tables, columns and functions are documented.
-- The exact pinned value: pgvector's schema (public on the test servers) and nothing else writable.
select is(payrail._search_path(), 'pg_catalog, payrail, public, pg_temp', 'the registry''s search path, exactly');
select is(
  count(*)::int, 0,
  'every function in payrail pins exactly that search path, or pg_catalog alone (db/CONVENTIONS.md)'
    || coalesce(' (other: ' || string_agg(p.oid::regprocedure::text, ', ' order by p.oid::regprocedure::text) || ')', ''))
from pg_proc as p
where p.pronamespace = 'payrail'::regnamespace
  and not (p.proconfig @> array['search_path=pg_catalog, payrail, public, pg_temp']
           or p.proconfig @> array['search_path=pg_catalog, pg_temp']);
select is(
  count(*)::int, 0,
  'every table in payrail has a comment'
    || coalesce(' (missing: ' || string_agg(c.oid::regclass::text, ', ' order by c.oid::regclass::text) || ')', ''))
from pg_class as c
where c.relnamespace = 'payrail'::regnamespace and c.relkind in ('r', 'p', 'v', 'm', 'f')
  and obj_description(c.oid, 'pg_class') is null;
select is(
  count(*)::int, 0,
  'every column in payrail has a comment'
    || coalesce(' (missing: ' || string_agg(c.oid::regclass::text || '.' || a.attname, ', ' order by c.oid::regclass::text || '.' || a.attname) || ')', ''))
from pg_class as c
join pg_attribute as a on a.attrelid = c.oid and a.attnum > 0 and not a.attisdropped
where c.relnamespace = 'payrail'::regnamespace and c.relkind in ('r', 'p', 'v', 'm', 'f')
  and col_description(c.oid, a.attnum) is null;
select is(
  count(*)::int, 0,
  'every non-trigger function in payrail has a comment'
    || coalesce(' (missing: ' || string_agg(p.oid::regprocedure::text, ', ' order by p.oid::regprocedure::text) || ')', ''))
from pg_proc as p
where p.pronamespace = 'payrail'::regnamespace
  and p.prorettype <> 'trigger'::regtype
  and obj_description(p.oid, 'pg_proc') is null;
-- Guards against a vacuous pass of the checks above.
select cmp_ok(
  (select count(*)::int from pg_proc where pronamespace = 'payrail'::regnamespace and prorettype <> 'trigger'::regtype),
  '>=', 3,
  'the catalog checks above see the payrail functions');

-- security definer is the agents' only door to the table: exactly the three read functions, and
-- get_schema_version, the operators' and embedder's (not agents') view of the deployments no role reads.
-- Trigger functions cannot be called, only fired by a write the writer may make anyway.
select results_eq(
  $$select p.proname::text collate "default" from pg_proc as p
    where p.pronamespace = 'payrail'::regnamespace and p.prosecdef and p.prorettype <> 'trigger'::regtype
    order by 1$$,
  $$values ('get_embedding_model'), ('get_schema_version'), ('query_takes_name_path'), ('search_provider_methods')$$,
  'only get_embedding_model, get_schema_version, query_takes_name_path and search_provider_methods are callable security definer functions');
select results_eq(
  $$select p.proname::text collate "default" from pg_proc as p
    where p.pronamespace = 'payrail'::regnamespace and p.prosecdef and p.prorettype = 'trigger'::regtype
    order by 1$$,
  $$values ('tg_provider_methods__keep_half_vector'), ('tg_provider_methods__keep_list_entry'), ('tg_provider_methods__record_bulk_action'),
           ('tg_provider_methods__record_history')$$,
  'the security definer triggers write what no role may: the derived half-precision vectors, the list entries, the records of bulk actions and the history');
select throws_ok(
  'select payrail.tg_provider_methods__keep_half_vector()',
  '0A000', NULL,
  'the half-vector trigger function cannot be called directly');
select throws_ok(
  'select payrail.tg_provider_methods__record_history()',
  '0A000', NULL,
  'the history trigger function cannot be called directly');
select is(
  count(*)::int, 0,
  'the security definer functions are not volatile'
    || coalesce(' (volatile: ' || string_agg(p.oid::regprocedure::text, ', ' order by p.oid::regprocedure::text) || ')', ''))
from pg_proc as p
where p.pronamespace = 'payrail'::regnamespace and p.prosecdef and p.provolatile = 'v'
  and p.prorettype <> 'trigger'::regtype;

select * from finish();
rollback;
