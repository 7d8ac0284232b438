"""The per-login limits docs/security.md tells a DBA to set for agent logins, shown to bite: a
statement_timeout that ends a search left waiting, and a connection limit. Set on the group role
payrail_agent instead, neither reaches its members: PostgreSQL applies a role's settings only to
sessions that log in as that role.

Any session may set its own statement_timeout, so an agent could lift its login's: the search
refuses then (PYS01), however the session set it (SET, SET LOCAL, options or PGOPTIONS at
connect), and every face says so. A login may also change its own settings (ALTER ROLE itself,
also IN DATABASE): a login made by `agent add` is held to the bounds the registry keeps for it
(payrail.agent_logins, which it can neither read nor write), never to its settings. A login given
no timeout is bounded by nothing in PostgreSQL: a pooler's query_timeout is what ends its statements.
"""

from __future__ import annotations

import json
from urllib.parse import urlsplit

import psycopg
import pytest
from click.testing import CliRunner
from psycopg import sql

from payrail_embedder.cli import cli
from payrail_embedder.registry.search import SearchUnavailable
from payrail_test_support.agent_helpers import import_catalog
from payrail_test_support.cli import cli_json
from payrail_test_support.environments import cli_environment
from payrail_test_support.interfaces import api_registry, mcp_stdio_answers
from payrail_test_support.pgbouncer import start_pgbouncer

SEARCH = "select * from payrail.search_provider_methods('Stripe')"
# One statement of 20,000 searches by name (the catalog has a provider Stripe): seconds of work.
MANY_SEARCHES = "select pg_catalog.count(*) from (select payrail.search_provider_methods('Stripe') from pg_catalog.generate_series(1, 20000)) as s"


def as_login(url: str, login: str) -> str:
    parts = urlsplit(url)
    return parts._replace(netloc=f"{login}@{parts.netloc.rpartition('@')[2]}").geturl()


@pytest.fixture
def agent_login(database_url):
    """A login granted payrail_agent, with the limits docs/security.md recommends (small, for the test)."""
    login = f"agent_login_{urlsplit(database_url).path.lstrip('/')}"
    with psycopg.connect(database_url, autocommit=True) as admin:
        admin.execute(sql.SQL("create role {} login connection limit 2 in role payrail_agent").format(sql.Identifier(login)))
        admin.execute(sql.SQL("alter role {} set statement_timeout = '300ms'").format(sql.Identifier(login)))
        # What does not work: settings of the group role.
        admin.execute("alter role payrail_agent set lock_timeout = '1ms'")
    yield as_login(database_url, login)
    with psycopg.connect(database_url, autocommit=True) as admin:
        admin.execute("alter role payrail_agent reset lock_timeout")
        admin.execute(sql.SQL("drop role {}").format(sql.Identifier(login)))


def refusal(login: str, now: str = "0 (off)") -> str:
    return f"statement_timeout is {now} in this session, but login {login} is given 300ms: a session may not lift the limits of its login"


def test_the_logins_statement_timeout_ends_a_search_that_waits(database_url, agent_login):
    with psycopg.connect(database_url) as editor, psycopg.connect(agent_login, autocommit=True) as agent:
        assert agent.execute("show statement_timeout").fetchone() == ("300ms",)
        assert agent.execute("show lock_timeout").fetchone() == ("0",), "a group role's setting reached a member"
        editor.execute("lock table payrail.provider_methods in access exclusive mode")
        with pytest.raises(psycopg.errors.QueryCanceled, match="statement timeout"):
            agent.execute(SEARCH)


def test_the_logins_connection_limit_refuses_one_more_session(agent_login):
    with psycopg.connect(agent_login), psycopg.connect(agent_login), pytest.raises(psycopg.OperationalError, match="too many connections for role"):
        psycopg.connect(agent_login)


def test_a_session_that_lifts_its_logins_statement_timeout_cannot_search_however_it_lifts_it(agent_login):
    login = urlsplit(agent_login).username

    def refused(agent: psycopg.Connection, statement: str = SEARCH) -> psycopg.Error:
        with pytest.raises(psycopg.Error) as raised:
            agent.execute(statement)
        assert raised.value.sqlstate == "PYS01", raised.value
        return raised.value

    with psycopg.connect(agent_login, autocommit=True) as agent:
        agent.execute("set statement_timeout = 0")
        error = refused(agent)
        assert error.diag.message_primary == refusal(login)
        assert f'"alter role {login} set statement_timeout = ..."' in error.diag.message_hint
        refused(agent, "select payrail.query_takes_name_path('Stripe')")
        agent.execute("set statement_timeout = '1min'")
        assert refused(agent).diag.message_primary == refusal(login, "1min")
        agent.execute("set statement_timeout = '200ms'")  # lower than the login's: its own business
        assert agent.execute("select payrail.query_takes_name_path('Stripe')").fetchone() == (False,)
        agent.execute("reset statement_timeout")
        with agent.transaction():
            agent.execute("set local statement_timeout = 0")
            refused(agent)
    with psycopg.connect(agent_login, autocommit=True, options="-c statement_timeout=0") as agent:
        assert agent.execute("show statement_timeout").fetchone() == ("0",)
        assert refused(agent).diag.message_primary == refusal(login)


