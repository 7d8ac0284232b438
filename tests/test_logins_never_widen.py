"""`agent add` and `operator add` never widen a role (docs/security.md, "Logins that widen nothing").

Each attack makes a role that could already read or write more than the login it is to become,
by some route (a member of a member of payrail_operator, pg_read_all_data, ownership of a registry
table or of the database, a grant of its own on a table, a column, a write function or the schema),
or a role others are members of, or the registry's own group roles, and asks for the login: the
command refuses in words that name the route, and what every role involved can do, found by
connecting as it and trying (search, read drafts, write records, call the write path, read golden
queries, read or change the agents' bounds), is what it was before. What a command that succeeds
prints is then what the login can do, tried the same way.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from urllib.parse import quote

import psycopg
import pytest
from click.testing import CliRunner, Result
from psycopg import sql

from payrail_embedder.cli import cli
from payrail_test_support.servers import login_url

# What a role may do, each tried in a transaction rolled back: refused by PostgreSQL's privilege
# checks (42501) or not. Any other error (a constraint, a missing embedding) means it was let in.
PROBES = {
    "search": "select * from payrail.search_provider_methods('Stripe')",
    "read drafts": "select provider from payrail.provider_methods where not enabled",
    "write records": "insert into payrail.provider_methods (provider, method, guidance) values ('Evil', 'Write', 'Purpose: x.')",
    "call the write path": "select * from payrail.save_provider_method(null, 0, 'Evil', 'Save', '{}', null, 'Purpose: x.')",
    "read golden queries": "select * from payrail.golden_queries",
    "read agents' bounds": "select * from payrail.agent_logins",
    "change agents' bounds": "update payrail.agent_logins set statement_timeout = '1h'",
}
AGENT = {"search"}
OPERATOR = {"search", "read drafts", "write records", "call the write path", "read golden queries", "read agents' bounds"}


def abilities(database_url: str, role: str) -> set[str] | None:
    """What role can do in the registry, tried as it; None when it cannot log in."""
    try:
        conn = psycopg.connect(login_url(database_url, role), autocommit=True)
    except psycopg.OperationalError as error:
        assert "is not permitted to log in" in str(error), error
        return None
    can = set()
    with conn:
        for ability, probe in PROBES.items():
            try:
                with conn.transaction(force_rollback=True):
                    conn.execute(probe)
            except psycopg.Error as error:
                if error.sqlstate == "42501":
                    continue
            can.add(ability)
    return can


@pytest.fixture
def registry(database_url) -> Iterator[str]:
    """The test database with an enabled record, a draft and a golden query; the roles a test makes
    (named x_*) are dropped afterwards, with what they own given back."""
    with psycopg.connect(database_url, autocommit=True) as admin:
        admin.execute("select payrail.set_embedding_model('test-model', 3)")
        admin.execute("select payrail.save_provider_method(null, 0, 'Stripe', 'Charge', '{}', null, 'Charge a card.', true, '[1,0,0]', 'test-model')")
        admin.execute("select payrail.save_provider_method(null, 0, 'Draftco', 'Secret Launch', '{}', null, 'Purpose: not public yet.')")
        admin.execute("select payrail.add_golden_query('charge a card', array(select id from payrail.provider_methods where provider = 'Stripe'))")
    yield database_url
    with psycopg.connect(database_url, autocommit=True) as admin:
        me = sql.Identifier(admin.info.user)
        for (role,) in admin.execute("select rolname from pg_roles where rolname like 'x\\_%' or rolname like '\"x%' order by oid desc").fetchall():
            name = sql.Identifier(role)
            admin.execute(sql.SQL("reassign owned by {} to {}").format(name, me))
            admin.execute(sql.SQL("drop owned by {}").format(name))
            admin.execute(sql.SQL("drop role {}").format(name))


def run(database_url: str, *args: str, input: str | None = None) -> Result:
    return CliRunner().invoke(cli, ["--database-url", database_url, *args], input=input)


def refused(result: Result) -> str:
    assert result.exit_code == 2, result.output
    detail = json.loads(result.output)["detail"]
    assert detail.endswith("nothing was changed"), detail
    return detail


# Each: the SQL that makes role x_role (and what it needs), and the words the refusal must say.
AGENT_ATTACKS = {
    "member of a member of payrail_operator": (
        "create role x_leads in role payrail_operator; create role x_role login in role x_leads",
        "it is a member of payrail_operator (through x_leads), which reads drafts",
    ),
    "member of payrail_operator without inheriting it (SET ROLE)": (
        "create role x_leads noinherit in role payrail_operator; create role x_role login noinherit in role x_leads",
        "it is a member of payrail_operator (through x_leads), which reads drafts",
    ),
    "member of the embedder": ("create role x_role login in role payrail_embedder", "it is a member of payrail_embedder, which reads drafts"),
    "pg_read_all_data": ("create role x_role login in role pg_read_all_data", "it is a member of pg_read_all_data"),
    "pg_write_all_data through a group": (
        "create role x_ops in role pg_write_all_data; create role x_role login in role x_ops",
        "it is a member of pg_write_all_data (through x_ops)",
    ),
    "owner of a registry table": (
        "create role x_role login; alter table payrail.golden_query_embeddings owner to x_role",
        "it owns payrail.golden_query_embeddings",
    ),
    "member of the owner of a registry function": (
        "create role x_owner; create role x_role login in role x_owner; alter function payrail.get_schema_version() owner to x_owner",
        "it is a member of x_owner, which owns payrail.get_schema_version()",
    ),
    "owner of the database": ("create role x_role login; select 1", "it owns the database"),
    "select granted on provider_methods": (
        "create role x_role login; grant select on payrail.provider_methods to x_role",
        "it holds SELECT on payrail.provider_methods",
    ),
    "a column of provider_methods": (
        "create role x_role login; grant update (enabled) on payrail.provider_methods to x_role",
        "it holds UPDATE on payrail.provider_methods (enabled)",
    ),
    "execute on a write function, through a group": (
        "create role x_writers; create role x_role login in role x_writers; "
        "grant execute on function payrail.save_provider_method(bigint, integer, text, text, text[], text, text, boolean, vector, text, boolean) to x_writers",
        "it is a member of x_writers, which holds EXECUTE on payrail.save_provider_method(",
    ),
    "create on the schema": ("create role x_role login; grant create on schema payrail to x_role", "it holds CREATE on the schema payrail"),
    "superuser": ("create role x_role login superuser", "it is a superuser"),
    "createrole": ("create role x_role login createrole", "it may create roles (CREATEROLE)"),
    "replication": ("create role x_role login replication", "it may copy the whole server by replication (REPLICATION)"),
    "a group role others are members of": (
        "create role x_role nologin; create role x_member login in role x_role",
        "others are members of it (x_member): they would be given what it is given",
    ),
}


@pytest.mark.parametrize("attack", AGENT_ATTACKS, ids=list(AGENT_ATTACKS))
def test_agent_add_refuses_a_role_that_could_do_more_than_search_by_any_route_and_changes_nothing(registry, attack):
    setup, words = AGENT_ATTACKS[attack]
    with psycopg.connect(registry, autocommit=True) as admin:
        admin.execute(setup)
        if attack == "owner of the database":
            admin.execute(sql.SQL("alter database {} owner to x_role").format(sql.Identifier(admin.info.dbname)))
    roles = ["x_role", "x_member"] if attack == "a group role others are members of" else ["x_role"]
    before = {role: abilities(registry, role) for role in roles}

    detail = refused(run(registry, "agent", "add", "x_role", "--no-password", "--json"))
    assert detail.startswith("x_role cannot become an agent's login: "), detail
    assert words in detail, detail
    assert "An agent's login may only search" in detail
    assert {role: abilities(registry, role) for role in roles} == before, "a refused agent add changed what a role can do"
    with psycopg.connect(registry) as admin:
        assert admin.execute("select count(*) from payrail.agent_logins").fetchone() == (0,)


@pytest.mark.parametrize("group_role", ["payrail_agent", "payrail_operator", "payrail_embedder"])
def test_neither_command_turns_a_group_role_of_the_registry_into_a_login(registry, group_role):
    with psycopg.connect(registry, autocommit=True) as admin:
        admin.execute("create role x_agent login in role payrail_agent; create role x_operator login in role payrail_operator, payrail_embedder")
    before = {role: abilities(registry, role) for role in ("x_agent", "x_operator", group_role)}
    assert before == {"x_agent": AGENT, "x_operator": OPERATOR, group_role: None}

    detail = refused(run(registry, "agent", "add", group_role, "--no-password", "--json"))
    assert f"{group_role} cannot become an agent's login: " in detail and "it is one of the registry's group roles" in detail, detail
    detail = refused(run(registry, "operator", "add", group_role, "--password-stdin", "--json", input="a passphrase\n"))
    assert f"{group_role} cannot become an operator's login: " in detail and "it is one of the registry's group roles" in detail, detail
    assert {role: abilities(registry, role) for role in before} == before


OPERATOR_ATTACKS = {
    "an agent's login": ("create role x_role login in role payrail_agent", "it is a member of payrail_agent: it is an agent's login"),
    "a member of a group of agents": (
        "create role x_agents in role payrail_agent; create role x_role login in role x_agents",
        "it is a member of payrail_agent (through x_agents): it is an agent's login",
    ),
    "a group role agents are members of": (
        "create role x_role nologin in role payrail_agent; create role x_member login in role x_role",
        "others are members of it (x_member): they would be given what it is given",
    ),
    "pg_write_all_data": ("create role x_role login in role pg_write_all_data", "it is a member of pg_write_all_data"),
    "delete granted on the history": (
        "create role x_role login; grant delete on payrail.provider_method_history to x_role",
        "it holds DELETE on payrail.provider_method_history",
    ),
    "superuser": ("create role x_role login superuser", "it is a superuser"),
}


@pytest.mark.parametrize("attack", OPERATOR_ATTACKS, ids=list(OPERATOR_ATTACKS))
def test_operator_add_refuses_an_agents_login_and_any_role_that_would_widen_and_changes_nothing(registry, attack):
    setup, words = OPERATOR_ATTACKS[attack]
    with psycopg.connect(registry, autocommit=True) as admin:
        admin.execute(setup)
    roles = ["x_role", "x_member"] if "x_member" in setup else ["x_role"]
    before = {role: abilities(registry, role) for role in roles}

    detail = refused(run(registry, "operator", "add", "x_role", "--password-stdin", "--json", input="a passphrase\n"))
    assert detail.startswith("x_role cannot become an operator's login: ") and words in detail, detail
    assert {role: abilities(registry, role) for role in roles} == before, "a refused operator add changed what a role can do"
    if "agent" in attack:
        assert AGENT in before.values(), "the agents involved could search, and still only that"


def test_what_agent_add_prints_is_what_the_login_can_do_and_a_harmless_role_of_its_own_is_named(registry):
    """A role already a member of a group that gives nothing in the registry (pg_hba's +group, say)
    becomes an agent's login; the output says so, and the login can search and nothing else."""
    with psycopg.connect(registry, autocommit=True) as admin:
        admin.execute("create role x_hba_group; create role x_bot login in role x_hba_group")
    result = run(registry, "agent", "add", "x_bot", "--no-password")
    assert result.exit_code == 0, result.output
    assert "updated login x_bot without a password (peer or certificate authentication), granted payrail_agent only " in result.stdout
    assert "(its other roles, x_hba_group, give it nothing in this registry)" in result.stdout
    assert abilities(registry, "x_bot") == AGENT
    made = run(registry, "agent", "add", "x_new", "--no-password", "--json")
    assert made.exit_code == 0, made.output
    assert json.loads(made.stdout)["otherRoles"] == [] and abilities(registry, "x_new") == AGENT


def test_what_operator_add_prints_is_what_the_login_can_do(registry):
    result = run(registry, "operator", "add", "x_ada", "--password-stdin", input="a passphrase\n")
    assert result.exit_code == 0, result.output
    assert result.stdout == "created login x_ada with payrail_operator and payrail_embedder: sign in to the backoffice as x_ada\n"
    assert abilities(registry, "x_ada") == OPERATOR
    # An operator's login is not an agent's: agent add refuses it back.
    detail = refused(run(registry, "agent", "add", "x_ada", "--no-password", "--json"))
    assert "it is a member of payrail_embedder, which reads drafts" in detail and "and 1 more" not in detail, detail


# A quote, a terminal's escape sequence, a right-to-left override and a zero-width space.
HOSTILE = 'x_"q\x1b[31m\u202eevil\u200b'
SHOWN = '"x_""q\\x1b[31m\\u202eevil\\u200b"'


def test_role_names_are_shown_quoted_and_escaped_never_raw(registry):
    made = run(registry, "agent", "add", HOSTILE, "--no-password")
    assert made.exit_code == 0, made.output
    assert made.stdout.startswith(f"created login {SHOWN} without a password"), made.stdout
    assert f"agents connect with postgresql://{quote(HOSTILE, safe='')}@/" in made.stdout
    assert "\x1b" not in made.output and "\u202e" not in made.output, "no terminal control, in the output or the log line"
    assert "\u200b" not in made.stdout
    as_json = json.loads(run(registry, "agent", "add", HOSTILE, "--no-password", "--json").stdout)
    assert as_json["login"] == HOSTILE, "--json keeps the true name"
    assert abilities(registry, HOSTILE) == AGENT

    refusal = run(registry, "operator", "add", HOSTILE, "--password-stdin", input="a passphrase\n")
    assert refusal.exit_code == 2 and f"{SHOWN} cannot become an operator's login: it is a member of payrail_agent" in refusal.output, refusal.output
    assert "\x1b" not in refusal.output and "\u202e" not in refusal.output
    with psycopg.connect(registry, autocommit=True) as admin:
        admin.execute(sql.SQL("create role {} login in role payrail_operator").format(sql.Identifier("x_é\u2028")))
    refusal = run(registry, "agent", "add", "x_é\u2028", "--no-password")
    assert refusal.exit_code == 2 and 'Error: invalid_input: "x_é\\u2028" cannot become an agent\'s login' in refusal.output, refusal.output
