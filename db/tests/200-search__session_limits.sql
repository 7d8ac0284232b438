-- The limits a DBA gives an agent login (ALTER ROLE login [IN DATABASE db] SET ...) bind its
-- searches: a session that set one off, or above its login's value, is refused (PYS01), whatever
-- way it set it; at or below the login's value it searches. Only the login's own settings count,
-- as PostgreSQL applies only those. A login given bounds by `agent add` (a row of
-- payrail.agent_logins) is held to those, whatever it gives itself.
begin;
select plan(21);

create role payrail_tap_limits_agent login;
grant payrail_agent to payrail_tap_limits_agent;
alter role payrail_tap_limits_agent set statement_timeout = '5s';
alter role payrail_tap_limits_agent set idle_in_transaction_session_timeout = 10000;
create role payrail_tap_limits_free_agent login;
grant payrail_agent to payrail_tap_limits_free_agent;

-- The session's own values, as the login got them when it connected.
set local statement_timeout = '5s';
set local idle_in_transaction_session_timeout = '10s';
set local session authorization payrail_tap_limits_agent;

-- No model yet: the semantic path answers nothing, and no error.
select lives_ok($$select * from payrail.search_provider_methods('find a hotel', '[1,0,0]')$$, 'at the login''s values: it searches');
set local statement_timeout = '4s';
select lives_ok($$select payrail.query_takes_name_path('Stripe')$$, 'a lower statement_timeout: it searches');
set local statement_timeout = 0;
select throws_ok($$select * from payrail.search_provider_methods('Stripe')$$, 'PYS01',
  'statement_timeout is 0 (off) in this session, but login payrail_tap_limits_agent is given 5s: a session may not lift the limits of its login',
  'statement_timeout off: search refuses, naming the setting, both values and the login');
select throws_ok($$select payrail.query_takes_name_path('Stripe')$$, 'PYS01', null, 'statement_timeout off: query_takes_name_path refuses');
select throws_ok($$select * from payrail.search_provider_methods('find a hotel', '[1,0,0]')$$, 'PYS01', null,
  'statement_timeout off: the semantic path refuses too');
set local statement_timeout = '1min';
select throws_ok($$select * from payrail.search_provider_methods('Stripe')$$, 'PYS01',
  'statement_timeout is 1min in this session, but login payrail_tap_limits_agent is given 5s: a session may not lift the limits of its login',
  'statement_timeout above the login''s: search refuses');
select throws_ok(
  $$select count(*) from (select payrail.search_provider_methods('Stripe') from generate_series(1, 20000)) as s$$, 'PYS01', null,
  'a statement of 20,000 searches stops at its first');
set local statement_timeout = '5s';
set local idle_in_transaction_session_timeout = 0;
select throws_ok($$select * from payrail.search_provider_methods('Stripe')$$, 'PYS01',
  'idle_in_transaction_session_timeout is 0 (off) in this session, but login payrail_tap_limits_agent is given 10000: a session may not lift the limits of its login',
  'idle_in_transaction_session_timeout off: search refuses');
set local idle_in_transaction_session_timeout = '10s';
set local lock_timeout = 0;
select lives_ok($$select * from payrail.search_provider_methods('find a hotel', '[1,0,0]')$$, 'a limit the login is not given may be anything');
reset session authorization;

-- A setting for this database wins over the login's setting for all databases.
create role payrail_tap_limits_agent_here login;
grant payrail_agent to payrail_tap_limits_agent_here;
alter role payrail_tap_limits_agent_here set statement_timeout = '5s';
do $$ begin execute pg_catalog.format('alter role payrail_tap_limits_agent_here in database %I set statement_timeout = %L',
                                      pg_catalog.current_database(), '3s'); end $$;
set local statement_timeout = '4s';
set local session authorization payrail_tap_limits_agent_here;
select throws_ok($$select * from payrail.search_provider_methods('Stripe')$$, 'PYS01',
  'statement_timeout is 4s in this session, but login payrail_tap_limits_agent_here is given 3s: a session may not lift the limits of its login',
  'the login''s setting for this database is the one that counts');
