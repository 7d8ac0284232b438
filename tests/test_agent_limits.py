"""The per-login limits docs/security.md tells a DBA to set for agent logins, shown to bite: a
statement_timeout that ends a search left waiting, and a connection limit. Set on the group role
payrail_agent instead, neither reaches its members: PostgreSQL applies a role's settings only to
sessions that log in as that role.
"""

from __future__ import annotations

from urllib.parse import urlsplit

import psycopg
import pytest
from psycopg import sql


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


def test_the_logins_statement_timeout_ends_a_search_that_waits(database_url, agent_login):
    with psycopg.connect(database_url) as editor, psycopg.connect(agent_login, autocommit=True) as agent:
        assert agent.execute("show statement_timeout").fetchone() == ("300ms",)
        assert agent.execute("show lock_timeout").fetchone() == ("0",), "a group role's setting reached a member"
        editor.execute("lock table payrail.provider_methods in access exclusive mode")
        with pytest.raises(psycopg.errors.QueryCanceled, match="statement timeout"):
            agent.execute("select * from payrail.search_provider_methods('Stripe')")


def test_the_logins_connection_limit_refuses_one_more_session(agent_login):
    with psycopg.connect(agent_login), psycopg.connect(agent_login):
        with pytest.raises(psycopg.OperationalError, match="too many connections for role"):
            psycopg.connect(agent_login)
