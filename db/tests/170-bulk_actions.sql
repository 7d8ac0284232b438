-- Bulk actions: a transaction that began one (payrail.begin_bulk_action) has every record it
-- creates, changes or deletes written down as part of it, by the database alone; who did it is
-- stamped, no role writes either table, and a session cannot pass its changes off as part of
-- another transaction's action. pgTAP runs in one transaction: an action ends here by clearing
-- payrail.bulk_action (or beginning the next), which a commit does otherwise.
begin;
select plan(25);
\ir include/error_of.sql

select payrail.set_embedding_model('test-model', 3);
insert into payrail.provider_methods (provider, method, guidance, enabled, embedding, embedding_model, embedding_content_hash)
values ('Acme', 'Geocode', 'Geocode an address.', true, '[1,0,0]', 'test-model', payrail._content_hash('Acme', 'Geocode', 'Geocode an address.')),
       ('Acme', 'Reverse', 'Reverse geocode.', true, '[0,1,0]', 'test-model', payrail._content_hash('Acme', 'Reverse', 'Reverse geocode.')),
       ('Globex', 'Weather', 'Current weather.', false, null, null, null);
create temporary table ids as
select (select id from payrail.provider_methods where method = 'Geocode') as geocode,
       (select id from payrail.provider_methods where method = 'Reverse') as reverse,
       (select id from payrail.provider_methods where method = 'Weather') as weather;
grant select on ids to public;
select geocode, reverse, weather from ids \gset

-- Outside a bulk action nothing is written down.
update payrail.provider_methods set urls = '{https://acme.example/v2}' where provider = 'Acme';
select is_empty('select * from payrail.bulk_action_records', 'no bulk action: a change is not written down as one');

-- An operator's action: who and when stamped, each record with the version it found and left.
set local role payrail_operator;
select payrail.begin_bulk_action('disable', 'text "acme"') as disable_id \gset
update payrail.provider_methods set enabled = false where provider = 'Acme';
select results_eq(
  $$select operation, selection, undoes, done_by, done_by_session_user = session_user, transaction_id = pg_current_xact_id(), done_at <= clock_timestamp()
    from payrail.bulk_actions$$,
  $$values ('disable'::text, 'text "acme"'::text, null::bigint, 'payrail_operator'::text, true, true, true)$$,
  'operator: begins a bulk action, stamped with the acting role, the login, the transaction and the time');
select results_eq(
  format('select bulk_action_id, record_id, operation, version_before, version_after from payrail.bulk_action_records order by record_id'),
  format($$values (%1$s::bigint, %2$s::bigint, 'update'::text, 2, 3), (%1$s, %3$s, 'update', 2, 3)$$, :disable_id, :geocode, :reverse),
  '... each record it changed, with the version it found (its history entry) and the one it left');
select results_eq(
  format($$select h.enabled from payrail.provider_method_history as h join payrail.bulk_action_records as r
           on r.record_id = h.provider_method_id and r.version_before = h.version where r.bulk_action_id = %s$$, :disable_id),
  $$values (true), (true)$$,
  '... the history entries of the versions it replaced are found by (record_id, version_before)');
reset role;

-- A vector-only write is not a version: not written down.
update payrail.provider_methods
set embedding = '[0,0,1]', embedding_model = 'test-model', embedding_content_hash = content_hash where provider = 'Globex';
select is((select count(*)::int from payrail.bulk_action_records), 2, 'a vector-only write in a bulk action is not written down');

-- Inserts, changes and deletes of a delete's undo, each once per record; a second bulk action in
-- the same transaction ends the first.
set local role payrail_operator;
select payrail.begin_bulk_action('delete', 'records 3', p_with_golden_queries => true) as delete_id \gset
delete from payrail.provider_methods where id = :weather;
select payrail.begin_bulk_action('undo', 'undo of bulk action ' || :delete_id, :delete_id) as undo_id \gset
insert into payrail.provider_methods (provider, method, guidance) values ('Globex', 'Weather', 'Current weather.');
update payrail.provider_methods set urls = '{https://globex.example}' where provider = 'Globex';
update payrail.provider_methods set urls = '{https://globex.example/v2}' where provider = 'Globex';
reset role;
select results_eq(
  format('select bulk_action_id, operation, version_before, version_after from payrail.bulk_action_records where bulk_action_id in (%s, %s) order by bulk_action_id', :delete_id, :undo_id),
  format($$values (%s::bigint, 'delete'::text, 1, null::int), (%s, 'insert', null, 3)$$, :delete_id, :undo_id),
  'a delete keeps the version it found; a record created and changed twice is one insert that left its last version');
