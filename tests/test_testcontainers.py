"""The testcontainers path: with a Docker engine every database test also runs on the pgvector
image; without one the suite falls back to the embedded servers instead of failing."""

from __future__ import annotations

import psycopg
import pytest

from conftest import server_names
from servers import docker_available, start_docker


def test_docker_server_is_used_exactly_when_an_engine_answers():
    assert ("docker" in server_names()) == docker_available()
    assert server_names()[:2] == ["pg18", "pg16"]


def test_testcontainers_pgvector_image():
    if not docker_available():
        # What the fallback relies on: without an engine, testcontainers fails at construction.
        import docker.errors

        with pytest.raises(docker.errors.DockerException):
            start_docker()
        return
    server = start_docker()
    try:
        server.prepare_template()
        with psycopg.connect(server.create_database()) as conn:
            assert conn.execute("select extversion from pg_extension where extname = 'vector'").fetchone()
            assert conn.execute("select count(*) from payrail.provider_methods").fetchone() == (0,)
    finally:
        server.stop()
