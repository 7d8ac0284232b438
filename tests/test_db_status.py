"""`db status` tells an operator what they need: the product's and the schema's versions,
PostgreSQL's and pgvector's, which database (never a password), whether `db apply` is due and why,
and, when the embedded server cannot start, why in words (a full device, a read-only one)."""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
from importlib import metadata
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest
from psycopg import sql

from payrail_embedder.postgres.connection import display_url
from payrail_embedder.postgres.deploy import apply_schema, db_digest
from payrail_embedder.postgres.local_server import embedded_pgdata
from payrail_test_support.cli import cli_json, run_cli
from payrail_test_support.code import changed_tree, code_tree, run_cli_of, without_settings
from payrail_test_support.devices import fill, small_device
from payrail_test_support.logs import embedded_start
from payrail_test_support.servers import replace_database

STATUS_KEYS = {
    "productVersion",
    "database",
    "url",
    "embedded",
    "server",
    "schemaVersion",
    "applyDue",
    "applyDueReasons",
    "writableSearchPathSchemas",
    "registry",
    "error",
}
SCHEMA_VERSION_KEYS = {"productVersion", "dbDigest", "appliedAt", "appliedBy", "appliedWith", "completedAt", "postgresVersion", "pgvectorVersion"}
EMBEDDED_KEYS = {"running", "dataDirectory", "pid", "socketDirectory", "startProblem"}


def status(env: dict[str, str]) -> dict:
    code, report, _ = cli_json(env, "db", "status", "--json")
    assert set(report) == STATUS_KEYS, report
    return report


def test_db_status_names_the_versions_the_database_and_that_no_apply_is_due(cli_env, database_url):
    with psycopg.connect(database_url) as conn:
        postgres, pgvector = conn.execute("select current_setting('server_version'), (select extversion from pg_extension where extname = 'vector')").fetchone()
    report = status(cli_env)
    version = metadata.version("payrail-agent-search")
    assert report["productVersion"] == version
    assert (report["database"], report["url"]) == ("configured", display_url(database_url))
    assert report["server"] == {"postgresql": postgres, "pgvector": pgvector}
    assert set(report["schemaVersion"]) == SCHEMA_VERSION_KEYS
    assert report["schemaVersion"]["productVersion"] == version
    assert report["schemaVersion"]["dbDigest"] == db_digest()
    assert report["schemaVersion"]["completedAt"] is not None
    assert (report["applyDue"], report["applyDueReasons"]) == (False, [])
    assert report["writableSearchPathSchemas"] == []

    text = run_cli(cli_env, "db", "status").stdout
    assert text.startswith(f"payrail-agent-search {version}\nconfigured database: {display_url(database_url)}\n"), text
    assert "search path: no role but the owners can create objects in the registry's schemas\n" in text
    assert f"PostgreSQL {postgres}, pgvector {pgvector}\n" in text
    assert re.search(rf"^schema: applied \S+ by postgres with payrail-agent-search {re.escape(version)} \(db/ {db_digest()[:12]}\)$", text, re.M), text
    assert "db apply: not due, the registry is current" in text


