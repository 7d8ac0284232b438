"""Privileged code never resolves anything through a schema others can write.

On a server where `grant create on schema public to public` ran (PostgreSQL 14's default), a
login granted only payrail_agent plants operators and overloads in public: for the common mixed
type pairs, and for the exact types and functions that a session whose search path puts public
first would resolve there before pg_catalog. Then every command and interface runs as the
deployer (a superuser), semantic paths included: the CLI's commands, the Python API, MCP over
stdio and HTTP, the backoffice over HTTP. Directly, on the server's default search path; and
through PgBouncer in transaction mode, on a database whose default path puts public first (what
another client of the pool may leave on a server connection). Nothing planted may ever run, and
no registry object may come to depend on it. Where pgvector itself lives in such a schema,
`db apply` refuses, with the fix in its message.
"""

from __future__ import annotations

import itertools
import json
from urllib.parse import urlsplit

import psycopg
import pytest
from psycopg import sql

from payrail_embedder.postgres.deploy import apply_schema
from payrail_test_support import backoffice, pgbouncer
from payrail_test_support.agent_helpers import CATALOG, NAME_QUERIES, SEMANTIC_QUERIES, SEMANTIC_QUERY, expected_name_matches, expected_semantic_matches
from payrail_test_support.backoffice import start_backoffice
from payrail_test_support.cli import run_cli
from payrail_test_support.environments import cli_environment
from payrail_test_support.interfaces import api_registry, backoffice_round, mcp_stdio_answers, run_cli_commands
from payrail_test_support.pgbouncer import start_pgbouncer
from payrail_test_support.remote_agents import McpHttpServer
from payrail_test_support.servers import replace_database

NUMBERS = ["smallint", "integer", "bigint", "numeric", "real", "double precision"]
TEXTS = ["text", "character varying", "name", '"char"']
COMPARISONS = ["=", "<>", "<", "<=", ">", ">="]
ARITHMETIC = ["+", "-", "*", "/"]
# Types whose own operators a path with public first would find in public before pg_catalog.
EXACT = NUMBERS + TEXTS + ["oid", "boolean", "regtype", "regclass"]


def planted_objects(vector_schema: str) -> str:
    """SQL a hostile role runs: a log table anyone may write, and for every mixed pair of numbers
    or of text types, and every type with itself, an operator whose function logs who ran it; and
    overloads of functions the package calls, taking the types a caller might pass without a cast
    or, for a path with public first, exactly the built-ins' own."""
    statements = [
        "create table public.planted_runs (who text, what text)",
        "grant insert, select on public.planted_runs to public",
    ]
    pairs = [(a, b, COMPARISONS + ARITHMETIC) for a, b in itertools.permutations(NUMBERS, 2)]
    pairs += [(a, b, COMPARISONS + ["||"]) for a, b in itertools.permutations(TEXTS, 2)]
    pairs += [(t, t, COMPARISONS + (ARITHMETIC if t in NUMBERS else ["||"] if t == "text" else [])) for t in EXACT]
    for number, (left, right, operators) in enumerate(pairs):
        function = f"public.planted_{number}"
        statements.append(
            f"create function {function}(a {left}, b {right}) returns boolean language sql volatile as "
            f"$$ insert into public.planted_runs values (current_user, '{left} op {right}'); select true $$"
        )
        statements += [f"create operator public.{op} (leftarg = {left}, rightarg = {right}, function = {function})" for op in operators]
    overloads = [
        ("lower", "character varying"),
        ("char_length", "character varying"),
        ("btrim", "character varying"),
        ("format", "character varying"),
        ("md5", "character varying"),
        ("normalize", "character varying, text"),
        ("vector_norm", f"{vector_schema}.vector"),
        ("l2_normalize", f"{vector_schema}.vector"),
        ("vector_dims", f"{vector_schema}.vector"),
        ("now", "integer"),
        ("cardinality", "character varying[]"),
        ("lower", "text"),
        ("char_length", "text"),
        ("strpos", "text, text"),
        ("now", ""),
        ("to_regtype", "text"),
        ("to_regclass", "text"),
        ("set_config", "text, text, boolean"),
        ("has_table_privilege", "text, text"),
        ("pg_advisory_xact_lock", "bigint"),
        ("pg_has_role", "name, oid, text"),
        ("current_setting", "text"),
    ]
    for name, arguments in overloads:
        statements.append(
            f"create function public.{name}({arguments}) returns integer language sql volatile as "
            f"$$ insert into public.planted_runs values (current_user, '{name}({arguments})'); select 1 $$"
        )
    return ";\n".join(statements)


