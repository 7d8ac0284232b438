"""docs/operations.md, "Deploying" and "Upgrading the product": every command there runs, as
written, against a real registry (a current one; one made by the last release before this
bookkeeping), and says what the text says it says. A command changed in the docs breaks the list
below; a message format changed in the code breaks the sample the docs show."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest

from payrail_test_support import REPO
from payrail_test_support.code import code_tree, run_cli_of
from payrail_test_support.servers import replace_database

OPERATIONS = (REPO / "docs" / "operations.md").read_text(encoding="utf-8")
DOCUMENTED = {
    "Deploying": ["payrail-embedder db status", "payrail-embedder db apply", "payrail-embedder db apply --json"],
    "Upgrading the product": [
        "payrail-embedder db status",
        "payrail-embedder db apply",
        "payrail-embedder db status",
        "psql \"$PAYRAIL_DATABASE_URL\" -X -c 'select * from payrail.get_schema_version()'",
        "psql \"$PAYRAIL_DATABASE_URL\" -X -c 'select name, applied_at, ran from payrail.applied_upgrades order by name'",
    ],
}
# What `db apply` prints on standard error for each attempt that waited (deploy._with_attempts).
WAITED = re.compile(
    r"applying db/, attempt \d+ of \d+: waited for \w+ on [\w.]+, held by pid \d+ "
    r"\(role \w+, application \w+, idle in transaction for \d+ s\); trying again in [\d.]+ s"
)


def section(heading: str) -> str:
    return OPERATIONS.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]


def commands(heading: str) -> list[str]:
    blocks = re.findall(r"```sh\n(.*?)```", section(heading), flags=re.S)
    return [line for block in blocks for line in block.splitlines() if line.strip()]


def run(command: str, database_url: str, psql_dir: Path) -> subprocess.CompletedProcess:
    """A documented command in a shell, as an operator runs it: payrail-embedder and psql on the PATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PAYRAIL_", "OPENAI_"))}
    env.update(PAYRAIL_DATABASE_URL=database_url, PATH=f"{psql_dir}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{env['PATH']}")
    return subprocess.run(command, shell=True, env=env, capture_output=True, text=True, timeout=300, cwd=REPO)


def test_the_documented_commands_are_the_ones_this_test_runs():
    assert {heading: commands(heading) for heading in DOCUMENTED} == DOCUMENTED


def test_the_documented_wait_message_is_the_one_db_apply_prints():
    samples = re.findall(r"```text\n(.*?)\n```", section("Deploying"), flags=re.S)
    assert len(samples) == 1 and WAITED.fullmatch(samples[0]), samples


def test_deploying_a_current_registry(server, database_url):
    status, apply, apply_json = (run(c, database_url, server.psql.parent) for c in DOCUMENTED["Deploying"])
    for result in (status, apply, apply_json):
        assert result.returncode == 0, result.stdout + result.stderr
    assert "db apply: not due, the registry is current" in status.stdout
    assert "the registry is current, nothing applied" in apply.stdout
    assert json.loads(apply_json.stdout)["changed"] is False


@pytest.mark.slow
def test_upgrading_a_registry_of_the_last_release_before_this_bookkeeping(server, database_url, tmp_path):
    """The database fixture's registry is this release's; an older one is made in a database of its own."""
    name = "payrail_older_" + urlsplit(database_url).path.removeprefix("/payrail_test_")
    older = replace_database(database_url, name)
    with psycopg.connect(server.admin_url, autocommit=True) as admin:
        admin.execute(f'create database "{name}" template template0')
    try:
        release = code_tree(tmp_path / "release", "01de324")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PAYRAIL_", "OPENAI_"))}
        assert run_cli_of(release, {**env, "PAYRAIL_DATABASE_URL": older}, "db", "apply").returncode == 0
        before, apply, after, version, upgrades = (run(c, older, server.psql.parent) for c in DOCUMENTED["Upgrading the product"])
        for result in (before, apply, after, version, upgrades):
            assert result.returncode == 0, result.stdout + result.stderr
        assert "db apply: due (the registry predates schema versions)" in before.stdout, before.stdout
        # What an older registry holds is said before the apply too, as far as its tables tell.
        assert re.search(r"\d+ records: \d+ enabled, \d+ drafts, which of them lack a current vector is known after `db apply`", before.stdout), before.stdout
        assert re.search(r"applied db/ to .*: changed \(.*upgrade steps 001-provider_methods_version, ", apply.stdout), apply.stdout
        assert "db apply: not due, the registry is current" in after.stdout, after.stdout
        assert "payrail-embedder" in version.stdout and "(1 row)" in version.stdout, version.stdout
        steps = sorted(p.stem for p in (REPO / "db" / "upgrades").glob("*.sql"))
        assert [line.split("|")[0].strip() for line in upgrades.stdout.splitlines()[2 : 2 + len(steps)]] == steps
    finally:
        with psycopg.connect(server.admin_url, autocommit=True) as admin:
            admin.execute(f'drop database if exists "{name}" with (force)')