def test_a_statement_of_20000_searches_ends_at_the_logins_timeout_or_at_its_first_search_once_lifted(database_url, agent_login, openai_fake, tmp_path):
    import_catalog(database_url, openai_fake, tmp_path)
    with psycopg.connect(agent_login, autocommit=True) as agent:
        assert agent.execute(SEARCH).fetchall(), "the statement's searches find records"
        with pytest.raises(psycopg.errors.QueryCanceled, match="statement timeout"):
            agent.execute(MANY_SEARCHES)
        agent.execute("set statement_timeout = 0")
        with pytest.raises(psycopg.Error) as raised:
            agent.execute(MANY_SEARCHES)
        assert raised.value.sqlstate == "PYS01"


def test_every_face_says_in_words_that_the_session_lifted_its_logins_limit(agent_login, openai_fake, tmp_path):
    login = urlsplit(agent_login).username
    env = cli_environment(agent_login, openai_fake, tmp_path) | {"PGOPTIONS": "-c statement_timeout=0"}
    code, answer, _ = cli_json(env, "search", "--json", "Stripe")
    assert (code, answer["error"]) == (1, "search_unavailable"), answer
    assert answer["detail"].startswith(refusal(login)), answer
    [answer] = mcp_stdio_answers(env, ["Stripe"], tmp_path / "mcp.log")
    assert answer["error"] == "search_unavailable" and answer["detail"].startswith(refusal(login)), answer
    # The Python API, lifted by the connection string's options.
    url = f"{agent_login}&options=-c%20statement_timeout%3D0"
    with api_registry(cli_environment(url, openai_fake, tmp_path)) as registry, pytest.raises(SearchUnavailable) as raised:
        registry.search_provider_methods("Stripe")
    assert raised.value.cause == "configuration" and raised.value.detail.startswith(refusal(login)), raised.value.detail


def test_a_login_given_no_timeout_is_bounded_by_the_poolers_query_timeout_alone(server, database_url, openai_fake, tmp_path):
    """What docs/security.md shows for PgBouncer: query_timeout ends a statement of any login."""
    import_catalog(database_url, openai_fake, tmp_path)
    login = f"free_agent_{urlsplit(database_url).path.lstrip('/')}"
    with psycopg.connect(database_url, autocommit=True) as admin:
        admin.execute(sql.SQL("create role {} login in role payrail_agent").format(sql.Identifier(login)))
    bouncer = start_pgbouncer(server.admin_url, pool_mode="transaction", query_timeout=1)
    try:
        bouncer.allow(login)
        with psycopg.connect(bouncer.through(database_url, login), autocommit=True, prepare_threshold=None) as agent:
            assert agent.execute("show statement_timeout").fetchone() == ("0",)
            assert agent.execute(SEARCH).fetchall()
            with pytest.raises(psycopg.OperationalError, match="query timeout"):
                agent.execute(MANY_SEARCHES)
    finally:
        bouncer.stop()
        with psycopg.connect(database_url, autocommit=True) as admin:
            admin.execute(sql.SQL("drop role {}").format(sql.Identifier(login)))


