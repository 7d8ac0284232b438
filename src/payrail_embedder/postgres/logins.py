"""`payrail-embedder operator add` and `agent add`: PostgreSQL logins with the grants the backoffice
needs, or with the agents' one grant and the bounds docs/security.md asks of every agent login.

Neither command widens a role: an existing role that could read or write more in the registry than
the login it is to become, by any route (an attribute, a role it is a member of at any depth, an
ownership, a grant of its own), or that others are members of, is refused in words that say why,
and nothing changes. The bounds `agent add` gives are kept in payrail.agent_logins, which only the
registry's owner writes, since a login may change its own settings (ALTER ROLE itself).

The password never reaches the server or a log in clear: libpq turns it into the verifier the
server's password_encryption asks for (SCRAM-SHA-256 by default), and the statement carries that.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import psycopg
from psycopg import sql

from ..base.errors import CodedError
from ..base.reports import Report
from ..base.safe_text import escape_unprintable
from .connection import login_url, one_row, one_value

# The grants the backoffice needs, and why: it saves the public fields and their vectors together.
OPERATOR_GRANTS = {
    "payrail_operator": "to edit records",
    "payrail_embedder": "to save their vectors",
}
AGENT_GRANT = "payrail_agent"
# The registry's group roles (db/schema/005-roles.sql): logins are granted them, none is one.
GROUP_ROLES = (AGENT_GRANT, *OPERATOR_GRANTS)
# Roles PostgreSQL defines that read or write what no grant of the registry gives: every table
# (pg_read_all_data, pg_write_all_data), the server's files and programs, every session's
# statements (pg_read_all_stats), every table's locks and maintenance (pg_maintain, PostgreSQL 17).
DATA_ROLES = (
    "pg_read_all_data",
    "pg_write_all_data",
    "pg_read_server_files",
    "pg_write_server_files",
    "pg_execute_server_program",
    "pg_read_all_stats",
    "pg_maintain",
)
# NAMEDATALEN - 1: PostgreSQL cuts a longer name short, so it would name another role.
MAX_ROLE_NAME_BYTES = 63
# How many reasons a refusal names before "and N more".
SHOWN_REASONS = 3
# agent add's bounds, each the setting search holds a session to and its option's name.
AGENT_BOUNDS = {"statement_timeout": "--statement-timeout", "idle_in_transaction_session_timeout": "--idle-in-transaction-timeout"}

# Why an existing role may not become the login asked for: one row per reason, in the order they
# are told. rank 1: its attributes; 2: it is a group role of the registry; 3: a role that is a
# member of it (route); 4: a registry group role it must not be a member of; 5: a role of
# DATA_ROLES it is a member of; 6: what it owns, or a role it is a member of owns; 7: grants on
# the registry's objects to it, or to a role it is a member of, that no role of the login's grants
# holds. Membership is pg_has_role's MEMBER, at any depth, whether it inherits or must SET ROLE;
# route is NULL for the role itself, through the role it is directly a member of on the way.
RIGHTS_BEYOND = """
with target as (
  select r.oid, r.rolname, r.rolsuper, r.rolcreaterole, r.rolbypassrls, r.rolreplication
  from pg_catalog.pg_roles as r where r.rolname = %(name)s
),
routes as (
  select g.oid, g.rolname::text as name, g.oid = t.oid as itself,
         case when g.oid = t.oid or exists (select from pg_catalog.pg_auth_members as m where m.member = t.oid and m.roleid = g.oid) then null
              else (select p.rolname::text from pg_catalog.pg_auth_members as m join pg_catalog.pg_roles as p on p.oid = m.roleid
                    where m.member = t.oid and pg_catalog.pg_has_role(p.oid, g.oid, 'MEMBER') order by p.rolname limit 1) end as through
  from target as t join pg_catalog.pg_roles as g on pg_catalog.pg_has_role(t.oid, g.oid, 'MEMBER')
),
baseline as (select b.oid from pg_catalog.pg_roles as b where b.rolname = any(%(baseline)s)),
schemas as (
  select n.oid, n.nspname, n.nspowner, n.nspacl from pg_catalog.pg_namespace as n
  where n.nspname = 'payrail' or n.oid = (select e.extnamespace from pg_catalog.pg_extension as e where e.extname = 'vector')
),
owned as (
  select d.datdba as owner, 1 as n, 'the database ' || pg_catalog.quote_ident(d.datname) as object
  from pg_catalog.pg_database as d where d.datname = pg_catalog.current_database()
  union all
  select s.nspowner, 2, 'the schema ' || pg_catalog.quote_ident(s.nspname) from schemas as s
  union all
  select e.extowner, 3, 'the extension vector' from pg_catalog.pg_extension as e where e.extname = 'vector'
  union all
  select c.relowner, 4, 'payrail.' || pg_catalog.quote_ident(c.relname) from pg_catalog.pg_class as c
  where c.relnamespace = pg_catalog.to_regnamespace('payrail')
  union all
  select p.proowner, 5, 'payrail.' || pg_catalog.quote_ident(p.proname) || '(' || pg_catalog.pg_get_function_identity_arguments(p.oid) || ')'
  from pg_catalog.pg_proc as p
  where p.pronamespace = pg_catalog.to_regnamespace('payrail')
  union all
  select y.typowner, 6, 'payrail.' || pg_catalog.quote_ident(y.typname) from pg_catalog.pg_type as y
  where y.typnamespace = pg_catalog.to_regnamespace('payrail') and y.typrelid = 0 and y.typcategory <> 'A'
),
granted as (
  select a.grantee, 1 as n, a.privilege_type || ' on payrail.' || pg_catalog.quote_ident(c.relname) as what
  from pg_catalog.pg_class as c cross join lateral pg_catalog.aclexplode(c.relacl) as a
  where c.relnamespace = pg_catalog.to_regnamespace('payrail')
    and not exists (select from baseline as b
                    where case when c.relkind = 'S' then pg_catalog.has_sequence_privilege(b.oid, c.oid, a.privilege_type)
                               else pg_catalog.has_table_privilege(b.oid, c.oid, a.privilege_type) end)
  union all
  select a.grantee, 2, a.privilege_type || ' on payrail.' || pg_catalog.quote_ident(c.relname) || ' (' || pg_catalog.quote_ident(t.attname) || ')'
  from pg_catalog.pg_attribute as t join pg_catalog.pg_class as c on c.oid = t.attrelid
  cross join lateral pg_catalog.aclexplode(t.attacl) as a
  where c.relnamespace = pg_catalog.to_regnamespace('payrail') and not t.attisdropped
    and not exists (select from baseline as b where pg_catalog.has_column_privilege(b.oid, c.oid, t.attnum, a.privilege_type))
  union all
  select a.grantee, 3, 'EXECUTE on payrail.' || pg_catalog.quote_ident(p.proname) || '(' || pg_catalog.pg_get_function_identity_arguments(p.oid) || ')'
  from pg_catalog.pg_proc as p cross join lateral pg_catalog.aclexplode(p.proacl) as a
  where p.pronamespace = pg_catalog.to_regnamespace('payrail')
    and not exists (select from baseline as b where pg_catalog.has_function_privilege(b.oid, p.oid, 'EXECUTE'))
  union all
  select a.grantee, 4, a.privilege_type || ' on the schema ' || pg_catalog.quote_ident(s.nspname)
  from schemas as s cross join lateral pg_catalog.aclexplode(s.nspacl) as a
  where not exists (select from baseline as b where pg_catalog.has_schema_privilege(b.oid, s.oid, a.privilege_type))
)
select * from (
  select 1 as rank, 1 as n, null::text as route, null::text as through, 'is a superuser' as what from target where rolsuper
  union all select 1, 2, null, null, 'may create roles (CREATEROLE)' from target where rolcreaterole
  union all select 1, 3, null, null, 'bypasses row-level security (BYPASSRLS)' from target where rolbypassrls
  union all select 1, 4, null, null, 'may copy the whole server by replication (REPLICATION)' from target where rolreplication
  union all select 2, 1, null, null, 'is one of the registry''s group roles, which logins are granted' from target where rolname = any(%(group_roles)s)
  union all select 3, 1, m.rolname::text, null, null
    from target as t join pg_catalog.pg_auth_members as a on a.roleid = t.oid join pg_catalog.pg_roles as m on m.oid = a.member
  union all select 4, 1, r.name, r.through, null from routes as r where r.name = any(%(forbidden)s)
  union all select 5, 1, r.name, r.through, null from routes as r where r.name = any(%(data_roles)s)
  union all select 6, o.n, case when r.itself then null else r.name end, r.through, 'owns ' || o.object
    from routes as r join owned as o on o.owner = r.oid
  union all select 7, g.n, case when r.itself then null else r.name end, r.through, 'holds ' || g.what
    from routes as r join granted as g on g.grantee = r.oid
) as reasons
order by rank, route nulls first, n, what
"""


class LoginRefused(CodedError, ValueError):
    """A name or password that cannot make a login, or a role that must not become one."""

    code = "invalid_input"


class BoundsNotWritable(CodedError):
    """agent add cannot keep the login's bounds: the registry has no payrail.agent_logins, or this role may not write it."""

    code = "not_permitted"


