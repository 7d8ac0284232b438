"""Nothing an outsider plants in pgvector's schema ever runs as the registry's callers.

The registry's functions resolve names through `pg_catalog, payrail, <pgvector's schema>`. A role
that may create objects in pgvector's schema (a login granted CREATE on `public` where pgvector
lives there) can plant an operator or a function whose argument types match a call exactly
where the built-in the call means does not (`integer - double precision`: PostgreSQL has only
`double precision - double precision`, reached by a cast), and PostgreSQL prefers the exact
match wherever it is on the path: then the planted code runs as whoever calls, a superuser
running the CLI's semantic search.

So this test first finds every operator and function the registry's SQL calls, with the
argument types as written: from the stored expressions of the catalog (constraints, defaults,
indexes, triggers' conditions, views, SQL-standard bodies) and from the parse trees PostgreSQL
logs for every statement it parses (`debug_print_parse`) while psql runs db/'s files on an
empty database (twice: the first install, then a rerun) and the pgTAP suite in db/tests (every
registry function's statements, error paths included). Then an outsider login plants a twin of
each in pgvector's schema: an object of exactly those argument types (or finds pgvector's own
in the way, which nothing can replace), which counts its runs in a sequence (not rolled back
with the statement it broke) and raises. And the registry is installed, used and deployed with
them there, as a superuser: every CLI command, the Python API, each registry role through its
functions, a model switch, `db apply` and `db status`. None may run, no registry object may
depend on one, and `db apply` refuses while the outsider can write the schema.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from payrail_embedder.postgres.deploy import apply_schema, sql_files
from payrail_test_support import REPO
from payrail_test_support.agent_helpers import CATALOG, NAME_QUERIES, SEMANTIC_QUERIES, SEMANTIC_QUERY
from payrail_test_support.cli import run_cli, write_jsonl
from payrail_test_support.environments import cli_environment
from payrail_test_support.interfaces import DRAFT, api_registry, run_cli_commands
from payrail_test_support.node_trees import Call, calls, logged_trees, parse
from payrail_test_support.servers import TEMPLATE, login_url, replace_database

pytestmark = pytest.mark.slow

# Every statement's parse tree, on one line each, sent to psql (which prints it with its context).
LOG_PARSE_TREES = "-c debug_print_parse=on -c debug_pretty_print=off -c client_min_messages=log"
PGTAP_FILES = sorted((REPO / "db" / "tests").glob("*.sql"))
# The trees of every expression the registry stores.
STORED_TREES = """
select c.conbin::text from pg_catalog.pg_constraint as c
where c.connamespace = 'payrail'::pg_catalog.regnamespace and c.conbin is not null
union all
select d.adbin::text from pg_catalog.pg_attrdef as d join pg_catalog.pg_class as c on c.oid = d.adrelid
where c.relnamespace = 'payrail'::pg_catalog.regnamespace
union all
select e.tree::text from pg_catalog.pg_index as i join pg_catalog.pg_class as c on c.oid = i.indrelid,
  lateral (values (i.indexprs), (i.indpred)) as e(tree)
