"""Upgrades from every earlier release: a registry created and filled by an older release, through
that release's own CLI and SQL (records, drafts, edits with history, two operator logins), then
this checkout's `db apply`: every record, vector, history entry, draft, the model row and the
logins' grants are kept, agents get the same answers, and the catalog is exactly a new registry's.

Each release runs from `git archive` of its commit with this .venv's interpreter (its dependencies
are a subset of today's), so the test needs no other environment.
"""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest
from pgvector.psycopg import register_vector
from psycopg import sql

from payrail_test_support.cli import run_cli, write_jsonl
from payrail_test_support.code import code_tree, run_cli_of
from payrail_test_support.environments import cli_environment
from payrail_test_support.openai_fake import FAKE_MODEL, fake_embedding
from payrail_test_support.servers import login_url, replace_database

pytestmark = pytest.mark.slow

# The first commit with the registry table; the first with the history (and before the derived
# table); the first with search's derived half-precision table (before records had versions);
# the last before upgrade steps were recorded; the last before golden queries had a language.
RELEASES = ["b35def0", "17768a6", "b1fd839", "01de324", "efeeb70"]
# The golden query a release with golden queries holds before the upgrade.
OLD_GOLDEN = '{"query": "find a hotel room for tonight", "relevant": [["Acme Travel", "Hotel Search"]]}\n'

CATALOG = [
    {
        "provider": "Acme Travel",
        "method": "Hotel Search",
        "urls": ["https://api.acme.example/hotels"],
        "docsUrl": "https://docs.acme.example/hotels",
        "guidance": "Purpose: find live hotel availability.",
        "enabled": True,
    },
    {
        "provider": "Acme Travel",
        "method": "Flight Search",
        "urls": ["https://api.acme.example/flights"],
        "docsUrl": None,
        "guidance": "Purpose: search flights between two airports.",
        "enabled": True,
    },
    {
        "provider": "Globex",
        "method": "Send SMS",
        "urls": ["https://globex.example/sms"],
        "docsUrl": "https://globex.example/docs",
        "guidance": "Purpose: send a text message to a phone.",
        "enabled": True,
    },
    {"provider": "Globex", "method": "Weather", "urls": [], "docsUrl": None, "guidance": "Purpose: current weather for a city.", "enabled": True},
    {
        "provider": "Initech",
        "method": "Invoices",
        "urls": ["https://initech.example/invoices"],
        "docsUrl": None,
        "guidance": "Purpose: list and pay invoices.",
        "enabled": True,
    },
    {"provider": "Draftco", "method": "Secret Launch", "urls": [], "docsUrl": None, "guidance": "Purpose: not public yet.", "enabled": False},
]
QUERIES = ["Acme Travel", "Globex Send SMS", "weather", "find a hotel for tonight", "pay my bills", "text my customer", "Draftco", "Secret Launch"]


def fill(release: Path, url: str, env: dict[str, str], tmp_path: Path, logins: dict[str, str]) -> None:
    """Records, drafts and edits, through the release's own CLI (as the deployer) and SQL (as two operators)."""
    result = run_cli_of(release, env, "db", "apply")
    assert result.returncode == 0, result.stdout + result.stderr
    with psycopg.connect(url, autocommit=True) as admin:
        for login, role in logins.items():
            admin.execute(sql.SQL("create role {} login in role {}").format(sql.Identifier(login), sql.Identifier(role)))
    for number, catalog in enumerate([CATALOG, [dict(CATALOG[1], guidance="Purpose: search and compare flights.")]]):
        result = run_cli_of(release, env, "import", write_jsonl(tmp_path / f"catalog-{number}.jsonl", catalog))
        assert result.returncode == 0, result.stdout + result.stderr
    if has_golden_queries(release):
        result = run_cli_of(release, env, "golden", "import", write_jsonl(tmp_path / "golden.jsonl", [json.loads(OLD_GOLDEN)]))
        assert result.returncode == 0, result.stdout + result.stderr
    first, second = [login for login, role in logins.items() if role == "payrail_operator"]
    if release.name == "b35def0":  # operators could not write yet: the rule helpers were not granted to them
        first = second = urlsplit(url).username
    with psycopg.connect(login_url(url, first), autocommit=True) as operator:
        operator.execute(
            "update payrail.provider_methods set urls = array['https://api.acme.example/v2/hotels'] where provider = 'Acme Travel' and method = 'Hotel Search'"
        )
        operator.execute("insert into payrail.provider_methods (provider, method, guidance) values ('Hooli', 'Mail', 'Purpose: mail.')")
    with psycopg.connect(login_url(url, second), autocommit=True) as operator:
        operator.execute("delete from payrail.provider_methods where provider = 'Initech'")
        operator.execute("update payrail.provider_methods set enabled = false where provider = 'Globex' and method = 'Weather'")


