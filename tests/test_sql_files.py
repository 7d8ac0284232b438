"""db/ as files: names and order, and the two front doors (psql's install.sql and `db apply`)
building the same catalog on an empty database, rerun or run concurrently."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import uuid
from contextlib import contextmanager
from pathlib import Path

import pglast
import psycopg
from pglast import ast
from psycopg import sql

from payrail_embedder.postgres.connection import display_url
from payrail_embedder.postgres.deploy import apply_schema, sql_dir, sql_files
from payrail_test_support import CLI, REPO
from payrail_test_support.cli import run_cli
from payrail_test_support.registry_state import fingerprint
from payrail_test_support.servers import replace_database

DB = REPO / "db"
SQL_FILE_NAME = re.compile(r"^(\d{3})-[a-z0-9_]+\.sql$")
INCLUDE_LINE = re.compile(r"^\\ir\s+(\S+)\s*$")


def sql_file_number(path: Path) -> int:
    match = SQL_FILE_NAME.match(path.name)
    assert match, f"{path.relative_to(DB)} is not named NNN-name.sql"
    return int(match.group(1))


def install_sql_includes() -> list[str]:
    lines = (DB / "install.sql").read_text(encoding="utf-8").splitlines()
    includes = [INCLUDE_LINE.match(line).group(1) for line in lines if INCLUDE_LINE.match(line)]
    # Any other psql meta-command could run something the CLI does not.
    others = [line for line in lines if line.startswith("\\") and not INCLUDE_LINE.match(line)]
    assert others == [], others
    return includes


def test_sql_files_are_numbered_uniquely_and_increasing_across_both_folders():
    schema = sorted((DB / "schema").glob("*.sql"))
    functions = sorted((DB / "functions").glob("*.sql"))
    assert schema and functions
    numbers = [sql_file_number(path) for path in schema + functions]
    assert len(set(numbers)) == len(numbers), f"duplicate numbers: {numbers}"
    assert numbers == sorted(numbers), f"schema/ must come before functions/ in number order: {numbers}"
    # Nothing outside the three folders that `db apply` would silently skip.
    assert sorted(p.name for p in DB.glob("*.sql")) == ["install.sql"]
    assert sorted(p.name for p in DB.iterdir() if p.is_dir()) == ["functions", "schema", "tests", "upgrades"]


def test_each_pgtap_file_is_named_after_the_file_it_tests():
    """splinter's habit: tests/200-search.sql tests functions/200-search.sql, and a second file for
    the same one says its aspect (200-search__errcodes.sql), so a file's tests are found by its name."""
    tested = {path.stem for folder in ("schema", "functions") for path in (DB / folder).glob("*.sql")}
    pgtap = sorted((DB / "tests").glob("*.sql"))
    assert len(pgtap) > 10
    unnamed = [path.name for path in pgtap if path.stem.partition("__")[0] not in tested]
    assert not unnamed, f"pgTAP files not named after a file of db/schema or db/functions: {unnamed}"


# What each shipped upgrade step runs (the SHA-256 of its block): registries that had a step never
# run it again, so a change to one would leave them apart from new ones. A new step adds its line
# here; a shipped step that needs mending is mended by a new step.
SHIPPED_UPGRADE_STEPS = {
    "001-provider_methods_version": "18282666f18ef16fc5f86062992e66fe9a2911f19dee60072c5615ff49451426",
    "002-provider_method_history_version": "17ad574ab33a0345de628fd917e65b85dda7aa7e4ed9ed0ffcf3e2f180ddd877",
    "003-enabled_name_indexes": "b6d57eff742cf88c26a1df42e1cab009333178c52be6edbdc50c46f63550b7bc",
    "004-stamp_version_trigger": "892e075b14b5b3bcd7b7f11377342381f5aa10b054bd229b5e306dd8839d80b8",
    "005-name_path_matches_counted_draft": "d99003b54262f83ef3fb064818e75072f5b08ddf1b12a15f2a355eda83660035",
    "006-saved_by": "d9be076f07e42329d5c077dfe8de1d850f6b7bb22ebf3e49750df886bcbb6fb3",
    "007-lookalikes": "56954e4c4df6f42566db7eace17f5baa246794f56a0f863de2029ac09542e3f7",
    "008-delete_provider_method_golden_queries": "ed9e8bb6d2fb79fc5baa5af2a679f4699d35d4c05b235b0821e92b4423329b1b",
    "009-run_upgrade_step": "3045ae929654024d1cf94c391d94e24293c7ef1fcfd74c6c0a9d998d0ec0699d",
    "010-agent_logins": "71709e4a93fbaa41498e25c5940d40f20411e4e382a6588749ef2b359d6dd696",
    "011-golden_queries_language": "968600121615d7d23c8c0c49fd447c87efd40ebca5fd59681455810be5aa9010",
    "012-drop_plan_provider_method_changes": "c33a6e1d846e07727ad866b19f1c8fbf2486bd639d37bb24d46ccb2d124f2eb6",
}