select results_eq(
  format('select operation, undoes, with_golden_queries from payrail.bulk_actions where id in (%s, %s) order by id', :delete_id, :undo_id),
  format($$values ('delete'::text, null::bigint, true), ('undo', %s, false)$$, :delete_id),
  'an undo names the action it undoes; a delete says whether the golden queries went with it');

-- An action is undone once, and an undo is not undone.
select throws_ok(format($$select payrail.begin_bulk_action('undo', 'again', %s)$$, :delete_id), '23505', null, 'an action is undone once (bulk_actions_undoes_key)');
select throws_ok(format($$select payrail.begin_bulk_action('undo', 'undo the undo', %s)$$, :undo_id), '22023',
  format('bulk action %s is an undo itself (of bulk action %s); an undo is not undone', :undo_id, :delete_id), 'an undo is not undone');
select results_eq(
  $$select e_sqlstate, e_constraint from pg_temp.error_of($q$select payrail.begin_bulk_action('rename', 'x')$q$)$$,
  $$values ('23514', 'bulk_actions_operation_check')$$, 'an unknown operation is refused, naming the rule');
select results_eq(
  $$select e_sqlstate, e_constraint from pg_temp.error_of($q$select payrail.begin_bulk_action('undo', 'x')$q$)$$,
  $$values ('23514', 'bulk_actions_undoes_check')$$, 'an undo names what it undoes');

-- No role writes either table: the account is the database's.
set local role payrail_operator;
select throws_ok($$insert into payrail.bulk_actions (operation, selection, done_at, done_by, done_by_session_user, transaction_id)
  values ('enable', 'forged', now(), 'eve', 'eve', pg_current_xact_id())$$, '42501', null, 'operator: cannot write a bulk action');
select throws_ok(format('update payrail.bulk_actions set done_by = %L', 'eve'), '42501', null, 'operator: cannot change who did one');
select throws_ok('delete from payrail.bulk_actions', '42501', null, 'operator: cannot delete one');
select throws_ok(format($$insert into payrail.bulk_action_records values (%s, %s, 'update', 1, 2)$$, :disable_id, :weather), '42501', null,
  'operator: cannot write a record into an action');
select throws_ok('delete from payrail.bulk_action_records', '42501', null, 'operator: cannot take one out');
select is((select count(*)::int from payrail.bulk_actions), 3, 'operator: reads the bulk actions');
insert into payrail.bulk_actions (operation, selection) values ('enable', 'by hand') returning id as by_hand_id \gset
reset role;
select results_eq(
  format('select done_by, transaction_id = pg_current_xact_id(), current_setting(%L) from payrail.bulk_actions where id = %s', 'payrail.bulk_action', :by_hand_id),
  format($$values ('payrail_operator'::text, true, '%s'::text)$$, :by_hand_id),
  'operator: a bulk action inserted by hand is begun and stamped the same');
select set_config('payrail.bulk_action', '', true);

-- A session cannot pass its changes off as part of another transaction's action: the setting is
-- believed for an action begun in this transaction only.
select payrail.begin_bulk_action('enable', 'another transaction''s') as other_id \gset
update payrail.bulk_actions set transaction_id = '1' where id = :other_id;
select set_config('payrail.bulk_action', '', true);
set local role payrail_operator;
select set_config('payrail.bulk_action', :'other_id', true);
select throws_ok(format('update payrail.provider_methods set enabled = true where id = %s', :geocode), '22023',
  format('payrail.bulk_action is set to "%s", which names no bulk action begun in this transaction', :other_id),
  'operator: another transaction''s action, named by hand, is refused');
select set_config('payrail.bulk_action', '1; drop table payrail.provider_methods', true);
select throws_ok(format('update payrail.provider_methods set enabled = true where id = %s', :geocode), '22023', null,
  'operator: a setting that is no id is refused');
select set_config('payrail.bulk_action', '', true);
select lives_ok(format('update payrail.provider_methods set enabled = true where id = %s', :geocode), 'operator: cleared, a change is an ordinary one');
reset role;
select is((select count(*)::int from payrail.bulk_action_records where record_id = :geocode), 1, '... and not written down');

-- Agents: nothing.
set local role payrail_agent;
select throws_ok($$select payrail.begin_bulk_action('enable', 'x')$$, '42501', null, 'agent: cannot begin a bulk action');
select throws_ok('select * from payrail.bulk_actions', '42501', null, 'agent: cannot read the bulk actions');
select throws_ok('select * from payrail.bulk_action_records', '42501', null, 'agent: nor their records');
reset role;

select * from finish();
rollback;