def fresh_database(server, label: str) -> str:
    """An empty database (no registry, no pgvector) on the test server."""
    name = f"payrail_hostile_{label}_{next(server._counter)}"
    with psycopg.connect(server.admin_url, autocommit=True) as admin:
        admin.execute(sql.SQL("drop database if exists {}").format(sql.Identifier(name)))
        admin.execute(sql.SQL("create database {} template template0").format(sql.Identifier(name)))
    return replace_database(server.admin_url, name)


def as_login(url: str, login: str) -> str:
    parts = urlsplit(url)
    return parts._replace(netloc=f"{login}@{parts.netloc.rpartition('@')[2]}").geturl()


@pytest.fixture
def hostile_login(server):
    logins = []

    def create(url: str, grant: str = "payrail_agent") -> str:
        login = f"hostile_{urlsplit(url).path.lstrip('/')}"[:63]
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(sql.SQL("create role {} login in role {}").format(sql.Identifier(login), sql.Identifier(grant)))
        logins.append((url, login))
        return login

    yield create
    for url, login in logins:
        server.drop_database(url)
        with psycopg.connect(server.admin_url, autocommit=True) as admin:
            admin.execute(sql.SQL("drop role if exists {}").format(sql.Identifier(login)))


def test_db_apply_refuses_a_vector_schema_that_others_can_write_and_says_how_to_fix_it(server, hostile_login):
    url = fresh_database(server, "refuse")
    login = hostile_login(url)
    # A member login named before "every role": while PUBLIC may create, PUBLIC's grant is named.
    early_login = f"aaa_{urlsplit(url).path.lstrip('/')}"[:63]
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute("grant create on schema public to public")
        admin.execute(sql.SQL("create role {} login in role payrail_operator").format(sql.Identifier(early_login)))
    try:
        with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState) as refused:
            apply_schema(url)
    finally:
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(sql.SQL("drop role {}").format(sql.Identifier(early_login)))
    assert "schema public is on the registry's search path, and every role (PUBLIC) can create objects in it" in str(refused.value)
    assert 'Run "revoke create on schema public from public;"' in refused.value.diag.message_hint
    with psycopg.connect(url, autocommit=True) as admin:
        assert admin.execute("select pg_catalog.to_regnamespace('payrail')").fetchone() == (None,), "it installed something"
        admin.execute("revoke create on schema public from public")
        admin.execute(sql.SQL("grant create on schema public to {}").format(sql.Identifier(login)))
    with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState) as refused:
        apply_schema(url)
    assert f"and {login} can create objects in it" in str(refused.value)
    assert f'Run "revoke create on schema public from {login};"' in refused.value.diag.message_hint
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(sql.SQL("revoke create on schema public from {}").format(sql.Identifier(login)))
    apply_schema(url)


