-- History of provider methods: every update and delete keeps the version it replaced, with who
-- and when; payrail.restore_provider_method brings a version back under the embedding rules.
begin;
select plan(41);

\ir include/error_of.sql

-- The history entries of one record, oldest first, without the timestamps.
create function pg_temp.versions(p_id bigint)
returns table (operation text, provider text, method text, urls text[], docs_url text, guidance text, enabled boolean)
language sql
as $$
  select h.operation, h.provider, h.method, h.urls, h.docs_url, h.guidance, h.enabled
  from payrail.provider_method_history as h where h.provider_method_id = p_id order by h.id
$$;

select payrail.set_embedding_model('test-model', 3);
insert into payrail.provider_methods (provider, method, urls, docs_url, guidance, enabled, embedding, embedding_model, embedding_content_hash)
values ('Acme', 'Hotel Search', '{https://api.acme.example/hotels}', 'https://docs.acme.example', 'Find hotels.', true,
        '[1,0,0]', 'test-model', payrail._content_hash('Acme', 'Hotel Search', 'Find hotels.')),
       ('Globex', 'Draft', '{}', null, 'Draft text.', false, null, null, null);
create temporary table ids as
select (select id from payrail.provider_methods where provider = 'Acme') as acme,
       (select id from payrail.provider_methods where provider = 'Globex') as globex;
grant select on ids to public;

-- Inserts and vector-only writes are not versions.
select is_empty($$select * from payrail.provider_method_history$$, 'history: an insert records nothing');
update payrail.provider_methods
set embedding = '[0,1,0]', embedding_model = 'test-model', embedding_content_hash = content_hash
where provider = 'Globex';
select is_empty($$select * from payrail.provider_method_history$$, 'history: a vector-only write (sync) records nothing');
update payrail.provider_methods set guidance = guidance where provider = 'Acme';
select is_empty($$select * from payrail.provider_method_history$$, 'history: an update that changes nothing records nothing');

-- Each edit of a public field or of enabled keeps the previous version, as the operator who made it.
set local role payrail_operator;
update payrail.provider_methods set urls = '{https://api.acme.example/v2/hotels}' where provider = 'Acme';
update payrail.provider_methods set enabled = false where provider = 'Acme';
update payrail.provider_methods set guidance = 'Find hotels and rooms.' where provider = 'Acme';
reset role;
select results_eq(
  $$select * from pg_temp.versions((select acme from ids))$$,
  $$values ('update', 'Acme', 'Hotel Search', '{https://api.acme.example/hotels}'::text[], 'https://docs.acme.example', 'Find hotels.', true),
           ('update', 'Acme', 'Hotel Search', '{https://api.acme.example/v2/hotels}'::text[], 'https://docs.acme.example', 'Find hotels.', true),
           ('update', 'Acme', 'Hotel Search', '{https://api.acme.example/v2/hotels}'::text[], 'https://docs.acme.example', 'Find hotels.', false)$$,
  'history: a URL edit, a disable and a guidance edit each keep the version they replaced');
select results_eq(
  $$select distinct changed_by, changed_by_session_user from payrail.provider_method_history$$,
  $$values ('payrail_operator'::text, session_user::text collate "default")$$,
  'history: who is the role in effect (current_user) and the login (session_user)');
select results_eq(
  $$select h.version, h.version_saved_by from payrail.provider_method_history as h order by h.id$$,
  $$values (1, session_user::text collate "default"), (2, 'payrail_operator'), (3, 'payrail_operator')$$,
  'history: each version names who saved it, the first included');
select results_eq(
  $$select h.changed_at from payrail.provider_method_history as h order by h.id$$,
  $$select t.saved_at from (
      select h.version_saved_at as saved_at, h.id from payrail.provider_method_history as h where h.id > (select min(id) from payrail.provider_method_history)
      union all select pm.updated_at, null from payrail.provider_methods as pm where pm.provider = 'Acme') as t
    order by t.id nulls last$$,
  'history: a version was replaced when the next one was saved, each at its own clock time within one transaction');
select is((select saved_by from payrail.provider_methods where provider = 'Acme'), 'payrail_operator', 'the record names who saved its current version');
select is((select count(distinct h.version_saved_at)::int from payrail.provider_method_history as h), 3,
  'history: versions saved in one transaction show the clock time of each save, not the transaction''s start');
select ok(
  (select bool_and(h.version_saved_at <= h.changed_at) from payrail.provider_method_history as h),
  'history: each version says when it was saved, no later than it was replaced');