where c.relnamespace = 'payrail'::pg_catalog.regnamespace and e.tree is not null
union all
select t.tgqual::text from pg_catalog.pg_trigger as t join pg_catalog.pg_class as c on c.oid = t.tgrelid
where c.relnamespace = 'payrail'::pg_catalog.regnamespace and t.tgqual is not null
union all
select r.ev_action::text from pg_catalog.pg_rewrite as r join pg_catalog.pg_class as c on c.oid = r.ev_class
where c.relnamespace = 'payrail'::pg_catalog.regnamespace
union all
select p.prosqlbody::text from pg_catalog.pg_proc as p
where p.pronamespace = 'payrail'::pg_catalog.regnamespace and p.prosqlbody is not null
"""
# The registry's functions by the names a context line prints (PL/pgSQL qualifies a function
# only when its schema is not on the session's path; SQL functions never), but for names that
# other schemas (pgTAP's) use too.
REGISTRY_FUNCTIONS = """
select p.proname::text from pg_catalog.pg_proc as p where p.pronamespace = 'payrail'::pg_catalog.regnamespace
except
select p.proname::text from pg_catalog.pg_proc as p where p.pronamespace <> 'payrail'::pg_catalog.regnamespace
"""


@dataclass(frozen=True)
class Twin:
    """An object of the called one's name with exactly the argument types of a call."""

    kind: str  # operator, function or aggregate
    name: str
    arguments: tuple[str, ...]  # format_type() of each, pgvector's types qualified
    result: str
    returns_set: bool
    meant: str  # what the call resolved to, for the report

    def describe(self) -> str:
        return f"{self.kind} {self.name}({', '.join(self.arguments)}), where the call meant {self.meant}"