def upgrade_step_call(path: Path) -> tuple[str, str]:
    """(name, block) of the one statement a step file holds: select payrail._run_upgrade_step(name, block)."""
    statements = pglast.parse_sql(path.read_text(encoding="utf-8"))
    assert len(statements) == 1, f"{path.name}: one statement, the call of payrail._run_upgrade_step"
    select = statements[0].stmt
    call = select.targetList[0].val if isinstance(select, ast.SelectStmt) and len(select.targetList) == 1 else None
    assert isinstance(call, ast.FuncCall) and [name.sval for name in call.funcname] == ["payrail", "_run_upgrade_step"], (
        f"{path.name} must be select payrail._run_upgrade_step('{path.stem}', $step$ ... $step$)"
    )
    name, block = (argument.val.sval for argument in call.args)
    return name, block


def test_each_upgrade_step_runs_through_the_template_by_its_own_file_name():
    """A step runs once because payrail._run_upgrade_step guards and records it by the name it is
    given: a copied step that kept another's name would never run."""
    steps = sorted((DB / "upgrades").glob("*.sql"))
    assert steps
    numbers = [sql_file_number(path) for path in steps]
    assert numbers == list(range(1, len(steps) + 1)), f"steps are numbered 001, 002, ... without gaps: {numbers}"
    assert [upgrade_step_call(path)[0] for path in steps] == [path.stem for path in steps]


def test_no_shipped_upgrade_step_changes():
    steps = {path.stem: upgrade_step_call(path)[1] for path in sorted((DB / "upgrades").glob("*.sql"))}
    blocks = {name: hashlib.sha256(block.encode()).hexdigest() for name, block in steps.items()}
    changed = sorted(name for name, digest in SHIPPED_UPGRADE_STEPS.items() if blocks.get(name) != digest)
    assert not changed, f"shipped upgrade steps changed or gone (write a new step instead): {changed}"
    assert sorted(blocks) == sorted(SHIPPED_UPGRADE_STEPS), "a new step adds its SHA-256 to SHIPPED_UPGRADE_STEPS"


def test_the_shipped_step_check_knows_a_changed_block(tmp_path):
    step = tmp_path / "001-provider_methods_version.sql"
    shipped = (DB / "upgrades" / step.name).read_text(encoding="utf-8")
    step.write_text(shipped.replace("add column version", "add column if not exists version"), encoding="utf-8")
    name, block = upgrade_step_call(step)
    assert name == step.stem
    assert hashlib.sha256(block.encode()).hexdigest() != SHIPPED_UPGRADE_STEPS[name]


def unstated_attributes(statement: ast.CreateFunctionStmt) -> list[str]:
    """What a create function (or procedure) statement leaves to PostgreSQL's defaults of what
    db/CONVENTIONS.md says every function states: its volatility (procedures have none), its
    security and its search path."""
    options = statement.options or ()
    stated = {option.defname for option in options}
    unstated = [] if statement.is_procedure or "volatility" in stated else ["immutable, stable or volatile"]
    if "security" not in stated:
        unstated.append("security invoker or security definer")
    if not any(option.defname == "set" and option.arg.name == "search_path" for option in options):
        unstated.append("set search_path")
    return unstated


def stated_functions(text: str) -> dict[str, list[str]]:
    """Each function and procedure a file creates, parsed as PostgreSQL parses it: its name and
    what it leaves unstated."""
    return {
        ".".join(part.sval for part in raw.stmt.funcname): unstated_attributes(raw.stmt)
        for raw in pglast.parse_sql(text)
        if isinstance(raw.stmt, ast.CreateFunctionStmt)
    }


