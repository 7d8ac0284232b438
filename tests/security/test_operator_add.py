"""`payrail-embedder operator add NAME`: a login the backoffice accepts, its password sent to the
server only as a SCRAM verifier. In process with click's CliRunner (its prompts read the input
given), against the test database; and the embedded default, which asks such logins for it."""

from __future__ import annotations

import json
import os
import subprocess

import psycopg
import pytest
from click.testing import CliRunner
from psycopg import sql

from payrail_embedder.cli import cli
from payrail_test_support.backoffice import OTHER_OPERATOR, PASSWORD
from payrail_test_support.cli import run_cli
from payrail_test_support.servers import embedded_bin


def add(database_url: str, *args: str, input: str):
    return CliRunner().invoke(cli, ["--database-url", database_url, "operator", "add", *args], input=input)


def grants_of(database_url: str, role: str) -> set[str]:
    with psycopg.connect(database_url) as conn:
        rows = conn.execute(
            "select g.rolname from pg_auth_members m join pg_roles g on g.oid = m.roleid join pg_roles r on r.oid = m.member where r.rolname = %s",
            (role,),
        ).fetchall()
    return {name for (name,) in rows}


def signs_in(database_url: str, role: str, password: str) -> bool:
    """Whether the server accepts role with password, having asked for it (SCRAM)."""
    conninfo = psycopg.conninfo.make_conninfo(database_url, user=role, password=password, require_auth="scram-sha-256")
    try:
        psycopg.connect(conninfo).close()
    except psycopg.OperationalError:
        return False
    return True


def test_the_prompted_password_becomes_a_scram_verifier_and_the_login_gets_both_grants(database_url, operator_logins):
    new_password = "typed twice at the prompt"
    result = add(database_url, OTHER_OPERATOR, input=f"{new_password}\n{new_password}\n")
    assert result.exit_code == 0, result.output
    assert f"updated login {OTHER_OPERATOR} with payrail_operator and payrail_embedder" in result.output
    assert new_password not in result.output  # the prompt does not echo it
    with psycopg.connect(database_url) as conn:
        verifier = conn.execute("select rolpassword from pg_authid where rolname = %s", (OTHER_OPERATOR,)).fetchone()[0]
    assert verifier.startswith("SCRAM-SHA-256$") and new_password not in verifier
    assert signs_in(database_url, OTHER_OPERATOR, new_password)
    assert not signs_in(database_url, OTHER_OPERATOR, PASSWORD)


def test_a_new_login_is_created_with_both_grants_and_said_so_as_json(database_url):
    name = f"zed_{database_url.rsplit('/', 1)[1].split('?')[0]}"[:63]
    try:
        result = add(database_url, name, "--password-stdin", "--json", input="a passphrase\n")
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout) == {"login": name, "created": True, "grants": ["payrail_operator", "payrail_embedder"]}
        assert grants_of(database_url, name) == {"payrail_operator", "payrail_embedder"}
    finally:
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute(sql.SQL("drop role if exists {}").format(sql.Identifier(name)))


@pytest.mark.parametrize(
    ("args", "password", "detail"),
    [
        (["postgres"], "anything", "postgres cannot become an operator's login: it is a superuser"),
        (["nobody_yet"], "", "the password is empty"),
        (["n" * 64], "anything", "at most 63 bytes"),
    ],
)
def test_what_cannot_make_a_backoffice_login_is_refused_and_nothing_changes(database_url, args, password, detail):
    result = add(database_url, *args, "--password-stdin", "--json", input=f"{password}\n")
    assert result.exit_code == 2, result.output
    assert json.loads(result.output)["error"] == "invalid_input" and detail in json.loads(result.output)["detail"]
    with psycopg.connect(database_url) as conn:
        assert conn.execute("select count(*) from pg_roles where rolname = any(%s)", (["nobody_yet", "n" * 63],)).fetchone()[0] == 0


@pytest.mark.slow
def test_the_embedded_default_asks_every_login_but_postgres_for_its_password(tmp_path):
    """Its pg_hba.conf, as payrail-embedder writes it: postgres (the command line's) trusted on the
    socket, for pg_basebackup's replication connections too; every other login gives its password."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PAYRAIL_", "PG"))} | {"PAYRAIL_DATA_DIR": str(tmp_path / "data")}
    try:
        url = run_cli(env, "db", "url").stdout.strip()
        assert run_cli(env, "db", "apply").returncode == 0
        assert run_cli(env, "operator", "add", "ada", "--password-stdin", input="a passphrase\n").returncode == 0
        with pytest.raises(psycopg.OperationalError, match="no password supplied"):
            psycopg.connect(psycopg.conninfo.make_conninfo(url, user="ada", passfile=os.devnull)).close()
        assert signs_in(url, "ada", "a passphrase")
        psycopg.connect(url).close()
        backup = subprocess.run(
            [embedded_bin(18) / "pg_basebackup", "-d", url, "-D", tmp_path / "backup", "-X", "fetch", "--checkpoint", "fast"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert backup.returncode == 0, backup.stderr
    finally:
        run_cli(env, "db", "stop")