def psql_parse_trees(server, url: str, path: Path, wanted) -> list:
    result = subprocess.run(
        [str(server.psql), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-v", "SHOW_CONTEXT=always", "--single-transaction", "-f", str(path), "-d", url],
        capture_output=True,
        text=True,
        errors="replace",
        timeout=300,
        cwd=REPO,
        env={**os.environ, "PGOPTIONS": LOG_PARSE_TREES},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return list(logged_trees(result.stderr, wanted))


def registry_twins(server, tmp_path: Path) -> set[Twin]:
    """A twin of every call of an operator or function the registry's SQL makes (module doc),
    each described in the database where the call was seen: OIDs differ between databases."""
    twins: set[Twin] = set()
    with fresh_database(server, "calls_install") as url:
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute("create extension vector")
        # db/install.sql but for its first line, which keeps the server's messages quiet.
        install = tmp_path / "install-logging.sql"
        install.write_text("".join(f"\\i {path}\n" for path in sql_files()))
        found: set[Call] = set()
        for _ in ("install", "rerun"):
            for tree in psql_parse_trees(server, url, install, lambda frame: True):
                found.update(calls(tree))
        with psycopg.connect(url, autocommit=True, options="-c search_path=pg_catalog") as admin:
            for (tree,) in admin.execute(STORED_TREES).fetchall():
                found.update(calls(parse(tree)))
            twins |= twins_of(admin, found)
    with fresh_database(server, "calls_pgtap", template=TEMPLATE) as url:
        with psycopg.connect(url, autocommit=True) as admin:
            registry = {name for (name,) in admin.execute(REGISTRY_FUNCTIONS)}
        found = set()
        for path in PGTAP_FILES:
            for tree in psql_parse_trees(server, url, path, lambda frame: (frame or "").removeprefix("payrail.") in registry):
                found.update(calls(tree))
        with psycopg.connect(url, autocommit=True, options="-c search_path=pg_catalog") as admin:
            twins |= twins_of(admin, found)
    return twins


def twins_of(conn: psycopg.Connection, found: set[Call]) -> set[Twin]:
    """The twin of each call, described in a session whose path is pg_catalog alone, so every type
    outside it is named with its schema."""
    twins = set()
    for call in found:
        if call.kind == "operator":
            row = conn.execute(
                """select o.oprname, o.oprleft, o.oprright, o.oprresult, o.oprcode::pg_catalog.regproc::text,
                          o.oid::pg_catalog.regoperator::text
                   from pg_catalog.pg_operator as o where o.oid = %s""",
                (call.oid,),
            ).fetchone()
            name, left, right, result, _, meant = row
            declared = [t for t in (left, right) if t != 0]
            kind, returns_set = "operator", False
        else:
            row = conn.execute(
                """select p.proname, p.proargtypes::pg_catalog.oid[], p.prorettype, p.prokind::text,
                          p.oid::pg_catalog.regprocedure::text
                   from pg_catalog.pg_proc as p where p.oid = %s""",
                (call.oid,),
            ).fetchone()
            name, declared, result, prokind, meant = row
            kind = {"a": "aggregate", "w": "aggregate"}.get(prokind, "function")
            returns_set = call.returns_set
            if kind == "aggregate" and not call.arguments:
                continue  # count(*), row_number(): called without arguments, no twin can take them
        arguments = list(call.arguments) + [None] * (len(declared) - len(call.arguments))
        types = []
        # A call of a VARIADIC "any" function (format, jsonb_build_object) passes more arguments
        # than the function declares: the twin takes the declared ones.
        for written, own in zip(arguments, declared, strict=False):
            if written is not None and written < 0:  # op ANY (array): the array's element type
                written = conn.execute("select typelem from pg_catalog.pg_type where oid = %s", (-written,)).fetchone()[0]
            types.append(written if written is not None else own)
        names = conn.execute(
            "select pg_catalog.format_type(t, null) from pg_catalog.unnest(%s::pg_catalog.oid[]) with ordinality as a(t, n) order by n",
            (types + [call.result or result],),
        ).fetchall()
        *argument_names, result_name = [n for (n,) in names]
        twins.add(Twin(kind, name, tuple(argument_names), result_name, returns_set, meant))
    return twins


def plant(conn: psycopg.Connection, schema: str, twins: set[Twin]) -> dict[str, Twin]:
    """Creates each twin that can be created in schema; returns them by the sequence that counts
    their runs. Left out: a twin of a signature some object there has already (pgvector's own,
    which nothing can take the place of), and one that takes a type of the registry's, which an
    outsider cannot name (its calls are the registry's own functions', named by their schema)."""
    planted = {}
    for number, twin in enumerate(sorted(twins, key=Twin.describe)):
        if any(t.startswith("payrail.") for t in (*twin.arguments, twin.result)):
            continue
        counter = f"planted_{number}_ran"
        function = sql.Identifier(schema, f"planted_{number}")
        arguments = sql.SQL(", ").join(sql.SQL(t) for t in twin.arguments)
        body = sql.SQL(
            "language plpgsql volatile as $$ begin perform pg_catalog.nextval({counter}); raise exception 'planted % ran as %', {what}, current_user; end $$"
        ).format(counter=sql.Literal(f"{schema}.{counter}"), what=sql.Literal(twin.describe()))
        returns = sql.SQL(("setof " if twin.returns_set else "") + twin.result)
        if twin.kind == "operator":
            sides = [sql.SQL("rightarg = {}").format(sql.SQL(twin.arguments[-1]))]
            if len(twin.arguments) == 2:
                sides.insert(0, sql.SQL("leftarg = {}").format(sql.SQL(twin.arguments[0])))
            statements = [
                sql.SQL("create function {}({}) returns {} ").format(function, arguments, returns) + body,
                sql.SQL("create operator {}.{} ({}, function = {})").format(sql.Identifier(schema), sql.SQL(twin.name), sql.SQL(", ").join(sides), function),
            ]
        elif twin.kind == "aggregate":
            final = sql.Identifier(schema, f"planted_{number}_final")
            state = sql.SQL(twin.result)
            statements = [
                sql.SQL("create function {}({}, {}) returns {} ").format(function, state, arguments, state) + body,
                sql.SQL("create function {}({}) returns {} ").format(final, state, state) + body,
                sql.SQL("create aggregate {}({}) (sfunc = {}, stype = {}, finalfunc = {})").format(
                    sql.Identifier(schema, twin.name), arguments, function, state, final
                ),
            ]
        else:
            statements = [sql.SQL("create function {}({}) returns {} ").format(sql.Identifier(schema, twin.name), arguments, returns) + body]
        try:
            with conn.transaction():
                conn.execute(sql.SQL("create sequence {}").format(sql.Identifier(schema, counter)))
                conn.execute(sql.SQL("grant usage on sequence {} to public").format(sql.Identifier(schema, counter)))
                for statement in statements:
                    conn.execute(statement)
        except (psycopg.errors.DuplicateFunction, psycopg.errors.DuplicateObject):
            continue
        planted[counter] = twin
    return planted


@contextmanager
def fresh_database(server, label: str, template: str = "template0") -> Iterator[str]:
    """A new database made from template (template0: no extension, no schema); dropped after."""
    name = f"payrail_{label}_{next(server._counter)}_{os.getpid()}"
    with psycopg.connect(server.admin_url, autocommit=True) as admin:
        admin.execute(sql.SQL("create database {} template {}").format(sql.Identifier(name), sql.Identifier(template)))
    try:
        yield replace_database(server.admin_url, name)
    finally:
        with psycopg.connect(server.admin_url, autocommit=True) as admin:
            admin.execute(sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(name)))


def runs(conn: psycopg.Connection, planted: dict[str, Twin]) -> list[str]:
    """The twins that ran, each with how often."""
    counted = conn.execute("select s.sequencename::text, s.last_value from pg_catalog.pg_sequences as s where s.last_value is not null").fetchall()
    return [f"{planted[name].describe()}: {count} times" for name, count in counted if name in planted]


def dependents(conn: psycopg.Connection, owner: str) -> list[str]:
    """Registry objects that depend on an object owner made: bound to it when they were created."""
    return [
        row[0]
        for row in conn.execute(
            """select pg_catalog.pg_describe_object(d.classid, d.objid, d.objsubid)
           from pg_catalog.pg_depend as d
           where d.refobjid in (select oid from pg_catalog.pg_proc where proowner = %(owner)s::pg_catalog.regrole
                                union all
                                select oid from pg_catalog.pg_operator where oprowner = %(owner)s::pg_catalog.regrole)
             and d.objid not in (select oid from pg_catalog.pg_proc where proowner = %(owner)s::pg_catalog.regrole
                                 union all
                                 select oid from pg_catalog.pg_operator where oprowner = %(owner)s::pg_catalog.regrole)""",
            {"owner": owner},
        )
    ]


def test_nothing_an_outsider_plants_in_pgvectors_schema_runs_or_is_bound(server, openai_fake, tmp_path):
    twins = registry_twins(server, tmp_path)
    outsider = f"outsider_{os.getpid()}_{next(server._counter)}"
    with psycopg.connect(server.admin_url, autocommit=True) as admin:
        admin.execute(sql.SQL("create role {} login").format(sql.Identifier(outsider)))
    try:
        with fresh_database(server, "planted") as url:
            with psycopg.connect(url, autocommit=True, options="-c search_path=pg_catalog") as admin:
                admin.execute("create extension vector schema public")  # where the server's default puts it
                admin.execute(sql.SQL("grant create on schema public to {}").format(sql.Identifier(outsider)))
            planted = attack(url, outsider, twins, openai_fake, tmp_path)
    finally:
        with psycopg.connect(server.admin_url, autocommit=True) as admin:
            admin.execute(sql.SQL("drop role {}").format(sql.Identifier(outsider)))
    kinds = {twin.kind for twin in planted.values()}
    assert kinds == {"operator", "function", "aggregate"}, kinds
    # A call written with types no built-in takes as they are: its twin was planted.
    assert any(twin.name == "*" and twin.arguments == ("integer", "double precision") for twin in planted.values()), sorted(
        twin.describe() for twin in planted.values()
    )


def attack(url: str, outsider: str, twins: set[Twin], openai_fake, tmp_path: Path) -> dict[str, Twin]:
    """Plants the twins as outsider, then installs, uses and deploys the registry among them
    (module doc); returns what was planted."""
    env = cli_environment(url, openai_fake, tmp_path)
    admin = psycopg.connect(url, autocommit=True, options="-c search_path=pg_catalog")
    hostile = psycopg.connect(login_url(url, outsider), autocommit=True, options="-c search_path=pg_catalog")
    grant = sql.SQL("grant create on schema public to {}").format(sql.Identifier(outsider))
    revoke = sql.SQL("revoke create on schema public from {}").format(sql.Identifier(outsider))
    try:
        planted = plant(hostile, "public", twins)
        # While the outsider can write pgvector's schema, db apply installs nothing.
        with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState, match=f"and {outsider} can create objects in it"):
            apply_schema(url)
        assert admin.execute("select pg_catalog.to_regnamespace('payrail')").fetchone() == (None,)

        # Revoked, the planted objects stay: the registry is created among them.
        admin.execute(revoke)
        apply_schema(url)
        assert runs(admin, planted) == [] and dependents(admin, outsider) == []

        # Writable again (granted after the apply): every interface, as the deployer.
        admin.execute(grant)
        run_cli_commands(env, tmp_path, apply=False)
        with api_registry(env) as registry:
            for query in NAME_QUERIES + SEMANTIC_QUERIES:
                assert registry.search_provider_methods(query)["matches"]
        for role in ("payrail_agent", "payrail_operator", "payrail_embedder"):
            with psycopg.connect(url, autocommit=True) as session:
                session.execute(sql.SQL("set role {}").format(sql.Identifier(role)))
                session.execute("select * from payrail.search_provider_methods(%s)", (CATALOG[0]["provider"],))
                session.execute("select payrail.query_takes_name_path(%s)", (SEMANTIC_QUERY,))
        # What the commands above leave out: the list, a restore, a save the rules refuse (whose
        # report runs every check constraint again), a delete.
        assert run_cli(env, "list").returncode == 0
        with psycopg.connect(url, autocommit=True) as session:
            history_id = session.execute("select pg_catalog.max(id) from payrail.provider_method_history").fetchone()[0]
        restored = run_cli(env, "restore", str(history_id), "--as-draft", "--yes")
        assert restored.returncode == 0, (restored.stdout, restored.stderr)
        refused = run_cli(env, "import", write_jsonl(tmp_path / "refused.jsonl", [dict(DRAFT, urls=["http://insecure.example/"])]))
        assert refused.returncode != 0 and "https://" in refused.stdout + refused.stderr, (refused.stdout, refused.stderr)
        with psycopg.connect(url, autocommit=True) as session:
            deleted = session.execute("select payrail.delete_provider_method(id, version) from payrail.provider_methods where not enabled limit 1")
            assert deleted.fetchone() is not None
        switched = run_cli(env, "model", "switch", "fake-embedding-2", "--json")
        assert switched.returncode == 0 and json.loads(switched.stdout)["switched"], (switched.stdout, switched.stderr)
        after = run_cli(env | {"PAYRAIL_EMBEDDING_MODEL": "fake-embedding-2"}, "search", "--json", SEMANTIC_QUERY)
        assert after.returncode == 0 and json.loads(after.stdout)["matches"], (after.stdout, after.stderr)

        # db apply of a current registry checks again, and db status says why.
        applied = run_cli(env, "db", "apply")
        assert applied.returncode != 0 and f"{outsider} can create objects in it" in applied.stderr, (applied.stdout, applied.stderr)
        status = run_cli(env, "db", "status", "--json")
        assert {"schema": "public", "writer": outsider} in [
            {k: w[k] for k in ("schema", "writer")} for w in json.loads(status.stdout)["writableSearchPathSchemas"]
        ], status.stdout
        admin.execute(revoke)
        applied = run_cli(env, "db", "apply", "--force")
        assert applied.returncode == 0, (applied.stdout, applied.stderr)

        assert runs(admin, planted) == []
        assert dependents(admin, outsider) == []
        # They were there to be found: a session whose path holds public runs one.
        admin.execute("set search_path = pg_catalog, public")
        with pytest.raises(psycopg.errors.RaiseException, match="planted operator"):
            admin.execute("select 2 * 0.5::double precision")
        assert len(runs(admin, planted)) == 1
        return planted
    finally:
        hostile.close()
        admin.close()