def has_golden_queries(release: Path) -> bool:
    return (release / "db" / "schema" / "080-golden_queries.sql").exists()


def snapshot(url: str, agent_url: str, logins: list[str]) -> dict:
    """What must survive an upgrade, read with the columns the release had."""
    with psycopg.connect(url) as conn:

        def rows(table: str, order: str) -> list:
            columns = [
                c
                for (c,) in conn.execute(
                    "select column_name from information_schema.columns where table_schema = 'payrail' and table_name = %s order by column_name", (table,)
                )
            ]
            if not columns:
                return []
            listed = sql.SQL(", ").join(sql.SQL("{}::text").format(sql.Identifier(c)) for c in columns)
            return [
                dict(zip(columns, row, strict=True))
                for row in conn.execute(sql.SQL("select {} from payrail.{} order by {}").format(listed, sql.Identifier(table), sql.SQL(order)))
            ]

        state = {
            "records": rows("provider_methods", "id"),
            "history": rows("provider_method_history", "id"),
            "golden": rows("golden_queries", "id"),
            "model": rows("embedding_model", "name"),
            "memberships": conn.execute(
                """select m.rolname::text, r.rolname::text from pg_auth_members as a
                   join pg_roles as m on m.oid = a.member join pg_roles as r on r.oid = a.roleid
                   where m.rolname = any(%s) order by 1, 2""",
                (logins,),
            ).fetchall(),
        }
    with psycopg.connect(agent_url, autocommit=True) as agent:
        register_vector(agent)
        state["answers"] = {
            query: agent.execute("select * from payrail.search_provider_methods(%s, %s, %s)", (query, fake_embedding(query), FAKE_MODEL)).fetchall()
            for query in QUERIES
        }
    return state


def catalog_of(url: str) -> list[tuple]:
    with psycopg.connect(url) as conn:
        return conn.execute("select kind, name, definition from payrail._catalog_definitions() order by kind, name").fetchall()