-- A refused edit leaves no history.
select throws_ok(
  $$update payrail.provider_methods set guidance = 'Refused.', enabled = true where provider = 'Acme'$$,
  '23514', null, 'history: an edit refused by a rule...');
select is((select count(*)::int from payrail.provider_method_history), 3, '... records nothing');

-- Operators read the history but cannot write who or when, nor change or remove an entry.
set local role payrail_operator;
select throws_ok(
  $$insert into payrail.provider_method_history
      (provider_method_id, operation, provider, method, urls, guidance, enabled, version_saved_at, changed_by)
    values (1, 'update', 'Forged', 'Entry', '{}', 'x', false, now(), 'someone_else')$$,
  '42501', null, 'history: an operator cannot write changed_by');
select throws_ok(
  $$insert into payrail.provider_method_history
      (provider_method_id, operation, provider, method, urls, guidance, enabled, version_saved_at, changed_at)
    values (1, 'update', 'Forged', 'Entry', '{}', 'x', false, now(), now() - interval '1 year')$$,
  '42501', null, 'history: an operator cannot write changed_at');
select throws_ok(
  $$insert into payrail.provider_method_history
      (provider_method_id, operation, provider, method, urls, guidance, enabled, version_saved_at)
    values (1, 'update', 'Forged', 'Entry', '{}', 'x', false, now())$$,
  '42501', null, 'history: an operator cannot add an entry, even without who or when');
select throws_ok(
  $$update payrail.provider_method_history set guidance = 'Rewritten.'$$,
  '42501', null, 'history: an operator cannot change an entry');
select throws_ok(
  $$delete from payrail.provider_method_history$$,
  '42501', null, 'history: an operator cannot delete an entry');
reset role;

-- get_provider_method_history: newest first, by name ignoring case and spacing.
select results_eq(
  $$select guidance, enabled from payrail.get_provider_method_history('  ACME ', 'hotel   search')$$,
  $$values ('Find hotels.', false), ('Find hotels.', true), ('Find hotels.', true)$$,
  'get_provider_method_history: newest first, names compared ignoring case and runs of white space');
select is_empty(
  $$select * from payrail.get_provider_method_history('Nobody', 'Nothing')$$,
  'get_provider_method_history: nothing for an unknown name');

-- restore_provider_method: unknown entry.
select throws_ok(
  $$select payrail.restore_provider_method(-1)$$,
  'P0002', 'there is no history entry -1', 'restore: an unknown history entry is no_data_found');

-- Restoring the content of an enabled record needs a fresh embedding: refused with a hint, or as a draft.
update payrail.provider_methods
set enabled = true, embedding = '[1,1,0]', embedding_model = 'test-model', embedding_content_hash = content_hash
where provider = 'Acme';
create temporary table entries as
select (select min(id) from payrail.provider_method_history where provider_method_id = (select acme from ids)) as first_acme;
grant select on entries to public;
select results_eq(
  $$select e_sqlstate, e_constraint from pg_temp.error_of(
      format('select payrail.restore_provider_method(%s)', (select first_acme from entries)))$$,
  $$values ('23514', 'provider_methods_enabled_needs_embedding_check')$$,
  'restore: restoring other guidance into an enabled record is refused (23514, the rule''s name)');
select alike(
  (select e_hint from pg_temp.error_of(format('select payrail.restore_provider_method(%s)', (select first_acme from entries)))),
  '%p_as_draft => true%',
  'restore: ... with a hint to restore it as a draft');
select results_eq(
  $$select guidance, enabled, embedding is not null from payrail.provider_methods where provider = 'Acme'$$,
  $$values ('Find hotels and rooms.', true, true)$$,
  'restore: ... and the record is unchanged');

set local role payrail_operator;
select is(
  payrail.restore_provider_method((select first_acme from entries), p_as_draft => true),
  (select acme from ids),
  'restore: as a draft it succeeds and returns the record id');
reset role;
select results_eq(
  $$select urls, docs_url, guidance, enabled, embedding is null from payrail.provider_methods where provider = 'Acme'$$,
  $$values ('{https://api.acme.example/hotels}'::text[], 'https://docs.acme.example', 'Find hotels.', false, true)$$,
  'restore: ... with every public field of that version, disabled, its stale vector dropped');
select results_eq(
  $$select operation, guidance, enabled from pg_temp.versions((select acme from ids)) offset 4$$,
  $$values ('update', 'Find hotels and rooms.', true)$$,
  'restore: ... and the version it replaced is itself kept, so the restore can be undone');

