"""Connections to the registry database: open one with its search path pinned, name it without
its secrets, and redo a transaction others got in the way of."""

from __future__ import annotations

import random
import re
import time
from collections.abc import Callable, Mapping
from typing import TypeVar
from urllib.parse import unquote

import psycopg

from . import connection, errcodes, safe_text
from .errors import CodedError


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
    return psycopg.conninfo.make_conninfo(**{k: v for k, v in parameters.items() if k not in SECRET_PARAMETERS})


def connected_to(conn: psycopg.Connection) -> str:
    """The server, port, database and login conn is connected to (whatever chose them: the URL,
    libpq's variables, a service file): what commands that change a registry name."""
    info = conn.info
    return psycopg.conninfo.make_conninfo(host=info.host, port=info.port, dbname=info.dbname, user=info.user)


def connect(database_url: str, *, autocommit: bool = False, prepared_statements: bool = True) -> connection.PinnedConnection:
    """A connection on which every statement runs with the registry's search path (connection.py)."""
    return connection.connect(
        database_url, autocommit=autocommit, prepared_statements=prepared_statements, application_name="payrail-embedder"
    )


T = TypeVar("T")

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
    honoured, ignored = [], []
    for option in psycopg.pq.Conninfo.get_defaults():
        variable = option.envvar.decode() if option.envvar else None
        if variable and environ.get(variable):
            keyword = option.keyword.decode()
            (ignored if keyword in given | OWN_PARAMETERS else honoured).append(variable)
    return honoured, ignored