@pytest.mark.parametrize("release", RELEASES)
def test_db_apply_upgrades_a_registry_of_an_earlier_release_keeping_everything(release, server, database_url, openai_fake, tmp_path):
    name = f"upgrade_{release}_{urlsplit(database_url).path.lstrip('/')}"
    url, fresh = replace_database(database_url, name), replace_database(database_url, f"{name}_fresh")
    logins = {f"{name}_op1": "payrail_operator", f"{name}_op2": "payrail_operator", f"{name}_agent": "payrail_agent"}
    with psycopg.connect(server.admin_url, autocommit=True) as admin:
        for database in (name, f"{name}_fresh"):
            admin.execute(sql.SQL("create database {} template template0").format(sql.Identifier(database)))
    env = cli_environment(url, openai_fake, tmp_path)
    try:
        fill(code_tree(tmp_path / release, release), url, env, tmp_path, logins)
        agent_url = login_url(url, f"{name}_agent")
        before = snapshot(url, agent_url, list(logins))
        assert len(before["records"]) == 6 and before["answers"]["Acme Travel"], before

        result = run_cli(env, "db", "apply", "--json")
        assert result.returncode == 0, result.stdout + result.stderr
        applied = json.loads(result.stdout)
        assert applied["changed"] is True

        after = snapshot(url, agent_url, list(logins))
        for record, kept in zip(before["records"], after["records"], strict=True):
            assert {column: kept[column] for column in record} == record
            assert kept["version"] == record.get("version", "1")
        for entry, kept in zip(before["history"], after["history"], strict=True):
            assert {column: kept[column] for column in entry} == entry
            assert kept["version"] == entry.get("version")
        for query, kept in zip(before["golden"], after["golden"], strict=True):
            assert {column: kept[column] for column in query} == query and kept["language"] is None, "a golden query kept, without a language"
        assert len(after["golden"]) == has_golden_queries(tmp_path / release)
        assert (after["model"], after["memberships"], after["answers"]) == (before["model"], before["memberships"], before["answers"])
        assert len(after["history"]) >= (0 if release == "b35def0" else 4), "the first release kept no history; the others did"

        with psycopg.connect(url) as conn:
            assert conn.execute(
                """select (select array_agg((provider_method_id, unit_embedding::text) order by provider_method_id)
                           from payrail.provider_method_half_vectors)
                          is not distinct from
                          (select array_agg((id, (l2_normalize(embedding)::halfvec)::text) order by id)
                           from payrail.provider_methods where enabled)"""
            ).fetchone()[0], "search's derived rows are the enabled records'"
            assert conn.execute(
                """select (select array_agg(e order by e.provider_method_id) from payrail.provider_method_list_entries as e)
                          is not distinct from
                          (select array_agg(x order by x.provider_method_id)
                           from payrail.provider_methods as pm cross join lateral payrail._list_entry(pm) as x)"""
            ).fetchone()[0], "the records list's entries are every record's"
            recorded = dict(conn.execute("select name, ran from payrail.applied_upgrades").fetchall())
        assert set(recorded) == {path.stem for path in (Path(__file__).parents[1] / "db" / "upgrades").glob("*.sql")}
        # Those it recorded stay as it recorded them (not needed: it was created with them).
        steps_before = {path.stem for path in (tmp_path / release / "db" / "upgrades").glob("*.sql")}
        assert all(ran for step, ran in recorded.items() if step not in steps_before), "a registry of an earlier release needs every later step checked"

        # Nothing of the old release is left over, nothing is missing: the catalog of a new registry.
        result = run_cli({**env, "PAYRAIL_DATABASE_URL": fresh}, "db", "apply")
        assert result.returncode == 0, result.stdout + result.stderr
        assert catalog_of(url) == catalog_of(fresh)

        # Current now: the next apply changes nothing, and operators go on editing, with history.
        assert json.loads(run_cli(env, "db", "apply", "--json").stdout)["changed"] is False, run_cli(env, "db", "status", "--json").stdout
        with psycopg.connect(login_url(url, f"{name}_op2"), autocommit=True) as operator:
            operator.execute("update payrail.provider_methods set urls = '{}' where provider = 'Globex' and method = 'Send SMS'")
            assert operator.execute("select changed_by, version from payrail.provider_method_history order by id desc limit 1").fetchone() == (f"{name}_op2", 1)
            # The upgraded registry has golden queries, with their language: an operator adds one
            # (the function of before, without a language, is gone: no two overloads), its record
            # is kept from deletion, and the next apply (every file again) keeps it.
            operator.execute("""select payrail.add_golden_query('text my customer',
                                array(select id from payrail.provider_methods where provider = 'Globex' and method = 'Send SMS'), 'en')""")
            with pytest.raises(psycopg.errors.ForeignKeyViolation, match="1 golden query names it"):
                operator.execute("delete from payrail.provider_methods where provider = 'Globex' and method = 'Send SMS'")
        golden = run_cli(env, "golden", "export")
        assert golden.stdout == (OLD_GOLDEN if has_golden_queries(tmp_path / release) else "") + (
            '{"query": "text my customer", "relevant": [["Globex", "Send SMS"]], "language": "en"}\n'
        ), golden.stderr
        assert json.loads(run_cli(env, "db", "apply", "--force", "--json").stdout)["changed"] is True
        assert run_cli(env, "golden", "export").stdout == golden.stdout
    finally:
        with psycopg.connect(server.admin_url, autocommit=True) as admin:
            for database in (name, f"{name}_fresh"):
                admin.execute(sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(database)))
            for login in logins:
                admin.execute(sql.SQL("drop role if exists {}").format(sql.Identifier(login)))


# The release before the look-alike rules (db/upgrades/007-lookalikes).
BEFORE_LOOKALIKES = "3d13ea2"