def shown_name(name: str) -> str:
    """A role's name as people read it: bare when it is a plain lowercase identifier, else in double
    quotes as SQL writes it (a quote in it doubled), every character that would not show escaped."""
    if not re.fullmatch(r"[a-z_][a-z0-9_$]*", name):
        name = '"' + name.replace('"', '""') + '"'
    return escape_unprintable(name)


def check_name(name: str, password: str | None = None) -> None:
    if not name:
        raise LoginRefused("name the login")
    if len(name.encode("utf-8")) > MAX_ROLE_NAME_BYTES:
        raise LoginRefused(f"a PostgreSQL role name has at most {MAX_ROLE_NAME_BYTES} bytes")
    if "\x00" in name + (password or ""):
        raise LoginRefused("a role name or password cannot contain the NUL character")


def check_login(name: str, password: str) -> None:
    check_name(name, password)
    if not password:
        raise LoginRefused("the password is empty: the backoffice signs in only with a password PostgreSQL checks")


def _password_clause(conn: psycopg.Connection, name: str, password: str | None) -> sql.Composable:
    if password is None:
        return sql.SQL("password null")
    verifier = conn.pgconn.encrypt_password(password.encode("utf-8"), name.encode("utf-8"), None).decode("ascii")
    return sql.SQL("password {}").format(sql.Literal(verifier))


