"""Connections to the registry database: open one, name it without its secrets, redo a
transaction others got in the way of; and on each, every statement the package sends runs on a
search path that nothing planted can be found on, behind a transaction pooler too.

The registry's functions pin their own search path (`pg_catalog, payrail, <pgvector's schema>,
pg_temp`: payrail._search_path()), but a statement the package sends is resolved on its
session's path, where a role that may create objects in `public` could have planted an operator
or an overload that would then run with the privileges of the package's login. So the package's
statements run on `pg_catalog, payrail, pg_temp` (PACKAGE_PATH): pg_catalog only superusers
write, payrail only the deployer (`db apply` refuses otherwise), and pgvector's schema, which a
DBA may have opened to others, is not on it, so none of its operators need naming. A session-level
SET does not hold behind a transaction pooler (PgBouncer's `pool_mode = transaction`): the next
transaction may run on another server connection where it was never set, and the setting leaks
to whichever client gets this one next. So nothing here depends on session state:

- every transaction the package opens sets the path first, for that transaction only
  (`set_config(..., true)`): PinnedConnection.transaction();
- a statement sent outside a transaction runs in one of its own that does the same (PinnedCursor);
- a statement that resolves nothing through the path (SelfPinned: every name schema-qualified, no
  operator, calling only functions that pin their own path) is sent alone on an autocommit
  connection. The agent path's statements are such, so a search costs no round trip more;
- pgvector's types are found in the extension's schema, never by name on the session's path, and
  sent by OID; a statement that needs one of pgvector's functions names its schema.
"""

from __future__ import annotations

import os
import pwd
import random
import re
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, nullcontext
from typing import Any, TypeVar
from urllib.parse import quote, unquote, urlencode

import psycopg
from pgvector.psycopg.halfvec import register_halfvec_info
from pgvector.psycopg.sparsevec import register_sparsevec_info
from pgvector.psycopg.vector import register_vector_info
from psycopg import sql
from psycopg.pq import TransactionStatus
from psycopg.types import TypeInfo

from ..base import errcodes, safe_text
from ..base.errors import CodedError


class DatabaseUnavailable(CodedError):
    """The embedded PostgreSQL could not be started, or no connection to the database came."""

    code = "unavailable"


# Connection parameters that are secrets: never printed, logged or shown.
SECRET_PARAMETERS = frozenset({"password", "sslpassword"})


# A URL's password as libpq reads it (up to the first @ or /), and as its author may have meant it
# (up to the last @: an unencoded @ or / in a password leaves it so).
URL_PASSWORD = re.compile(r"\s*[a-z][a-z0-9+.\-]*://[^:/@]*:(?P<to_first>[^@/]*)@", re.IGNORECASE)
URL_PASSWORD_TO_LAST_AT = re.compile(r"\s*[a-z][a-z0-9+.\-]*://[^:/@]*:(?P<to_last>.*)@", re.IGNORECASE | re.DOTALL)
PASSWORD_PARAMETER = re.compile(r"""(?:^|[\s?&])(?:ssl)?password\s*=\s*(?:'(?P<quoted>(?:[^'\\]|\\.)*)'|(?P<bare>[^\s&]*))""", re.IGNORECASE)


def url_secrets(database_url: str | None) -> list[str]:
    """The passwords a connection string (URL or key=value) holds, as written and percent-decoded,
    also from one libpq cannot read (an unencoded %, a broken IPv6 host), whose error would
    otherwise be the place its password shows."""
    if not database_url:
        return []
    found = []
    try:
        parameters = psycopg.conninfo.conninfo_to_dict(database_url)
        found += [str(parameters[key]) for key in SECRET_PARAMETERS if parameters.get(key)]
    except psycopg.ProgrammingError:
        pass
    for pattern in (URL_PASSWORD, URL_PASSWORD_TO_LAST_AT):
        if match := pattern.match(database_url):
            found += match.groups()
    found += [match["quoted"] or match["bare"] for match in PASSWORD_PARAMETER.finditer(database_url)]
    return sorted({form for secret in found if secret for form in (secret, unquote(secret))})


