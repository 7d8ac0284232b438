"""The per-login limits docs/security.md tells a DBA to set for agent logins, shown to bite: a
statement_timeout that ends a search left waiting, and a connection limit. Set on the group role
payrail_agent instead, neither reaches its members: PostgreSQL applies a role's settings only to
sessions that log in as that role.

Any session may set its own statement_timeout, so an agent could lift its login's: the search
refuses then (PYS01), however the session set it (SET, SET LOCAL, options or PGOPTIONS at
connect), and every face says so. A login given no timeout is bounded by nothing in PostgreSQL:
a pooler's query_timeout is what ends its statements.
"""

from __future__ import annotations

from urllib.parse import urlsplit

import psycopg
import pytest
from psycopg import sql

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
    with psycopg.connect(agent_login), psycopg.connect(agent_login):
        with pytest.raises(psycopg.OperationalError, match="too many connections for role"):
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
    with api_registry(cli_environment(url, openai_fake, tmp_path)) as registry:
        with pytest.raises(SearchUnavailable) as raised:
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
