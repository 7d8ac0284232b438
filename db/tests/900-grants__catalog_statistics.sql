-- What the catalog's statistics tell an agent about drafts (docs/security.md). Column
-- statistics hold values (most common names, histograms of text) and stay hidden from a role that
-- cannot read the columns. Table-level figures every role may read (the row estimate, live and
-- dead tuples, sizes) count drafts with the enabled records: the residual exposure docs/security.md
-- states, pinned here so that a change of it is a decision.
begin;
select plan(7);

-- Three drafts: nothing agents may see.
insert into payrail.provider_methods (provider, method, guidance)
values ('Draftco', 'Secret', 'Not public yet.'), ('Draftco', 'Also secret', 'Not public yet.'),
       ('Hushco', 'Unannounced', 'Not public yet.');
-- Statistics with values in them, as autovacuum would gather: column and extended statistics.
create statistics payrail.test_names (mcv) on provider, method from payrail.provider_methods;
analyze payrail.provider_methods;

set local role payrail_agent;
select is(
  (select count(*)::int from pg_catalog.pg_stats where schemaname = 'payrail'), 0,
  'agent: reads no column statistics of the registry (pg_stats: no draft name or text)');
select is(
  (select count(*)::int from pg_catalog.pg_stats_ext where schemaname = 'payrail'), 0,
  'agent: reads no extended statistics of the registry (pg_stats_ext)');
select is(
  (select count(*)::int from pg_catalog.pg_stats_ext_exprs where schemaname = 'payrail'), 0,
  'agent: reads no expression statistics of the registry (pg_stats_ext_exprs)');
select throws_ok(
  $$select * from pg_catalog.pg_statistic$$, '42501', null,
  'agent: cannot read pg_statistic itself');
select throws_ok(
  $$select * from pg_catalog.pg_statistic_ext_data$$, '42501', null,
  'agent: cannot read pg_statistic_ext_data itself');
-- The residual exposure: the table's row estimate counts the drafts.
select is(
  (select reltuples::int from pg_catalog.pg_class where oid = 'payrail.provider_methods'::regclass), 3,
  'agent: the table''s row estimate (pg_class.reltuples) counts drafts, as docs/security.md states');
select ok(
  pg_catalog.pg_total_relation_size('payrail.provider_methods') > 0,
  'agent: the table''s size is readable too, as docs/security.md states');
reset role;

select * from finish();
rollback;