def test_db_status_names_who_could_plant_objects_on_the_registrys_search_path_and_db_apply_refuses(cli_env, database_url):
    """A grant of CREATE on pgvector's schema (public here) after the registry was installed: the
    next `db apply`, of a registry that is current, refuses, and `db status` says who and how to
    stop it; PUBLIC first, as the fix for everyone."""
    writer = f"writer_{urlsplit(database_url).path.lstrip('/')}"[:63]
    fix = f"revoke create on schema public from {writer};"
    with psycopg.connect(database_url, autocommit=True) as admin:
        admin.execute(sql.SQL("create role {} login").format(sql.Identifier(writer)))
        admin.execute(sql.SQL("grant create on schema public to {}").format(sql.Identifier(writer)))
        try:
            assert status(cli_env)["writableSearchPathSchemas"] == [{"schema": "public", "writer": writer, "fix": fix}]
            text = run_cli(cli_env, "db", "status").stdout
            assert (
                f"search path: {writer} can create objects in schema public, which the registry's functions search; db apply refuses until you run `{fix}`\n"
            ) in text, text
            applied = run_cli(cli_env, "db", "apply")
            assert applied.returncode == 1, applied.stdout
            assert (
                f"schema public is on the registry's search path, and {writer} can create objects in it: it could "
                "plant operators or functions that run as another role"
            ) in applied.stderr, applied.stderr
            assert f'Hint: Run "{fix}"' in applied.stderr, applied.stderr

            admin.execute("grant create on schema public to public")
            assert [w["writer"] for w in status(cli_env)["writableSearchPathSchemas"]] == ["every role (PUBLIC)", writer]
            assert 'Run "revoke create on schema public from public;"' in run_cli(cli_env, "db", "apply").stderr
        finally:
            admin.execute(sql.SQL("revoke create on schema public from public, {}").format(sql.Identifier(writer)))
            admin.execute(sql.SQL("drop role {}").format(sql.Identifier(writer)))
    assert status(cli_env)["writableSearchPathSchemas"] == []
    assert "the registry is current, nothing applied" in run_cli(cli_env, "db", "apply").stdout


def test_db_status_says_when_and_why_an_apply_is_due(cli_env, database_url, tmp_path):
    # A definition changed by hand.
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("comment on function payrail.search_provider_methods(text, vector, text) is 'edited in psql'")
    report = status(cli_env)
    assert report["applyDue"] is True
    assert report["applyDueReasons"] == ["definitions changed by hand since the last apply"]
    assert "db apply: due (definitions changed by hand since the last apply)" in run_cli(cli_env, "db", "status").stdout
    # The same, where the last apply ran on an older PostgreSQL (pg_upgrade), or an older pgvector.
    with psycopg.connect(database_url, autocommit=True) as conn:
        postgres, pgvector = conn.execute("select current_setting('server_version'), (select extversion from pg_extension where extname = 'vector')").fetchone()
        conn.execute("update payrail.deployments set postgres_version = '15.2'")
        assert status(cli_env)["applyDueReasons"] == [f"PostgreSQL was upgraded since the last apply (15.2 to {postgres})"]
        conn.execute("update payrail.deployments set postgres_version = %s, pgvector_version = '0.7.0'", (postgres,))
        assert status(cli_env)["applyDueReasons"] == [f"pgvector was updated since the last apply (0.7.0 to {pgvector})"]
    assert run_cli(cli_env, "db", "apply").returncode == 0
    assert status(cli_env)["applyDue"] is False

    # The next release, before its apply: its status says its db/ is not the one applied.
    release = changed_tree(
        code_tree(tmp_path / "code"), tmp_path / "release", "functions/200-search.sql", "message = 'query is empty',", "message = 'the query is empty',"
    )
    result = run_cli_of(release, cli_env, "db", "status", "--json")
    report = json.loads(result.stdout)
    assert (report["applyDue"], report["applyDueReasons"]) == (True, ["db/ differs from the one applied"])


def test_a_registry_restored_from_a_dump_is_current(cli_env, server, database_url):
    """The record of its last apply comes with the dump, and the restored catalog prints as the
    dumped one did: no apply is due (docs/operations.md restores without one)."""
    source, restored = (replace_database(database_url, name) for name in ("payrail_status_source", "payrail_status_restored"))
    with psycopg.connect(server.admin_url, autocommit=True) as conn:
        for name in ("payrail_status_source", "payrail_status_restored"):
            conn.execute(f"create database {name} template template0")
    try:
        apply_schema(source)
        dump = subprocess.run([server.psql.parent / "pg_dump", "--format=custom", source], capture_output=True, check=True).stdout
        subprocess.run(
            [server.psql.parent / "pg_restore", "--single-transaction", "--exit-on-error", f"--dbname={restored}"], input=dump, capture_output=True, check=True
        )
        report = status({**cli_env, "PAYRAIL_DATABASE_URL": restored})
        assert (report["applyDue"], report["applyDueReasons"]) == (False, [])
        assert report["schemaVersion"] == status({**cli_env, "PAYRAIL_DATABASE_URL": source})["schemaVersion"]
    finally:
        with psycopg.connect(server.admin_url, autocommit=True) as conn:
            for name in ("payrail_status_source", "payrail_status_restored"):
                conn.execute(f"drop database if exists {name} with (force)")