def test_a_registry_that_held_look_alikes_gets_the_rules_and_is_told_what_breaks_them(server, database_url, openai_fake, tmp_path):
    """A registry of the release before: look-alike providers, a name of mixed scripts and a
    Unicode docs host, as that release accepted them. The apply brings the rules (new writes obey
    them at once), its follow-up names the constraint the stored rows break, find_lookalikes()
    lists the pair; once the operator says so and the host is written in ASCII, it completes."""
    # A database of its own, empty: the test database is a copy of a template holding today's schema.
    url = replace_database(database_url, f"before_lookalikes_{urlsplit(database_url).path.lstrip('/')}")
    with psycopg.connect(server.admin_url, autocommit=True) as admin:
        admin.execute(sql.SQL("create database {} template template0").format(sql.Identifier(urlsplit(url).path.lstrip("/"))))
    try:
        registry_that_held_look_alikes(url, openai_fake, tmp_path)
    finally:
        with psycopg.connect(server.admin_url, autocommit=True) as admin:
            admin.execute(sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(urlsplit(url).path.lstrip("/"))))


def registry_that_held_look_alikes(database_url: str, openai_fake, tmp_path: Path) -> None:
    env = cli_environment(database_url, openai_fake, tmp_path)
    old = [
        {"provider": "Stripe", "method": "Charge", "urls": [], "docsUrl": "https://docs.stripe.com", "guidance": "G.", "enabled": True},
        {"provider": "Str\u0456pe", "method": "Refund", "urls": [], "docsUrl": "https://b\u00fccher.example/docs", "guidance": "G."},
    ]
    release = code_tree(tmp_path / BEFORE_LOOKALIKES, BEFORE_LOOKALIKES)
    for args in (("db", "apply"), ("import", write_jsonl(tmp_path / "old.jsonl", old))):
        result = run_cli_of(release, env, *args)
        assert result.returncode == 0, result.stdout + result.stderr

    result = run_cli(env, "db", "apply")
    # The first of the two the stored rows break, in the follow-up's order, names itself.
    assert result.returncode != 0 and "provider_methods_docs_url_ascii_host_check" in result.stderr, result.stdout + result.stderr
    with psycopg.connect(database_url, autocommit=True) as conn:
        assert conn.execute("select ran from payrail.applied_upgrades where name = '007-lookalikes'").fetchone() == (True,)
        stripe, imitation = (
            conn.execute("select id from payrail.provider_methods where provider = %s", (name,)).fetchone()[0] for name in ("Stripe", "Str\u0456pe")
        )
        # Each of the two, with the other.
        assert conn.execute("select record_id, field, looks_like_record_id from payrail.find_lookalikes()").fetchall() == sorted(
            [(stripe, "provider", imitation), (imitation, "provider", stripe)]
        )
        with pytest.raises(psycopg.errors.CheckViolation, match=f"looks like the provider of record ({stripe}|{imitation})"):
            conn.execute("insert into payrail.provider_methods (provider, method, guidance, mixed_scripts) values ('Str\u0456pe', 'Payout', 'G.', true)")
        # A stored row that breaks a rule not yet validated is written again only whole: its
        # host as it is, the word given alone, is refused.
        with pytest.raises(psycopg.errors.CheckViolation, match="provider_methods_docs_url_ascii_host_check"):
            conn.execute("update payrail.provider_methods set mixed_scripts = true where id = %s", (imitation,))
    # The operator's word and the host in its ASCII form, in one save: what import writes now.
    fixed = [dict(old[1], mixedScripts=True)]
    result = run_cli(env, "import", write_jsonl(tmp_path / "fixed.jsonl", fixed))
    assert result.returncode == 0, result.stdout + result.stderr
    result = run_cli(env, "db", "apply", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    with psycopg.connect(database_url) as conn:
        assert conn.execute("select docs_url from payrail.provider_methods where id = %s", (imitation,)).fetchone() == ("https://xn--bcher-kva.example/docs",)
        assert conn.execute("select constraints_not_validated from payrail.get_schema_version()").fetchone() == ([],)


# The last release whose search held an agent's login to the login's own settings (before
# db/upgrades/010-agent_logins).
BEFORE_AGENT_LOGINS = "dccd107"


def test_agent_logins_of_an_earlier_release_keep_searching_held_to_the_bounds_they_were_given(server, database_url, openai_fake, tmp_path):
    """Agent logins made by that release's `agent add` (one with its own timeout, one that lifted
    its statement_timeout itself, as that release let it), and one a DBA made without settings.
    The apply adopts the first two into payrail.agent_logins (a lifted or missing bound becomes
    agent add's default) and leaves the third as it was; then each searches as docs/security.md says."""
    name = f"before_agent_logins_{urlsplit(database_url).path.lstrip('/')}"
    url = replace_database(database_url, name)
    kept, tuned, lifted, bare = (f"{name}_{login}" for login in ("kept", "tuned", "lifted", "bare"))
    with psycopg.connect(server.admin_url, autocommit=True) as admin:
        admin.execute(sql.SQL("create database {} template template0").format(sql.Identifier(name)))
    env = cli_environment(url, openai_fake, tmp_path)
    release = code_tree(tmp_path / BEFORE_AGENT_LOGINS, BEFORE_AGENT_LOGINS)
    try:
        for args in (
            ("db", "apply"),
            ("import", write_jsonl(tmp_path / "catalog.jsonl", CATALOG)),
            ("agent", "add", kept, "--no-password"),
            ("agent", "add", tuned, "--no-password", "--statement-timeout", "1500ms"),
            ("agent", "add", lifted, "--no-password"),
        ):
            result = run_cli_of(release, env, *args)
            assert result.returncode == 0, result.stdout + result.stderr
        with psycopg.connect(login_url(url, lifted), autocommit=True) as agent:
            agent.execute(sql.SQL("alter role {} set statement_timeout = 0").format(sql.Identifier(lifted)))
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(sql.SQL("create role {} login in role payrail_agent").format(sql.Identifier(bare)))

        result = run_cli(env, "db", "apply", "--json")
        assert result.returncode == 0, result.stdout + result.stderr
        with psycopg.connect(url) as conn:
            assert conn.execute("select ran from payrail.applied_upgrades where name = '010-agent_logins'").fetchone() == (True,)
            adopted = conn.execute(
                "select login::text, statement_timeout, idle_in_transaction_session_timeout, lock_timeout from payrail.agent_logins order by 2, 1"
            ).fetchall()
        assert adopted == sorted([(tuned, "1500ms", "10s", None), (kept, "2s", "10s", None), (lifted, "2s", "10s", None)], key=lambda row: (row[1], row[0]))

        for login in (kept, tuned, bare):
            with psycopg.connect(login_url(url, login), autocommit=True) as agent:
                assert agent.execute("select provider from payrail.search_provider_methods('Acme Travel')").fetchall(), login
        with psycopg.connect(login_url(url, lifted), autocommit=True) as agent:
            with pytest.raises(psycopg.Error, match=f"statement_timeout is 0 \\(off\\) in this session, but login {lifted} is given 2s") as raised:
                agent.execute("select provider from payrail.search_provider_methods('Acme Travel')")
            assert raised.value.sqlstate == "PYS01"
            agent.execute("set statement_timeout = '2s'")
            assert agent.execute("select provider from payrail.search_provider_methods('Acme Travel')").fetchall(), "at its bound it searches"
        # From now on a login lifting its own setting gains nothing; the next apply adopts no one again.
        with psycopg.connect(login_url(url, tuned), autocommit=True) as agent:
            agent.execute(sql.SQL("alter role {} set statement_timeout = '1h'").format(sql.Identifier(tuned)))
        with psycopg.connect(login_url(url, tuned), autocommit=True) as agent:
            with pytest.raises(psycopg.Error, match=f"statement_timeout is 1h in this session, but login {tuned} is given 1500ms"):
                agent.execute("select provider from payrail.search_provider_methods('Acme Travel')")
        assert json.loads(run_cli(env, "db", "apply", "--force", "--json").stdout)["changed"] is True
        with psycopg.connect(url) as conn:
            assert conn.execute("select count(*) from payrail.agent_logins").fetchone() == (3,)
    finally:
        with psycopg.connect(server.admin_url, autocommit=True) as admin:
            admin.execute(sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(name)))
            for login in (kept, tuned, lifted, bare):
                admin.execute(sql.SQL("drop role if exists {}").format(sql.Identifier(login)))
