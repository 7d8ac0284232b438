-- The registry's search path (010-schema.sql), so this file alone, rerun, leaves the same catalog.
do $$ begin perform pg_catalog.set_config('search_path', payrail._search_path(), false); end $$;

-- The bounds `payrail-embedder agent add` gives an agent's login, kept where only the registry's
-- owner writes. PostgreSQL lets a login change its own settings (ALTER ROLE itself SET
-- statement_timeout = 0, also IN DATABASE), so search holds a session to these and not to the
-- login's settings (payrail._refuse_lifted_limits, db/functions/200-search.sql); a login with no
-- row here is held to its settings, as PostgreSQL gave them (payrail._login_limits_of, below;
-- docs/security.md).

create or replace function payrail._milliseconds(p_duration text)
returns numeric
language sql
immutable
security invoker
set search_path = pg_catalog, pg_temp
as $$
  select case when p_duration ~ '^\s*[0-9.]+\s*$' then p_duration::numeric
              else extract(epoch from p_duration::interval) * 1000 end
$$;

comment on function payrail._milliseconds(text) is
$$A duration setting's value in milliseconds: a number alone (milliseconds), or with a unit (300ms, 2s, 1min).$$;

create table if not exists payrail.agent_logins (
  login name,
  statement_timeout text,
  idle_in_transaction_session_timeout text,
  lock_timeout text,
  given_by text not null default session_user,
  given_at timestamptz not null default pg_catalog.now(),
  constraint agent_logins_pkey primary key (login)
);

-- A bound is a duration above 0: 0 would mean none, which a row says with NULL.
select payrail._ensure_check_constraint('payrail.agent_logins', 'agent_logins_statement_timeout_check',
  $$check (payrail._milliseconds(statement_timeout) operator(pg_catalog.>) 0)$$);
select payrail._ensure_check_constraint('payrail.agent_logins', 'agent_logins_idle_in_transaction_session_timeout_check',
  $$check (payrail._milliseconds(idle_in_transaction_session_timeout) operator(pg_catalog.>) 0)$$);
select payrail._ensure_check_constraint('payrail.agent_logins', 'agent_logins_lock_timeout_check',
  $$check (payrail._milliseconds(lock_timeout) operator(pg_catalog.>) 0)$$);

comment on table payrail.agent_logins is
$$The bounds an agent's login is held to in a search: what `payrail-embedder agent add` gave it.

Only the registry's owner writes it; operators read it (preview_search runs search's check as
them), agents cannot: a login may change its own settings (ALTER ROLE), never these.
payrail.search_provider_methods, query_takes_name_path and preview_search refuse a session that
runs above a bound of its login's row (PYS01); a login without a row is held to its own settings
instead (payrail._login_limits_of). A bound counts from the login's next session.$$;
comment on column payrail.agent_logins.login is 'The login (a role name), as session_user names it.';
comment on column payrail.agent_logins.statement_timeout is
  'The longest statement_timeout its sessions may search with, as PostgreSQL writes durations (2s, 1500ms); NULL: no bound.';
comment on column payrail.agent_logins.idle_in_transaction_session_timeout is
  'The longest idle_in_transaction_session_timeout its sessions may search with; NULL: no bound.';
comment on column payrail.agent_logins.lock_timeout is
  'The longest lock_timeout its sessions may search with; NULL: no bound (agent add gives none: statement_timeout bounds a wait for a lock too).';
comment on column payrail.agent_logins.given_by is 'Login that gave the bounds (session_user): agent add''s, or the deployer''s for a login the upgrade adopted.';
comment on column payrail.agent_logins.given_at is 'When the bounds were given.';

create or replace function payrail._login_limits_of(p_login name)
returns text[]
language sql
stable
security invoker
-- Nothing but pg_catalog's names (db/CONVENTIONS.md): nothing planted is found from here.
set search_path = pg_catalog, pg_temp
as $$
  -- The bounds `agent add` gave the login, kept in the registry, which the login cannot change.
  -- Else the limits its settings give it (ALTER ROLE login [IN DATABASE db] SET ...), which
  -- PostgreSQL applies when it connects: the one for this database, else the one for every
  -- database. Never those of the roles it is granted: PostgreSQL applies none of them.
  with given as (
    select distinct on (c.name) c.name, c.value
    from pg_db_role_setting as s
    cross join lateral unnest(s.setconfig) as e(setting)
    cross join lateral (select split_part(e.setting, '=', 1), substr(e.setting, strpos(e.setting, '=') + 1)) as c(name, value)
    where s.setrole = (select r.oid from pg_roles as r where r.rolname = p_login)
      and s.setdatabase = any (array[0, (select d.oid from pg_database as d where d.datname = current_database())])
    order by c.name, s.setdatabase desc
  )
  select coalesce(
    (select array['registry', 'statement_timeout', a.statement_timeout, 'lock_timeout', a.lock_timeout,
                  'idle_in_transaction_session_timeout', a.idle_in_transaction_session_timeout]
     from payrail.agent_logins as a where a.login = p_login),
    (select array['login'] || array_agg(x order by w.n, x.n)
     from unnest(array['statement_timeout', 'lock_timeout', 'idle_in_transaction_session_timeout']) with ordinality as w(name, n)
     left join given as g on g.name = w.name,
     lateral unnest(array[w.name, g.value]) with ordinality as x(x, n)))
$$;

comment on function payrail._login_limits_of(name) is
$$Where p_login's limits are kept ('registry': payrail.agent_logins; 'login': its own settings, ALTER ROLE ... SET, which it may change itself), then statement_timeout, lock_timeout and idle_in_transaction_session_timeout, each followed by its value in this database (NULL: none).$$;

-- A registry upgraded from before this table (db/upgrades/010-agent_logins.sql ran in this apply)
-- adopts the agent logins it had, once: each login granted payrail_agent (at any depth; not an
-- operator's, the embedder's or a superuser) that is given a statement_timeout or an
-- idle_in_transaction_session_timeout, as `agent add` gave both, keeps the value it is given, or
-- agent add's default (2s, 10s) where it is given none or 0 (none): the upgrade cannot tell a
-- bound the login lifted itself from one it never had. A login given neither is not adopted.
do $$
begin
  if coalesce(pg_catalog.current_setting('payrail.adopt_agent_logins', true), '') operator(pg_catalog.=) 'true' then
    -- The table is new and empty: each login's limits are its settings' ('login').
    insert into payrail.agent_logins (login, statement_timeout, idle_in_transaction_session_timeout, lock_timeout)
    select r.rolname,
           case when payrail._milliseconds(l.limits[3]) operator(pg_catalog.>) 0 then l.limits[3] else '2s' end,
           case when payrail._milliseconds(l.limits[7]) operator(pg_catalog.>) 0 then l.limits[7] else '10s' end,
           case when payrail._milliseconds(l.limits[5]) operator(pg_catalog.>) 0 then l.limits[5] end
    from pg_catalog.pg_roles as r
    cross join lateral (select payrail._login_limits_of(r.rolname)) as l(limits)
    where r.rolcanlogin and not r.rolsuper
      and pg_catalog.pg_has_role(r.oid, 'payrail_agent', 'MEMBER')
      and not pg_catalog.pg_has_role(r.oid, 'payrail_operator', 'MEMBER')
      and not pg_catalog.pg_has_role(r.oid, 'payrail_embedder', 'MEMBER')
      and (l.limits[3] is not null or l.limits[7] is not null);
    perform pg_catalog.set_config('payrail.adopt_agent_logins', '', false);
  end if;
end
$$;