def _refuse_wider(conn: psycopg.Connection, name: str, becoming: str, baseline: list[str], forbidden: dict[str, str], advice: str) -> None:
    """Raises LoginRefused, naming why, when the existing role name could read or write more in the
    registry than baseline's roles give (or others would gain through it); forbidden maps the group
    roles it must not be a member of to what that means."""
    rows = conn.execute(
        RIGHTS_BEYOND,
        {"name": name, "baseline": baseline, "group_roles": list(GROUP_ROLES), "forbidden": list(forbidden), "data_roles": list(DATA_ROLES)},
    ).fetchall()
    reasons: list[str] = []
    members: list[str] = []
    told_routes: set[str | None] = set()
    for rank, _, route, through, what in rows:
        if rank == 3:
            members.append(shown_name(route))
            continue
        if rank >= 4:
            # One reason for each role it is (or is a member of): the first, in the order above.
            if route in told_routes:
                continue
            told_routes.add(route)
        member_of = "" if route is None else f"is a member of {shown_name(route)}" + (f" (through {shown_name(through)})" if through else "")
        if rank in (4, 5):
            reasons.append(f"it {member_of}{forbidden.get(route, '')}")
        elif route is None:
            reasons.append(f"it {what}")
        else:
            reasons.append(f"it {member_of}, which {what}")
    if members:
        reasons.insert(0, f"others are members of it ({', '.join(members)}): they would be given what it is given")
    if reasons:
        more = f"; and {len(reasons) - SHOWN_REASONS} more" if len(reasons) > SHOWN_REASONS else ""
        raise LoginRefused(f"{shown_name(name)} cannot become {becoming}: {'; '.join(reasons[:SHOWN_REASONS])}{more}. {advice}; nothing was changed")


def _role_exists(conn: psycopg.Connection, name: str) -> bool:
    return conn.execute("select from pg_catalog.pg_roles where rolname = %s", (name,)).fetchone() is not None


