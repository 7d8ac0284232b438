-- The bounds agent logins are held to (payrail.agent_logins): written by the registry's owner
-- alone, read by operators (preview runs search's check as them), never by agents, who cannot
-- reach them through the check's helpers either; a bound is a duration above 0.
begin;
select plan(14);

insert into payrail.agent_logins (login, statement_timeout, idle_in_transaction_session_timeout)
  values ('payrail_tap_kept_agent', '2s', '10s');

select throws_ok($$insert into payrail.agent_logins (login, statement_timeout) values ('payrail_tap_none', '0')$$,
  '23514', null, 'a bound of 0 (none) is refused: a row says none with NULL');
select throws_ok($$update payrail.agent_logins set idle_in_transaction_session_timeout = '-1s'$$,
  '23514', null, 'a negative bound is refused');
select throws_ok($$update payrail.agent_logins set lock_timeout = '0ms'$$, '23514', null, 'so is 0 with a unit');
select lives_ok($$update payrail.agent_logins set lock_timeout = '1500ms'$$, 'a duration with a unit is a bound');

set local role payrail_agent;
select throws_ok($$select * from payrail.agent_logins$$, '42501', null, 'agent: cannot read the bounds');
select throws_ok($$update payrail.agent_logins set statement_timeout = '1h'$$, '42501', null, 'agent: cannot raise them');
select throws_ok($$delete from payrail.agent_logins$$, '42501', null, 'agent: cannot remove them');
select throws_ok($$insert into payrail.agent_logins (login) values ('payrail_tap_free')$$, '42501', null, 'agent: cannot add a row');
select throws_ok($$select payrail._login_limits_of('payrail_tap_kept_agent')$$, '42501', null,
  'agent: cannot read them through the check''s helper');
reset role;

set local role payrail_operator;
select results_eq($$select statement_timeout, idle_in_transaction_session_timeout from payrail.agent_logins$$,
  $$values ('2s', '10s')$$, 'operator: reads them');
select throws_ok($$update payrail.agent_logins set statement_timeout = '1h'$$, '42501', null, 'operator: cannot change them');
reset role;

set local role payrail_embedder;
select throws_ok($$select * from payrail.agent_logins$$, '42501', null, 'embedder: cannot read them');
select throws_ok($$update payrail.agent_logins set statement_timeout = '1h'$$, '42501', null, 'embedder: cannot change them');
reset role;

select is(payrail._login_limits_of('payrail_tap_kept_agent'),
  array['registry', 'statement_timeout', '2s', 'lock_timeout', '1500ms', 'idle_in_transaction_session_timeout', '10s'],
  'a login with a row: the registry''s bounds');

select * from finish();
rollback;