@pytest.mark.slow  # every face, directly and through a PgBouncer of its own
@pytest.mark.parametrize("access", ["direct", "pgbouncer"])
def test_nothing_a_hostile_agent_plants_in_public_ever_runs_as_another_role(access, server, hostile_login, operator_logins, openai_fake, tmp_path):
    url = fresh_database(server, "plant")
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute("create schema extensions")
        admin.execute("create extension vector schema extensions")
        admin.execute("grant usage on schema extensions to public")  # as managed services do
        admin.execute("grant create on schema public to public")
    apply_schema(url)
    login = hostile_login(url)
    with psycopg.connect(as_login(url, login), autocommit=True) as hostile:
        hostile.execute(planted_objects("extensions"))

    # The deployer (a superuser whose own search path starts with public) runs every command and
    # interface: directly, or through PgBouncer onto server connections whose path puts public first.
    bouncer = None
    env = cli_environment(url, openai_fake, tmp_path)
    if access == "pgbouncer":
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(sql.SQL("alter database {} set search_path = public, pg_catalog").format(sql.Identifier(urlsplit(url).path[1:])))
        bouncer = start_pgbouncer(server.admin_url, pool_mode="transaction", pool_size=1)
        env = cli_environment(bouncer.through(url), openai_fake, tmp_path) | {"PAYRAIL_PREPARED_STATEMENTS": "off"}
    try:
        run_cli_commands(env, tmp_path)
        queries = NAME_QUERIES + SEMANTIC_QUERIES
        expected = [{"matches": expected_name_matches(q)} for q in NAME_QUERIES]
        expected += [{"matches": expected_semantic_matches(q)} for q in SEMANTIC_QUERIES]
        with api_registry(env) as registry:
            answers = [{"matches": [m.to_json() for m in registry.search_provider_methods(q)["matches"]]} for q in queries]
        assert answers == expected
        assert mcp_stdio_answers(env, queries, tmp_path / "mcp-stdio.log") == expected
        mcp_http = McpHttpServer(env, tmp_path / "mcp-http.log")
        try:
            assert mcp_http.answers(queries) == expected
        finally:
            mcp_http.stop()
        # The backoffice signs in only with a password the server checks: an operator's, or the
        # superuser's at PgBouncer.
        sign_in = (backoffice.OPERATOR, backoffice.PASSWORD) if bouncer is None else ("postgres", pgbouncer.PASSWORD)
        running = start_backoffice(env, tmp_path)
        try:
            backoffice_round(running.url, *sign_in, access)
        finally:
            running.stop()
        assert "Traceback" not in running.output, running.output
        switched = run_cli(env, "model", "switch", "fake-embedding-2", "--json")
        assert switched.returncode == 0 and json.loads(switched.stdout)["switched"], (switched.stdout, switched.stderr)
        after = run_cli(env | {"PAYRAIL_EMBEDDING_MODEL": "fake-embedding-2"}, "search", "--json", SEMANTIC_QUERY)
        assert after.returncode == 0 and json.loads(after.stdout)["matches"], (after.stdout, after.stderr)
    finally:
        if bouncer is not None:
            bouncer.stop()

    # Each role, through the registry's functions, in sessions on the database's own search path.
    with psycopg.connect(url, autocommit=True) as session:
        for role in ("payrail_agent", "payrail_operator", "payrail_embedder"):
            session.execute(sql.SQL("set role {}").format(sql.Identifier(role)))
            session.execute("select * from payrail.search_provider_methods(%s)", (CATALOG[0]["provider"],))
            session.execute("select payrail.query_takes_name_path(%s)", (SEMANTIC_QUERY,))
            session.execute("reset role")
        session.execute("set role payrail_operator")
        session.execute("update payrail.provider_methods set urls = urls || '{https://planted.example/}'::text[] where not enabled")
        session.execute("reset role")

    # Read on pg_catalog alone: the checks themselves must not run what they look for.
    with psycopg.connect(url, autocommit=True, options="-c search_path=pg_catalog") as admin:
        assert admin.execute("select who, what from public.planted_runs").fetchall() == []
        hostile_oid = admin.execute("select %s::regrole::oid", (login,)).fetchone()[0]
        dependents = admin.execute(
            """
            select pg_catalog.pg_describe_object(d.classid, d.objid, d.objsubid)
            from pg_catalog.pg_depend as d
            where d.classid <> 'pg_catalog.pg_operator'::pg_catalog.regclass
              and ((d.refclassid = 'pg_catalog.pg_proc'::pg_catalog.regclass
                    and d.refobjid in (select oid from pg_catalog.pg_proc where proowner = %(owner)s))
                or (d.refclassid = 'pg_catalog.pg_operator'::pg_catalog.regclass
                    and d.refobjid in (select oid from pg_catalog.pg_operator where oprowner = %(owner)s)))
            """,
            {"owner": hostile_oid},
        ).fetchall()
        assert dependents == []
        # The planted objects were there to be found: a session on public's path does run them.
        admin.execute("set search_path = public")
        admin.execute("select 1::numeric = 1::integer")
        assert admin.execute("select count(*) from public.planted_runs").fetchone() == (1,)


CATALOG_OF_THE_REGISTRY = """
select pg_catalog.pg_get_functiondef(p.oid) from pg_catalog.pg_proc as p
where p.pronamespace = 'payrail'::pg_catalog.regnamespace and p.prokind <> 'a'
union all
select pg_catalog.pg_get_constraintdef(c.oid) from pg_catalog.pg_constraint as c
where c.connamespace = 'payrail'::pg_catalog.regnamespace
union all
select pg_catalog.pg_get_indexdef(i.indexrelid) from pg_catalog.pg_index as i
join pg_catalog.pg_class as c on c.oid = i.indexrelid where c.relnamespace = 'payrail'::pg_catalog.regnamespace
union all
select pg_catalog.pg_get_triggerdef(t.oid) from pg_catalog.pg_trigger as t
join pg_catalog.pg_class as c on c.oid = t.tgrelid where c.relnamespace = 'payrail'::pg_catalog.regnamespace
order by 1
"""


def registry_catalog(conn: psycopg.Connection) -> list[tuple]:
    # Definitions print schema names by the reader's search path: read them on one path.
    conn.execute("set search_path = pg_catalog")
    return conn.execute(CATALOG_OF_THE_REGISTRY).fetchall()


def test_every_db_file_rerun_alone_on_any_search_path_leaves_the_same_catalog(database_url):
    from payrail_embedder.postgres.deploy import sql_files

    with psycopg.connect(database_url, autocommit=True) as conn:
        before = registry_catalog(conn)
        for path in sql_files()[1:]:  # 000-extensions.sql runs on the deployer's path by design
            conn.execute("set search_path = pg_catalog")  # pgvector is not on it
            conn.execute("set client_min_messages = warning")
            conn.execute(path.read_text(encoding="utf-8"))
            assert registry_catalog(conn) == before, path.name