@dataclass(frozen=True)
class OperatorAdded(Report):
    """`operator add`: the login, whether it was created (or its password and grants set), and its grants."""

    login: str
    created: bool

    def to_json(self) -> dict:
        return {"login": self.login, "created": self.created, "grants": list(OPERATOR_GRANTS)}

    def describe(self) -> list[str]:
        login = shown_name(self.login)
        return [f"{'created' if self.created else 'updated'} login {login} with payrail_operator and payrail_embedder: sign in to the backoffice as {login}"]


def add_operator(conn: psycopg.Connection, name: str, password: str) -> bool:
    """Creates the login name with password and grants it OPERATOR_GRANTS; for an existing role
    that gains nothing else by it (_refuse_wider) and is no agent's login, sets its password and
    grants. Returns whether the login was created."""
    check_login(name, password)
    role = sql.Identifier(name)
    with conn.transaction():
        existing = _role_exists(conn, name)
        if existing:
            _refuse_wider(
                conn,
                name,
                "an operator's login",
                list(OPERATOR_GRANTS),
                {AGENT_GRANT: ": it is an agent's login, and agents would sign in to the backoffice with it"},
                "A backoffice login is a person's own, granted payrail_operator and payrail_embedder and nothing more: choose another name",
            )
        verb = "alter" if existing else "create"
        conn.execute(sql.SQL(verb + " role {} login {}").format(role, _password_clause(conn, name, password)))
        conn.execute(sql.SQL("grant {} to {}").format(sql.SQL(", ").join(map(sql.Identifier, OPERATOR_GRANTS)), role))
    return not existing


@dataclass(frozen=True)
class AgentLogin:
    """What `agent add` gives a login: payrail_agent and nothing else, and its bounds."""

    name: str
    password: str | None  # None: no password, for peer or certificate authentication
    connection_limit: int
    statement_timeout: str
    idle_in_transaction_timeout: str


@dataclass(frozen=True)
class AgentAdded(Report):
    """`agent add`: the login, whether it was created (or set anew), what it was given (its bounds as
    PostgreSQL writes them), and the other roles it already was a member of, which give it nothing
    in the registry."""

    login: AgentLogin
    created: bool
    url: str  # connection.login_url's: where the login connects, without a password
    other_roles: tuple[str, ...] = ()

    def to_json(self) -> dict:
        return {
            "login": self.login.name,
            "created": self.created,
            "url": self.url,
            "grants": [AGENT_GRANT],
            "otherRoles": list(self.other_roles),
            "connectionLimit": self.login.connection_limit,
            "statementTimeout": self.login.statement_timeout,
            "idleInTransactionTimeout": self.login.idle_in_transaction_timeout,
        }

    def describe(self) -> list[str]:
        how = "without a password (peer or certificate authentication)" if self.login.password is None else "with a password"
        others = f" (its other roles, {', '.join(map(shown_name, self.other_roles))}, give it nothing in this registry)" if self.other_roles else ""
        return [
            f"{'created' if self.created else 'updated'} login {shown_name(self.login.name)} {how}, granted payrail_agent only{others}, "
            f"at most {self.login.connection_limit} connections, searches held to statement_timeout {self.login.statement_timeout} "
            f"and idle_in_transaction_session_timeout {self.login.idle_in_transaction_timeout} (kept by the registry)",
            f"agents connect with {self.url}" + (" (the password apart: in PGPASSWORD or ~/.pgpass)" if self.login.password else ""),
        ]


def check_agent(login: AgentLogin) -> None:
    check_name(login.name, login.password)
    if login.password == "":
        raise LoginRefused("the password is empty: give one, or --no-password for peer or certificate authentication")


def _bound(conn: psycopg.Connection, setting: str, value: str) -> str:
    """value as PostgreSQL writes the setting (2000 -> 2s), judged by PostgreSQL (a wrong one is
    refused in its words); the setting is put back in the same statement, so agent add's own
    statements never run under it. A bound of 0 is none, and refused."""
    shown = one_value(
        conn.execute(
            """select pg_catalog.set_config(%(setting)s, %(value)s, true), pg_catalog.set_config(%(setting)s, o.value, true)
               from (select pg_catalog.current_setting(%(setting)s) offset 0) as o(value)""",
            {"setting": setting, "value": value},
        )
    )
    if shown == "0":
        raise LoginRefused(
            f"{AGENT_BOUNDS[setting]} 0 would leave the login's {setting} without a bound, and agent add gives every agent's login one: "
            "give the longest it may take, above 0; nothing was changed"
        )
    return shown


