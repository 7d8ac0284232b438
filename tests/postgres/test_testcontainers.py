"""The testcontainers path: with a Docker engine every database test also runs on the pgvector
image; without one the suite falls back to the embedded servers instead of failing. Which of the
two holds is a fact of the machine, asked of the engine itself (servers.docker_available)."""

from __future__ import annotations

import psycopg
import pytest

from payrail_test_support.servers import docker_available, server_names, start_docker


def test_the_docker_server_is_in_the_suite_exactly_when_an_engine_answers():
    assert ("docker" in server_names()) == docker_available()
    assert server_names()[:2] == ["pg18", "pg16"]


def test_testcontainers_serves_a_registry_when_an_engine_answers_and_refuses_at_construction_when_none_does():
    if not docker_available():
        # What the fallback to the embedded servers relies on.
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