@pytest.fixture
def kept_agent(database_url):
    """A login made by `agent add`, with a small statement_timeout for the test: the registry keeps its bounds."""
    login = f"kept_agent_{urlsplit(database_url).path.lstrip('/')}"
    args = ["--database-url", database_url, "agent", "add", login, "--no-password", "--statement-timeout", "300ms", "--connection-limit", "3"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    yield as_login(database_url, login)
    with psycopg.connect(database_url, autocommit=True) as admin:
        admin.execute(sql.SQL("drop role {}").format(sql.Identifier(login)))


def test_an_agent_login_that_gives_itself_other_settings_is_held_to_the_bounds_agent_add_gave(database_url, kept_agent):
    """PostgreSQL lets the login ALTER ROLE itself, for every database or for this one; its next
    sessions start there, and search refuses them until they run at the bound the registry keeps."""
    login = urlsplit(kept_agent).username
    database = urlsplit(database_url).path.lstrip("/")
    with psycopg.connect(kept_agent, autocommit=True) as agent:
        assert agent.execute("show statement_timeout").fetchone() == ("300ms",)
        me = sql.Identifier(login)
        agent.execute(sql.SQL("alter role {} set statement_timeout = 0").format(me))
        agent.execute(sql.SQL("alter role {} in database {} set statement_timeout = '1h'").format(me, sql.Identifier(database)))
        agent.execute(sql.SQL("alter role {} reset idle_in_transaction_session_timeout").format(me))
        # What it cannot change: its bounds, and its connection limit.
        for statement in ("select * from payrail.agent_logins", "update payrail.agent_logins set statement_timeout = '1h'"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                agent.execute(statement)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            agent.execute(sql.SQL("alter role {} connection limit -1").format(me))

    with psycopg.connect(kept_agent, autocommit=True) as agent:
        assert agent.execute("show statement_timeout").fetchone() == ("1h",), "the login's setting for this database"
        with pytest.raises(psycopg.Error) as raised:
            agent.execute(SEARCH)
        assert raised.value.sqlstate == "PYS01"
        assert raised.value.diag.message_primary == refusal(login, "1h")
        assert "payrail.agent_logins" in raised.value.diag.message_hint and "agent add" in raised.value.diag.message_hint
        agent.execute("set statement_timeout = '300ms'")
        with pytest.raises(psycopg.Error) as raised:
            agent.execute(SEARCH)
        assert raised.value.diag.message_primary.startswith("idle_in_transaction_session_timeout is 0 (off) in this session, but login ")
        agent.execute("set idle_in_transaction_session_timeout = '10s'")
        assert agent.execute("select payrail.query_takes_name_path('Stripe')").fetchone() == (False,), "at its bounds it searches"
    with (
        psycopg.connect(kept_agent, autocommit=True, options="-c statement_timeout=300ms -c idle_in_transaction_session_timeout=5s") as agent,
        psycopg.connect(database_url) as editor,
    ):
        editor.execute("lock table payrail.provider_methods in access exclusive mode")
        with pytest.raises(psycopg.errors.QueryCanceled, match="statement timeout"):
            agent.execute(SEARCH)


@pytest.mark.parametrize(("option", "value"), [("--statement-timeout", "0"), ("--idle-in-transaction-timeout", "0ms")])
def test_agent_add_refuses_a_bound_of_zero_which_is_none_and_makes_nothing(database_url, option, value):
    login = f"unbound_{urlsplit(database_url).path.lstrip('/')}"
    result = CliRunner().invoke(cli, ["--database-url", database_url, "agent", "add", login, "--no-password", option, value, "--json"])
    assert result.exit_code == 2, result.output
    detail = json.loads(result.stdout)["detail"]
    assert detail.startswith(f"{option} 0 would leave the login's ") and "without a bound" in detail and detail.endswith("nothing was changed"), detail
    with psycopg.connect(database_url) as admin:
        assert admin.execute("select count(*) from pg_roles where rolname = %s", (login,)).fetchone() == (0,)
        assert admin.execute("select count(*) from payrail.agent_logins").fetchone() == (0,)


def test_agent_add_run_by_a_role_that_is_not_the_registrys_owner_says_so_and_makes_nothing(database_url):
    """A DBA that may create roles, but may not write the bounds the registry keeps."""
    suffix = urlsplit(database_url).path.lstrip("/")
    dba, login = f"dba_{suffix}", f"new_agent_{suffix}"
    with psycopg.connect(database_url, autocommit=True) as admin:
        admin.execute(sql.SQL("create role {} login createrole").format(sql.Identifier(dba)))
        admin.execute(sql.SQL("grant payrail_agent to {} with admin option").format(sql.Identifier(dba)))
    try:
        result = CliRunner().invoke(cli, ["--database-url", as_login(database_url, dba), "agent", "add", login, "--no-password", "--json"])
        assert result.exit_code == 2, result.output
        assert json.loads(result.stdout) == {
            "error": "not_permitted",
            "detail": "only the registry's owner writes payrail.agent_logins, where agent add keeps a login's bounds: "
            "run agent add as the role `db apply` runs as, or as a superuser; nothing was changed",
        }
        with psycopg.connect(database_url) as admin:
            assert admin.execute("select count(*) from pg_roles where rolname = %s", (login,)).fetchone() == (0,)
    finally:
        with psycopg.connect(database_url, autocommit=True) as admin:
            admin.execute(sql.SQL("drop role {}").format(sql.Identifier(dba)))
