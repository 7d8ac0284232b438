"""`payrail-embedder operator add` and `agent add`: PostgreSQL logins with the grants the backoffice
needs, or with the agents' one grant and the bounds docs/security.md asks of every agent login.

The password never reaches the server or a log in clear: libpq turns it into the verifier the
server's password_encryption asks for (SCRAM-SHA-256 by default), and the statement carries that.
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg
from psycopg import sql

from ..base.errors import CodedError
from ..base.reports import Report

# The grants the backoffice needs, and why: it saves the public fields and their vectors together.
OPERATOR_GRANTS = {
    "payrail_operator": "to edit records",
    "payrail_embedder": "to save their vectors",
}
# NAMEDATALEN - 1: PostgreSQL cuts a longer name short, so it would name another role.
MAX_ROLE_NAME_BYTES = 63


class LoginRefused(CodedError, ValueError):
    """A name or password that cannot make a login, or a role that must not become one."""

    code = "invalid_input"


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


@dataclass(frozen=True)
class OperatorAdded(Report):
    """`operator add`: the login, whether it was created (or its password and grants set), and its grants."""

    login: str
    created: bool

    def to_json(self) -> dict:
        return {"login": self.login, "created": self.created, "grants": list(OPERATOR_GRANTS)}

    def describe(self) -> list[str]:
        return [
            f"{'created' if self.created else 'updated'} login {self.login} with payrail_operator and payrail_embedder: "
            f"sign in to the backoffice as {self.login}"
        ]


def add_operator(conn: psycopg.Connection, name: str, password: str) -> bool:
    """Creates the login name with password and grants it OPERATOR_GRANTS; for an existing role,
    sets its password and grants. Returns whether the login was created."""
    check_login(name, password)
    existing = conn.execute("select rolsuper from pg_catalog.pg_roles where rolname = %s", (name,)).fetchone()
    if existing is not None and existing[0]:
        raise LoginRefused(f'"{name}" is a superuser: the backoffice is for logins with the operator\'s grants only; choose another name')
    role = sql.Identifier(name)
    with conn.transaction():
        verb = "alter" if existing is not None else "create"
        conn.execute(sql.SQL(verb + " role {} login {}").format(role, _password_clause(conn, name, password)))
        conn.execute(sql.SQL("grant {} to {}").format(sql.SQL(", ").join(map(sql.Identifier, OPERATOR_GRANTS)), role))
    return existing is None


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
    """`agent add`: the login, whether it was created (or set anew), and what it was given."""

    login: AgentLogin
    created: bool

    def to_json(self) -> dict:
        return {"login": self.login.name, "created": self.created, "grants": ["payrail_agent"], "connectionLimit": self.login.connection_limit}

    def describe(self) -> list[str]:
        how = "without a password (peer or certificate authentication)" if self.login.password is None else "with a password"
        return [
            f"{'created' if self.created else 'updated'} login {self.login.name} {how}, granted payrail_agent only, "
            f"at most {self.login.connection_limit} connections, statement_timeout {self.login.statement_timeout}: "
            f"agents connect as postgresql://{self.login.name}@HOST/DATABASE"
        ]


def check_agent(login: AgentLogin) -> None:
    check_name(login.name, login.password)
    if login.password == "":
        raise LoginRefused("the password is empty: give one, or --no-password for peer or certificate authentication")


def add_agent(conn: psycopg.Connection, login: AgentLogin) -> bool:
    """Creates the login (or, for an existing role, sets the same) granted payrail_agent, with a
    connection limit and the timeouts search holds a session to; returns whether it was created.
    A role that could read drafts or more (a superuser, an operator's or the embedder's member) is
    refused rather than made an agent's."""
    check_agent(login)
    existing = conn.execute(
        """
        select r.rolsuper or r.rolcreaterole or r.rolbypassrls
               or exists (select from pg_catalog.pg_namespace as n
                          where n.nspname = 'payrail' and pg_catalog.pg_has_role(r.oid, n.nspowner, 'MEMBER')),
               array(select g.rolname::text from pg_catalog.pg_auth_members as m join pg_catalog.pg_roles as g on g.oid = m.roleid
                     where m.member = r.oid and g.rolname = any(%s) order by 1)
        from pg_catalog.pg_roles as r where r.rolname = %s
        """,
        (list(OPERATOR_GRANTS), login.name),
    ).fetchone()
    if existing is not None and existing[0]:
        raise LoginRefused(f'"{login.name}" is a superuser, may create roles or owns the registry: an agent\'s login may only search; choose another name')
    if existing is not None and existing[1]:
        raise LoginRefused(f'"{login.name}" is granted {", ".join(existing[1])}: it reads drafts, and an agent\'s login must not; choose another name')
    role = sql.Identifier(login.name)
    with conn.transaction():
        verb = "alter" if existing is not None else "create"
        conn.execute(
            sql.SQL(verb + " role {} login {} connection limit {}").format(
                role, _password_clause(conn, login.name, login.password), sql.Literal(login.connection_limit)
            )
        )
        conn.execute(sql.SQL("grant payrail_agent to {}").format(role))
        # PostgreSQL judges the values (a wrong one is refused in its words, and nothing is kept).
        conn.execute(sql.SQL("alter role {} set statement_timeout = {}").format(role, sql.Literal(login.statement_timeout)))
        conn.execute(sql.SQL("alter role {} set idle_in_transaction_session_timeout = {}").format(role, sql.Literal(login.idle_in_transaction_timeout)))
    return existing is None