def test_db_status_of_a_registry_installed_with_psql_or_not_at_all(cli_env, server, database_url):
    empty = replace_database(database_url, "payrail_status_empty")
    with psycopg.connect(server.admin_url, autocommit=True) as conn:
        conn.execute("create database payrail_status_empty template template0")
    try:
        env = {**cli_env, "PAYRAIL_DATABASE_URL": empty}
        report = status(env)
        assert (report["schemaVersion"], report["applyDue"], report["applyDueReasons"]) == (None, True, ["no registry in this database yet"])
        installed = subprocess.run(
            [str(server.psql), "-X", "-q", "-v", "ON_ERROR_STOP=1", "--single-transaction", "-f", "db/install.sql", "-d", empty],
            capture_output=True,
            text=True,
            cwd=Path(__file__).resolve().parents[1],
        )
        assert installed.returncode == 0, installed.stderr
        report = status(env)
        assert report["schemaVersion"]["appliedWith"] == "psql"
        assert (report["schemaVersion"]["productVersion"], report["schemaVersion"]["dbDigest"]) == (None, None)
        assert report["applyDueReasons"] == ["applied with psql, which records no db/ digest"]
        assert "with psql" in run_cli(env, "db", "status").stdout
    finally:
        with psycopg.connect(server.admin_url, autocommit=True) as conn:
            conn.execute("drop database payrail_status_empty with (force)")


@contextlib.contextmanager
def embedded_registry(data_dir: Path):
    """The embedded default under data_dir, created by `db apply` and stopped (as after a reboot);
    yields the CLI's environment. Stopped again at the end, whatever happened."""
    env = {**without_settings(), "PAYRAIL_DATA_DIR": str(data_dir)}
    try:
        result = run_cli(env, "db", "apply")
        assert result.returncode == 0, result.stdout + result.stderr
        assert run_cli(env, "db", "stop").returncode == 0
        yield env
    finally:
        run_cli(env, "db", "stop")


@pytest.mark.slow
def test_the_embedded_server_on_a_full_device_says_so_with_the_directory(tmp_path):
    with small_device(tmp_path / "disk", 96) as disk, embedded_registry(disk / "data") as env:
        pgdata = embedded_pgdata(disk / "data")
        filler = fill(disk)

        embedded = status(env)["embedded"]
        assert set(embedded) == EMBEDDED_KEYS
        assert embedded["running"] is False
        assert embedded["startProblem"].startswith(f"no space left on the device that holds {pgdata} ("), embedded

        result = run_cli(env, "db", "apply")
        assert result.returncode == 1
        assert f"cannot start the embedded PostgreSQL under {disk / 'data'}: no space left on the device that holds {pgdata}" in result.stderr, result.stderr
        # The event that says it is starting the server, then the line that says why it could not.
        assert "Traceback" not in result.stderr and len(result.stderr.splitlines()) == 2, result.stderr
        assert embedded_start(result.stderr.splitlines()[0])["data_dir"] == str(disk / "data"), result.stderr

        text = run_cli(env, "db", "status").stdout
        assert f"it cannot start: its last start failed: no space left on the device that holds {pgdata}" in text, text

        filler.unlink()
        assert status(env)["embedded"]["startProblem"].startswith("its last start failed: no space left"), "the log still tells of the last start"
        assert run_cli(env, "db", "apply").returncode == 0, "with space again, it starts"


@pytest.mark.slow
def test_the_embedded_server_on_a_read_only_device_says_so(tmp_path):
    with small_device(tmp_path / "disk", 96) as disk, embedded_registry(disk / "data") as env:
        subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
        pgdata = embedded_pgdata(disk / "data")
        assert status(env)["embedded"]["startProblem"] == f"{pgdata} is on a read-only file system"
        result = run_cli(env, "db", "apply")
        assert result.returncode == 1
        assert f"cannot start the embedded PostgreSQL under {disk / 'data'}: {pgdata} is on a read-only file system" in result.stderr
