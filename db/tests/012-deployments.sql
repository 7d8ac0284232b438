-- The deploy's bookkeeping (db/schema/012-deployments.sql) and its DDL helpers (011-ddl_helpers.sql):
-- the record no role reads or locks, definitions replaced only when they changed, upgrade steps run once, drift noticed.
begin;
select plan(27);

-- No role but the deployer reads the record of applies or takes the lock that serializes them.
select throws_ok(format('set local role %I; select * from payrail.deployments', r), '42501', null,
                 r || ' cannot read payrail.deployments')
from unnest(array['payrail_agent', 'payrail_operator', 'payrail_embedder']) as r;
reset role;
select throws_ok(format('set local role %I; lock table payrail.deployments in exclusive mode', r), '42501', null,
                 r || ' cannot take the lock that serializes applies, so it cannot make an apply wait')
from unnest(array['payrail_agent', 'payrail_operator', 'payrail_embedder']) as r;
reset role;

-- Operators and the embedder see which schema version the registry holds; agents do not.
set local role payrail_operator;
select results_eq(
  $$select product_version is not null, definitions_changed, completed_at is not null, constraints_not_validated
    from payrail.get_schema_version()$$,
  $$values (true, false, true, '{}'::text[])$$,
  'operator: get_schema_version names the product version of the last apply, complete, nothing changed since');
reset role;
select throws_ok('set local role payrail_agent; select * from payrail.get_schema_version()', '42501', null,
                 'agent: cannot call get_schema_version');
reset role;

-- A definition that did not change is left alone: the same constraint and trigger (same oid), no lock.
create temporary table before_oids as
select conname::text as name, oid from pg_constraint where conname = 'provider_methods_version_check'
union all select tgname, oid from pg_trigger where tgname = 'tg_embedding_model__check_vectors';
select lives_ok(
  $$select payrail._ensure_check_constraint('payrail.provider_methods', 'provider_methods_version_check', 'check (version >= 1)');
    select payrail._ensure_trigger('payrail.embedding_model', 'tg_embedding_model__check_vectors', $t$
      create constraint trigger %1$I after update or delete on %2$s deferrable initially deferred
      for each row execute function payrail.tg_embedding_model__check_vectors()$t$)$$,
  'an unchanged constraint and trigger, however written, are left alone');
select set_eq(
  $$select conname::text, oid from pg_constraint where conname = 'provider_methods_version_check'
    union all select tgname, oid from pg_trigger where tgname = 'tg_embedding_model__check_vectors'$$,
  'select name, oid from before_oids',
  'they are the same objects as before');
select is_empty(
  $$select from pg_locks where pid = pg_backend_pid() and mode in ('AccessExclusiveLock', 'ShareRowExclusiveLock', 'ExclusiveLock')
      and relation in ('payrail.provider_methods'::regclass, 'payrail.embedding_model'::regclass)$$,
  'and neither table was locked beyond what a search or an edit takes alongside');

-- In db apply's shared mode a change that needs an exclusive lock raises PYD01 before taking it.
set local payrail.deploy_mode = 'shared';
select throws_ok(
  $$select payrail._ensure_check_constraint('payrail.provider_methods', 'provider_methods_version_check', 'check (version >= 2)')$$,
  'PYD01', null,
  'shared mode: a changed constraint asks for exclusive locks (PYD01)');
select throws_ok(
  $$select payrail._ensure_storage('payrail.provider_methods', 'embedding', 'extended')$$,
  'PYD01', null,
  'shared mode: a storage change asks for exclusive locks (PYD01)');
select is(payrail._definition_of('payrail.provider_methods', 'provider_methods_version_check'),
          'CHECK ((version >= 1))', 'and the constraint is unchanged');

-- Holding the table exclusively (db apply's exclusive mode), the change is made NOT VALID, for
-- db apply to validate after its transaction.
set local payrail.deploy_mode = 'exclusive';
lock table payrail.provider_methods in access exclusive mode;
select lives_ok(
  $$select payrail._ensure_check_constraint('payrail.provider_methods', 'provider_methods_version_check', 'check (version >= 2)')$$,
  'exclusive mode: the changed constraint is replaced');
select results_eq(
  $$select pg_get_constraintdef(oid), convalidated from pg_constraint where conname = 'provider_methods_version_check'$$,
  $$values ('CHECK ((version >= 2)) NOT VALID', false)$$,
  'added NOT VALID: no scan of the table under the exclusive lock');
select is((select constraints_not_validated from payrail.get_schema_version()),
          array['provider_methods.provider_methods_version_check'],
          'get_schema_version names it until it is validated');

-- Run alone (psql's install: no mode), a changed constraint is validated at once.
set local payrail.deploy_mode = '';
select lives_ok(
  $$select payrail._ensure_check_constraint('payrail.provider_methods', 'provider_methods_version_check', 'check (version >= 1)')$$,
  'psql: the constraint is replaced');
select results_eq(
  $$select pg_get_constraintdef(oid), convalidated from pg_constraint where conname = 'provider_methods_version_check'$$,
  $$values ('CHECK ((version >= 1))', true)$$,
  'and validated in the same transaction');

-- A definition changed by hand is noticed: db apply is due.
comment on function payrail.search_provider_methods(text, vector, text) is 'changed by hand';
select is((select definitions_changed from payrail.get_schema_version()), true,
          'a comment changed by hand: get_schema_version says the definitions changed');

-- Every upgrade step runs through one template: once per registry, recorded; a new registry
-- records it as not needed without running it; a step that fails is not recorded.
create temporary table step_runs (name text);
select lives_ok($$select payrail._run_upgrade_step('999-test_step', 'begin insert into pg_temp.step_runs values (''999''); end')$$,
                'an upgrade step this registry never had runs');
select lives_ok($$select payrail._run_upgrade_step('999-test_step', 'begin insert into pg_temp.step_runs values (''999''); end')$$,
                'and is skipped the second time');
select is((select count(*)::int from pg_temp.step_runs), 1, '... so its block ran once');
select throws_ok($$select payrail._run_upgrade_step('997-test_step', 'begin raise exception ''step broke''; end')$$,
                 'P0001', 'step broke', 'a failing step raises its own error');
select set_config('payrail.new_registry', 'true', true);
select lives_ok($$select payrail._run_upgrade_step('998-test_step', 'begin insert into pg_temp.step_runs values (''998''); end')$$,
                'a registry created by this apply needs no upgrade step');
select is((select count(*)::int from pg_temp.step_runs), 1, '... so its block does not run');
select results_eq(
  $$select name, ran from payrail.applied_upgrades where name like '99%-test_step' order by name$$,
  $$values ('998-test_step', false), ('999-test_step', true)$$,
  'both are recorded, with whether the step ran; the failed one is not');

select * from finish();
rollback;