def display_url(database_url: str) -> str:
    """The connection string without its secrets (password, sslpassword): what commands print
    and log to say which database they use. One libpq cannot read is shown as written, its
    passwords hidden."""
    try:
        parameters = psycopg.conninfo.conninfo_to_dict(database_url)
    except psycopg.ProgrammingError:
        safe_text.hide(url_secrets(database_url))
        return safe_text.one_line(database_url)
    return psycopg.conninfo.make_conninfo("", **{k: v for k, v in parameters.items() if k not in SECRET_PARAMETERS})


def connected_to(conn: psycopg.Connection) -> str:
    """The server, port, database and login conn is connected to (whatever chose them: the URL,
    libpq's variables, a service file): what commands that change a registry name."""
    info = conn.info
    return psycopg.conninfo.make_conninfo(host=info.host, port=info.port, dbname=info.dbname, user=info.user)


def login_url(conn: psycopg.Connection, login: str) -> str:
    """The URL login connects with to the server, port and database conn is connected to, without
    a password (libpq takes it from PGPASSWORD or ~/.pgpass): postgresql://LOGIN@HOST:PORT/DATABASE,
    or over a Unix socket (the embedded default) postgresql://LOGIN@/DATABASE?host=DIRECTORY&port=PORT,
    which psql and psycopg read alike. Each part percent-encoded; conn's sslmode kept when it asked
    for one, so the login's connections are encrypted as the one that made it was."""
    info = conn.info
    parameters = {}
    if info.host.startswith("/"):  # the directory of a Unix socket
        authority = ""
        parameters = {"host": info.host, "port": str(info.port)}
    else:
        host = quote(info.host, safe=":")
        authority = f"[{host}]:{info.port}" if ":" in host else f"{host}:{info.port}"
    if sslmode := info.get_parameters().get("sslmode"):
        parameters["sslmode"] = sslmode
    query = f"?{urlencode(parameters, quote_via=quote, safe='/')}" if parameters else ""
    return f"postgresql://{quote(login, safe='')}@{authority}/{quote(info.dbname, safe='')}{query}"


T = TypeVar("T")
Row = TypeVar("Row")


def one_row(cursor: psycopg.Cursor[Row]) -> Row:
    """The row of a statement that always returns one (a function call, an aggregate, `select
    exists(...)`): fetchone() also allows for none, which here would break the SQL's promise, so
    that is said at once rather than as a TypeError further on."""
    row = cursor.fetchone()
    if row is None:
        raise psycopg.DataError(f"a statement that always returns a row returned none (it reported {cursor.statusmessage})")
    return row


def one_value(cursor: psycopg.Cursor[tuple[Any, ...]]) -> Any:
    """The first column of one_row(cursor): a database value, of whatever type its column has."""
    return one_row(cursor)[0]


# How often every writer's transaction (a save, a sync batch, a model switch) is redone when
# another transaction deadlocks or serializes it: one budget, so no writer gives up first.
TRANSACTION_ATTEMPTS = 5


def retry_transient(work: Callable[[], T]) -> T:
    """Runs work, a whole transaction, again when another transaction deadlocked or
    serialized it (40P01, 40001): safe because work redoes everything it did. Waits a little,
    longer each time and at random, so the two do not collide again in step."""
    for attempt in range(1, TRANSACTION_ATTEMPTS):
        try:
            return work()
        except psycopg.Error as error:
            if error.sqlstate not in errcodes.TRANSIENT:
                raise
        time.sleep(random.uniform(0.05, 0.2) * attempt)
    return work()