reset session authorization;

-- A login's limits are read once per session, at its first search (PostgreSQL applied them
-- when it connected): changed since, they count from its next session.
alter role payrail_tap_limits_agent set statement_timeout = '1s';
set local statement_timeout = '4s';
set local session authorization payrail_tap_limits_agent;
select lives_ok($$select * from payrail.search_provider_methods('find a hotel', '[1,0,0]')$$,
  'a limit lowered after the session''s first search counts from the next session');
reset session authorization;

-- A group role's settings reach no member, so they bind none.
alter role payrail_agent set statement_timeout = '1s';
set local statement_timeout = 0;
set local session authorization payrail_tap_limits_free_agent;
select lives_ok($$select * from payrail.search_provider_methods('find a hotel', '[1,0,0]')$$,
  'a login given no limit, a member of a role given one: it searches');
reset session authorization;

-- Operators preview through the same search.
create role payrail_tap_limits_operator login;
grant payrail_operator to payrail_tap_limits_operator;
alter role payrail_tap_limits_operator set statement_timeout = '5s';
insert into payrail.provider_methods (provider, method, guidance) values ('Draftco', 'Launch', 'Purpose: a draft.');
set local session authorization payrail_tap_limits_operator;
select throws_ok($$select * from payrail.preview_search('Draftco', 'Launch', 'Draftco')$$, 'PYS01', null,
  'preview_search refuses a lifted limit too');
reset session authorization;

-- The bounds agent add gave, kept by the registry: the login's own settings no longer count, and
-- PostgreSQL lets a login change them itself (ALTER ROLE itself, also IN DATABASE).
create role payrail_tap_limits_kept login;
grant payrail_agent to payrail_tap_limits_kept;
alter role payrail_tap_limits_kept set statement_timeout = '2s';
alter role payrail_tap_limits_kept set idle_in_transaction_session_timeout = '10s';
alter role payrail_tap_limits_kept set lock_timeout = '1s';
insert into payrail.agent_logins (login, statement_timeout, idle_in_transaction_session_timeout)
  values ('payrail_tap_limits_kept', '2s', '10s');
set local statement_timeout = '2s';
set local idle_in_transaction_session_timeout = '10s';
set local session authorization payrail_tap_limits_kept;
select lives_ok($$alter role payrail_tap_limits_kept set statement_timeout = 0$$, 'PostgreSQL lets a login lift its own setting');
select lives_ok(
  format($$alter role payrail_tap_limits_kept in database %I set statement_timeout = '1min'$$, current_database()),
  '... and its setting for this database');
-- Its next session starts at the value it gave itself.
set local statement_timeout = '1min';
select throws_ok($$select * from payrail.search_provider_methods('Stripe')$$, 'PYS01',
  'statement_timeout is 1min in this session, but login payrail_tap_limits_kept is given 2s: a session may not lift the limits of its login',
  'a login that raised its own setting: search holds it to the bound the registry keeps');
set local statement_timeout = 0;
select throws_ok($$select payrail.query_takes_name_path('Stripe')$$, 'PYS01', null, '... and one that turned it off');
set local statement_timeout = '2s';
select lives_ok($$select * from payrail.search_provider_methods('find a hotel', '[1,0,0]')$$, 'at the kept bound: it searches');
set local statement_timeout = '500ms';
select lives_ok($$select payrail.query_takes_name_path('Stripe')$$, 'below it: it searches');
set local idle_in_transaction_session_timeout = 0;
select throws_ok($$select * from payrail.search_provider_methods('Stripe')$$, 'PYS01',
  'idle_in_transaction_session_timeout is 0 (off) in this session, but login payrail_tap_limits_kept is given 10s: a session may not lift the limits of its login',
  'idle_in_transaction_session_timeout off: refused against the kept bound');
set local idle_in_transaction_session_timeout = '10s';
set local lock_timeout = 0;
select lives_ok($$select * from payrail.search_provider_methods('find a hotel', '[1,0,0]')$$,
  'a bound the registry does not keep (lock_timeout) is not the login''s setting''s either');
reset session authorization;

select * from finish();
rollback;