-- A version with the same content (only other URLs) restores into an enabled record, vector kept.
update payrail.provider_methods
set enabled = true, embedding = '[1,1,1]', embedding_model = 'test-model', embedding_content_hash = content_hash
where provider = 'Acme';
create temporary table url_version as
select max(id) as id from payrail.provider_method_history
where provider_method_id = (select acme from ids) and urls = '{https://api.acme.example/v2/hotels}' and guidance = 'Find hotels.';
grant select on url_version to public;
set local role payrail_operator;
select lives_ok(
  $$select payrail.restore_provider_method((select id from url_version))$$,
  'restore: a version that differs only in URLs restores into an enabled record');
reset role;
select results_eq(
  $$select urls, enabled, vector_send(embedding) from payrail.provider_methods where provider = 'Acme'$$,
  $$values ('{https://api.acme.example/v2/hotels}'::text[], true, vector_send('[1,1,1]'))$$,
  'restore: ... keeping it enabled with its vector');

-- A draft's content restores in place and loses its stale vector.
update payrail.provider_methods set guidance = 'Draft text, second take.' where provider = 'Globex';
select lives_ok(
  $$select payrail.restore_provider_method(
      (select max(id) from payrail.provider_method_history where provider_method_id = (select globex from ids)))$$,
  'restore: a draft''s earlier guidance restores');
select results_eq(
  $$select guidance, enabled, embedding is null from payrail.provider_methods where provider = 'Globex'$$,
  $$values ('Draft text.', false, true)$$,
  'restore: ... as a draft without a vector (sync embeds it)');

-- Deletes are kept, and a deleted record comes back as a new draft.
set local role payrail_operator;
delete from payrail.provider_methods where provider = 'Globex';
reset role;
select results_eq(
  $$select operation, provider, guidance, changed_by from payrail.provider_method_history
    where provider_method_id = (select globex from ids) order by id desc limit 1$$,
  $$values ('delete', 'Globex', 'Draft text.', 'payrail_operator'::text)$$,
  'history: a delete keeps the deleted version and who deleted it');
select results_eq(
  $$select operation from payrail.get_provider_method_history('Globex', 'Draft') limit 1$$,
  $$values ('delete')$$,
  'get_provider_method_history: finds a deleted record by its name');
set local role payrail_operator;
select isnt(
  payrail.restore_provider_method(
    (select max(id) from payrail.provider_method_history where provider_method_id = (select globex from ids))),
  (select globex from ids),
  'restore: a deleted record comes back under a new id');
reset role;
select results_eq(
  $$select provider, method, guidance, enabled, embedding is null from payrail.provider_methods where provider = 'Globex'$$,
  $$values ('Globex', 'Draft', 'Draft text.', false, true)$$,
  'restore: ... as a draft without a vector');
select cmp_ok(
  (select count(distinct provider_method_id)::int from payrail.get_provider_method_history('globex', 'draft')),
  '=', 1,
  'get_provider_method_history: the new record has no history yet, the old one''s stays findable by name');

-- Renames: the old name still finds the record, the new name finds its earlier versions.
update payrail.provider_methods set provider = 'Globex Corp' where provider = 'Globex';
select results_eq(
  $$select provider from payrail.get_provider_method_history('Globex Corp', 'Draft') limit 1$$,
  $$values ('Globex')$$,
  'get_provider_method_history: the new name lists the versions under the old name');
select ok(
  exists (select from payrail.get_provider_method_history('Globex', 'Draft')
          where provider_method_id = (select id from payrail.provider_methods where provider = 'Globex Corp')),
  'get_provider_method_history: the old name still finds the renamed record');

-- Restoring a version whose name is taken by another record names the uniqueness rule.
insert into payrail.provider_methods (provider, method, guidance) values ('Globex', 'Draft', 'Someone else.');
select throws_ok(
  $$select payrail.restore_provider_method(
      (select max(id) from payrail.provider_method_history where provider = 'Globex' and operation = 'update'))$$,
  '23505', null,
  'restore: a version whose name another record now has is refused (23505)');

-- Agents and the embedder cannot read or restore history.
set local role payrail_agent;
select throws_ok($$select * from payrail.provider_method_history$$, '42501', null, 'agent: cannot read the history');
select throws_ok($$select * from payrail.get_provider_method_history('Acme', 'Hotel Search')$$, '42501', null,
  'agent: cannot call get_provider_method_history');
reset role;
set local role payrail_embedder;
select throws_ok($$select payrail.restore_provider_method(1)$$, '42501', null, 'embedder: cannot restore');
reset role;

select * from finish();
rollback;