def test_the_attribute_check_finds_what_a_function_leaves_unstated():
    text = """
        create or replace function payrail.f() returns trigger language plpgsql set search_path from current
        as $$ begin return new; end $$;
        create function payrail.g(p_text text) returns text language sql
        return p_text; -- immutable, security definer: words in a comment state nothing
        create procedure payrail.p() language sql security definer set search_path = pg_catalog begin atomic select 1; end;
        create function payrail.h() returns text language sql stable security invoker set search_path from current
        return 'immutable';
    """
    assert stated_functions(text) == {
        "payrail.f": ["immutable, stable or volatile", "security invoker or security definer"],
        "payrail.g": ["immutable, stable or volatile", "security invoker or security definer", "set search_path"],
        "payrail.p": [],
        "payrail.h": [],
    }


def test_every_function_states_its_volatility_security_and_search_path(database_url):
    """Read from db/'s text, not the catalog, which holds a default for whatever was left out; and
    every function of the registry's catalog is one of those read, so none escapes the check (one
    made by an EXECUTE inside a DO block would)."""
    functions = {
        (path.relative_to(DB).as_posix(), name): unstated
        for path in sorted(DB.glob("*/*.sql"))
        if path.parent.name != "tests"
        for name, unstated in stated_functions(path.read_text(encoding="utf-8")).items()
    }
    assert {f"{file}: {name}": unstated for (file, name), unstated in functions.items() if unstated} == {}
    with psycopg.connect(database_url) as conn:
        in_catalog = conn.execute("select 'payrail.' || proname from pg_catalog.pg_proc where pronamespace = 'payrail'::pg_catalog.regnamespace").fetchall()
    assert {name for (name,) in in_catalog} == {name for _, name in functions}


def test_install_sql_includes_exactly_the_files_db_apply_runs_in_the_same_order():
    assert sql_dir() == DB
    applied = [path.relative_to(DB).as_posix() for path in sql_files()]
    assert applied, "db apply would run nothing"
    assert install_sql_includes() == applied


@contextmanager
def empty_database(server):
    """A new database made from template0 (not the test template): no extension, no schema."""
    name = f"payrail_empty_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server.admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("create database {} template template0").format(sql.Identifier(name)))
    try:
        yield replace_database(server.admin_url, name)
    finally:
        with psycopg.connect(server.admin_url, autocommit=True) as conn:
            conn.execute(sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(name)))


def assert_registry_installed(rows: list[tuple[str, str, str]]) -> None:
    """The fingerprint is of a real install, so comparing two of them proves something."""
    names = {(kind, name) for kind, name, _ in rows}
    assert ("function", "payrail.search_provider_methods(text,vector,text)") in names, sorted(names)
    assert ("constraint", "payrail.provider_methods.provider_methods_urls_https_check") in names
    assert ("trigger", "payrail.provider_methods.tg_provider_methods__keep_embedding_current") in names
    assert ("extension", "vector") in {(kind, name) for kind, name, _ in rows}


def psql_install(server, url: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(server.psql), "-X", "-v", "ON_ERROR_STOP=1", "--single-transaction", "-f", "db/install.sql", "-d", url],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )


def apply_env(url: str, tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PAYRAIL_", "OPENAI_"))}
    env.update(PAYRAIL_DATABASE_URL=url, PAYRAIL_DATA_DIR=str(tmp_path / "unused-embedded-data"))
    return env


def test_psql_install_twice_then_db_apply_build_the_same_catalog_as_db_apply_alone(server, tmp_path):
    with empty_database(server) as by_psql, empty_database(server) as by_cli:
        for attempt in (1, 2):
            result = psql_install(server, by_psql)
            assert result.returncode == 0, f"install #{attempt}: {result.stdout}{result.stderr}"
            assert "ERROR" not in result.stderr and "WARNING" not in result.stderr, result.stderr
        after_psql = fingerprint(by_psql)
        assert_registry_installed(after_psql)

        # psql records no digest of db/, so db apply runs the files once more and changes no definition.
        result = run_cli(apply_env(by_psql, tmp_path), "db", "apply")
        assert result.returncode == 0, result.stdout + result.stderr
        assert f"applied db/ to {display_url(by_psql)}: changed ({len(sql_files())} files" in result.stdout
        assert fingerprint(by_psql) == after_psql
        result = run_cli(apply_env(by_psql, tmp_path), "db", "apply")
        assert result.stdout.startswith(f"{display_url(by_psql)}: the registry is current, nothing applied"), result.stdout

        result = run_cli(apply_env(by_cli, tmp_path), "db", "apply")
        assert result.returncode == 0, result.stdout + result.stderr
        assert fingerprint(by_cli) == after_psql


def test_two_concurrent_db_apply_on_an_empty_database_both_succeed(server, tmp_path):
    with empty_database(server) as url, empty_database(server) as reference:
        env = apply_env(url, tmp_path)
        runs = [subprocess.Popen([str(CLI), "db", "apply"], env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
        outputs = [run.communicate(timeout=120) for run in runs]
        for run, (stdout, stderr) in zip(runs, outputs):
            assert run.returncode == 0, stdout + stderr

        result = run_cli(apply_env(reference, tmp_path), "db", "apply")
        assert result.returncode == 0, result.stdout + result.stderr
        installed = fingerprint(url)
        assert_registry_installed(installed)
        assert installed == fingerprint(reference)


def test_every_stored_definition_resolves_under_the_empty_search_path_of_a_dump(server, tmp_path):
    """pg_dump's output sets search_path to '' and has the server parse every stored definition
    again from the text it printed: trigger conditions, constraints, defaults, generated columns,
    index expressions, views and SQL function bodies. One that finds an operator or a function
    only through the search path (IS DISTINCT FROM between vectors did) fails there and is left
    out of the restore, or comes back meaning something else. Restored by psql stopping at the
    first error, the catalog must be the one dumped."""
    dump = tmp_path / "schema.sql"
    with empty_database(server) as source, empty_database(server) as restored:
        apply_schema(source)
        subprocess.run([server.psql.parent / "pg_dump", "--schema-only", f"--file={dump}", source], check=True, timeout=120)
        result = subprocess.run(
            [server.psql, "-X", "-v", "ON_ERROR_STOP=1", "--single-transaction", f"--file={dump}", restored],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 0 and "ERROR" not in result.stderr, result.stderr
        assert_registry_installed(fingerprint(restored))
        assert fingerprint(restored) == fingerprint(source)


def test_db_apply_force_rebuilds_the_half_precision_vectors_from_the_records(database_url, tmp_path):
    """Search's first pass is derived data: `db apply --force` (and an apply that changes how its
    rows are derived) repairs a row that is missing, stale or left over (restored from a dump
    without triggers, or edited by a superuser). A plain apply of a current registry reads no row."""
    derived = "select provider_method_id, unit_embedding::text from payrail.provider_method_half_vectors order by 1"
    expected = "select id, (l2_normalize(embedding)::halfvec)::text from payrail.provider_methods where enabled order by 1"
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("select payrail.set_embedding_model('test-model', 2)")
        for number, enabled in enumerate([True, True, True, False]):
            conn.execute(
                """insert into payrail.provider_methods
                     (provider, method, guidance, enabled, embedding, embedding_model, embedding_content_hash)
                   values ('Acme', %(method)s, 'Purpose: test.', %(enabled)s, %(embedding)s::vector, 'test-model',
                           payrail._content_hash('Acme', %(method)s, 'Purpose: test.'))""",
                {"method": f"Method {number}", "enabled": enabled, "embedding": f"[{number + 1},1]"},
            )
        ids = [row[0] for row in conn.execute("select id from payrail.provider_methods order by id")]
        conn.execute("delete from payrail.provider_method_half_vectors where provider_method_id = %s", (ids[0],))
        conn.execute("update payrail.provider_method_half_vectors set unit_embedding = '[0,1]' where provider_method_id = %s", (ids[1],))
        conn.execute("insert into payrail.provider_method_half_vectors values (%s, '[1,0]')", (ids[3],))
        assert conn.execute(derived).fetchall() != conn.execute(expected).fetchall()

        result = run_cli(apply_env(database_url, tmp_path), "db", "apply")
        assert "the registry is current, nothing applied" in result.stdout, result.stdout + result.stderr
        result = run_cli(apply_env(database_url, tmp_path), "db", "apply", "--force", "--json")
        assert result.returncode == 0, result.stdout + result.stderr
        assert json.loads(result.stdout)["repairedDerivedRows"] == 3
        assert conn.execute(derived).fetchall() == conn.execute(expected).fetchall()
        assert len(conn.execute(derived).fetchall()) == 3