# The libpq parameters that say which server, database and login: without a configured URL the
# embedded server's own are used, whatever the environment says.
TARGET_PARAMETERS = frozenset({"host", "hostaddr", "port", "dbname", "user", "service"})
# Set by the package on every connection, so the environment's value never applies.
OWN_PARAMETERS = frozenset({"application_name"})


def libpq_environment(database_url: str | None, environ: Mapping[str, str]) -> tuple[list[str], list[str]]:
    """The libpq variables set in environ (PGHOST, PGUSER, ...) that libpq will honour for
    database_url (None: the embedded default), filling in what it leaves out, and those it will
    not: a parameter the URL or the package names, or, for the embedded default, one that
    would pick another server. Nothing for a URL libpq cannot read: connecting says what is wrong."""
    try:
        given = set(psycopg.conninfo.conninfo_to_dict(database_url)) if database_url else TARGET_PARAMETERS
    except psycopg.ProgrammingError:
        return [], []
    honoured: list[str] = []
    ignored: list[str] = []
    for option in psycopg.pq.Conninfo.get_defaults():
        variable = option.envvar.decode() if option.envvar else None
        if variable and environ.get(variable):
            keyword = option.keyword.decode()
            (ignored if keyword in given | OWN_PARAMETERS else honoured).append(variable)
    return honoured, ignored


# The path of every transaction the package opens: the built-ins and the registry, nothing
# another role could write (a login that may not use payrail finds the built-ins alone).
PACKAGE_PATH = "pg_catalog, payrail, pg_temp"
# psycopg's default: a statement sent this many times on one connection is prepared on the server.
PREPARE_THRESHOLD = 5


class SelfPinned(str):
    """A statement that resolves nothing through the search path, so it may run on any: every
    relation, type and function schema-qualified, no operator, and only functions that pin their
    own search path. Sent as it is, outside a transaction, on an autocommit connection."""


PIN = SelfPinned("select pg_catalog.set_config('search_path', %s, true)")
# Nothing at all: the pool's check that its connections still work, once one was found lost.
NOTHING = SelfPinned("")

# pgvector's types, found by its schema.
PGVECTOR_TYPES = SelfPinned(
    """
select n.nspname, t.typname, t.oid, t.typarray
from pg_catalog.pg_extension as e
join pg_catalog.pg_namespace as n on n.oid operator(pg_catalog.=) e.extnamespace
join pg_catalog.pg_type as t on t.typnamespace operator(pg_catalog.=) e.extnamespace
where e.extname operator(pg_catalog.=) 'vector'
  and t.typname operator(pg_catalog.=) any ('{vector,halfvec,sparsevec}'::pg_catalog.name[])
"""
)
REGISTER_TYPE = {"vector": register_vector_info, "halfvec": register_halfvec_info, "sparsevec": register_sparsevec_info}


def needs_pin(conn: PinnedConnection, query: object) -> bool:
    """Whether query must run in a transaction that sets the search path first: unless one is open
    already (and pinned when it began), or it is SelfPinned and may run alone (autocommit)."""
    if conn.autocommit and isinstance(query, SelfPinned):
        return False
    return conn.info.transaction_status == TransactionStatus.IDLE


@contextmanager
def pinned(conn: PinnedConnection) -> Iterator[None]:
    """A transaction that set conn's search path first: one of its own on an autocommit
    connection, otherwise the one the statement opens."""
    if conn.autocommit:
        with conn.transaction():
            yield
    else:
        conn.pin()
        yield


def pinned_if_needed(conn: PinnedConnection, query: object):
    return pinned(conn) if needs_pin(conn, query) else nullcontext()


class PinnedCursor(psycopg.Cursor):
    """A cursor whose every statement runs on the registry's search path (needs_pin)."""

    def execute(self, query, params=None, **options):
        with pinned_if_needed(self.connection, query):
            return super().execute(query, params, **options)

    def executemany(self, query, params_seq, **options):
        with pinned_if_needed(self.connection, query):
            return super().executemany(query, params_seq, **options)

    def stream(self, query, params=None, **options):
        with pinned_if_needed(self.connection, query):
            yield from super().stream(query, params, **options)

    @contextmanager
    def copy(self, statement, params=None, **options):
        with pinned_if_needed(self.connection, statement), super().copy(statement, params, **options) as copy:
            yield copy


