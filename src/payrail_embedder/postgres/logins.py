"""`payrail-embedder operator add`: a PostgreSQL login with a password and the grants the backoffice needs.

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


def check_login(name: str, password: str) -> None:
    if not name:
        raise LoginRefused("name the login")
    if len(name.encode("utf-8")) > MAX_ROLE_NAME_BYTES:
        raise LoginRefused(f"a PostgreSQL role name has at most {MAX_ROLE_NAME_BYTES} bytes")
    if not password:
        raise LoginRefused("the password is empty: the backoffice signs in only with a password PostgreSQL checks")
    if "\x00" in name + password:
        raise LoginRefused("a role name or password cannot contain the NUL character")


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
    verifier = conn.pgconn.encrypt_password(password.encode("utf-8"), name.encode("utf-8"), None).decode("ascii")
    role = sql.Identifier(name)
    with conn.transaction():
        verb = "alter" if existing is not None else "create"
        conn.execute(sql.SQL(verb + " role {} login password {}").format(role, sql.Literal(verifier)))
        conn.execute(sql.SQL("grant {} to {}").format(sql.SQL(", ").join(map(sql.Identifier, OPERATOR_GRANTS)), role))
    return existing is None