def _require_writable_bounds(conn: psycopg.Connection) -> None:
    table, writable = one_row(
        conn.execute(
            """select t.oid is not null, pg_catalog.has_table_privilege(t.oid, 'SELECT') and pg_catalog.has_table_privilege(t.oid, 'INSERT')
                      and pg_catalog.has_table_privilege(t.oid, 'UPDATE')
               from (select pg_catalog.to_regclass('payrail.agent_logins')) as t(oid)"""
        )
    )
    if not table:
        raise BoundsNotWritable("the registry has no payrail.agent_logins, where agent add keeps a login's bounds: run `payrail-embedder db apply` first")
    if not writable:
        raise BoundsNotWritable(
            "only the registry's owner writes payrail.agent_logins, where agent add keeps a login's bounds: "
            "run agent add as the role `db apply` runs as, or as a superuser; nothing was changed"
        )


def add_agent(conn: psycopg.Connection, login: AgentLogin) -> AgentAdded:
    """Creates the login (or, for an existing role, sets the same) granted payrail_agent, with a
    connection limit and the timeouts search holds its sessions to, kept in payrail.agent_logins.
    An existing role that could read or write more than an agent may, by any route, or that
    others are members of, is refused rather than made an agent's (_refuse_wider)."""
    check_agent(login)
    role = sql.Identifier(login.name)
    with conn.transaction():
        _require_writable_bounds(conn)
        statement_timeout = _bound(conn, "statement_timeout", login.statement_timeout)
        idle_timeout = _bound(conn, "idle_in_transaction_session_timeout", login.idle_in_transaction_timeout)
        existing = _role_exists(conn, login.name)
        if existing:
            _refuse_wider(
                conn,
                login.name,
                "an agent's login",
                [AGENT_GRANT],
                dict.fromkeys(OPERATOR_GRANTS, ", which reads drafts"),
                "An agent's login may only search: choose another name, or take back what it has beyond payrail_agent",
            )
        verb = "alter" if existing else "create"
        conn.execute(
            sql.SQL(verb + " role {} login {} connection limit {}").format(
                role, _password_clause(conn, login.name, login.password), sql.Literal(login.connection_limit)
            )
        )
        conn.execute(sql.SQL("grant {} to {}").format(sql.Identifier(AGENT_GRANT), role))
        # Where its sessions start; search holds them to the bounds kept below, whatever the login
        # sets itself later.
        conn.execute(sql.SQL("alter role {} set statement_timeout = {}").format(role, sql.Literal(statement_timeout)))
        conn.execute(sql.SQL("alter role {} set idle_in_transaction_session_timeout = {}").format(role, sql.Literal(idle_timeout)))
        conn.execute(
            """insert into payrail.agent_logins as a (login, statement_timeout, idle_in_transaction_session_timeout)
               values (%(name)s, %(statement_timeout)s, %(idle_timeout)s)
               on conflict (login) do update
                 set statement_timeout = excluded.statement_timeout,
                     idle_in_transaction_session_timeout = excluded.idle_in_transaction_session_timeout,
                     given_by = excluded.given_by, given_at = excluded.given_at""",
            {"name": login.name, "statement_timeout": statement_timeout, "idle_timeout": idle_timeout},
        )
        other_roles = [
            other
            for (other,) in conn.execute(
                """select g.rolname::text from pg_catalog.pg_auth_members as m join pg_catalog.pg_roles as g on g.oid = m.roleid
                   where m.member = (select r.oid from pg_catalog.pg_roles as r where r.rolname = %s) and g.rolname <> %s order by 1""",
                (login.name, AGENT_GRANT),
            )
        ]
    kept = AgentLogin(login.name, login.password, login.connection_limit, statement_timeout, idle_timeout)
    return AgentAdded(kept, not existing, login_url(conn, login.name), tuple(other_roles))