class PinnedConnection(psycopg.Connection):
    """A connection whose transactions and statements run on PACKAGE_PATH."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.cursor_factory = PinnedCursor
        # pgvector's schema, found by prepare(): PACKAGE_PATH leaves it out.
        self.pgvector_schema: str | None = None

    @contextmanager
    def transaction(self, savepoint_name: str | None = None, force_rollback: bool = False):
        outermost = self.info.transaction_status == TransactionStatus.IDLE
        with super().transaction(savepoint_name, force_rollback) as transaction:
            if outermost:
                self.pin()
            yield transaction

    def pin(self) -> None:
        """Sets PACKAGE_PATH for the current (or, not autocommit, a new) transaction."""
        psycopg.Cursor(self).execute(PIN, (PACKAGE_PATH,))


def prepare(conn: PinnedConnection) -> None:
    """Registers pgvector's types by their OIDs; leaves the connection idle. The pool's
    `configure`, and connect's."""
    for schema, name, oid, array_oid in psycopg.Cursor(conn).execute(PGVECTOR_TYPES).fetchall():
        conn.pgvector_schema = schema
        regtype = sql.Identifier(schema, name).as_string(conn)
        REGISTER_TYPE[name](conn, TypeInfo(name, oid, array_oid, regtype=regtype))
    if not conn.autocommit:
        conn.commit()


def naming_pgvector(conn: psycopg.Connection, statement: str) -> sql.Composed:
    """statement with each {pgvector} naming pgvector's schema, for the few statements that call its
    functions or operators or cast to its types (on PACKAGE_PATH they are found by schema only)."""
    schema = conn.pgvector_schema if isinstance(conn, PinnedConnection) else None
    if schema is None:
        row = psycopg.Cursor(conn).execute(PGVECTOR_TYPES).fetchone()  # a connection prepare() did not see
        if row is None:
            raise psycopg.errors.UndefinedObject("pgvector is not installed in this database: `payrail-embedder db apply` installs it")
        schema = row[0]
    return sql.SQL(statement).format(pgvector=sql.Identifier(schema))


def check(conn: PinnedConnection) -> None:
    """The pool's check that a connection still works, once one was found lost: one empty statement."""
    conn.execute(NOTHING)


def psycopg_options(prepared_statements: bool) -> dict:
    """psycopg's connection options for the prepared-statements setting: off for a pooler that
    cannot carry them (PgBouncer before 1.21, or without max_prepared_statements, in
    transaction mode), where a statement prepared on one server connection is missing on the next."""
    return {"prepare_threshold": PREPARE_THRESHOLD if prepared_statements else None}


def command_line_name() -> str:
    """The command line's application_name: payrail-embedder and the operating-system user it runs
    as, whom the registry names as the author of a superuser login's writes (payrail._author), so a
    shared superuser (the embedded default's postgres) does not hide who saved."""
    try:
        user = pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:  # a uid without a name (a container's)
        user = f"uid {os.geteuid()}"
    return f"payrail-embedder (OS user {user})"


def connect(database_url: str, *, autocommit: bool = False, prepared_statements: bool = True, **kwargs) -> PinnedConnection:
    """A connection on which every statement runs with the registry's search path (the module's doc),
    pgvector's types registered, named payrail-embedder to the server unless kwargs say otherwise."""
    kwargs.setdefault("application_name", "payrail-embedder")
    conn = PinnedConnection.connect(database_url, autocommit=autocommit, **psycopg_options(prepared_statements), **kwargs)
    try:
        prepare(conn)
    except BaseException:
        conn.close()
        raise
    return conn
