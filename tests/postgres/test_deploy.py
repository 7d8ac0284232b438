"""`db apply` is the deploy, and agents keep searching while it runs (DESIGN.md, "Running it for
years"): no search fails, whatever it changes; a registry that is current is left alone without a
lock; a change waits at most its lock_timeout, tries again, and names who holds what it waits for;
no role but the deployer can make it wait."""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np
import psycopg
import pytest
from pgvector.psycopg import register_vector
from psycopg import sql

from payrail_embedder.postgres.connection import display_url
from payrail_embedder.postgres.deploy import FIRST_APPLY_LOCK_KEY, LOCK_ORDER
from payrail_test_support.code import changed_tree, code_tree, run_cli_of, without_settings
from payrail_test_support.servers import login_url
from payrail_test_support.traffic import Traffic, overlapping
from payrail_test_support.waiting import wait_until

MODEL = "test-model"
DIMENSIONS = 16
RECORDS = 300
# Releases whose deploy changes something: a function's body, a constraint's definition.
FUNCTION_CHANGE = ("functions/200-search.sql", "message = 'query is empty',", "message = 'the query is empty',")
CONSTRAINT_CHANGE = (
    "schema/030-provider_methods.sql",
    "char_length(guidance) operator(pg_catalog.<=) 8000",
    "char_length(guidance) operator(pg_catalog.<=) 8001",
)


@dataclass
class Registry:
    url: str
    agent: str
    operator: str
    code: Path
    tmp_path: Path

    def env(self) -> dict[str, str]:
        return {**without_settings(), "PAYRAIL_DATABASE_URL": self.url}

    def apply(self, *args: str, code: Path | None = None):
        return run_cli_of(code or self.code, self.env(), "db", "apply", *args)

    def changed(self, name: str, change: tuple[str, str, str]) -> Path:
        """This checkout's code with one db/ file changed: the next release."""
        return changed_tree(self.code, self.tmp_path / name, *change)

    def traffic(self) -> Traffic:
        with psycopg.connect(self.url) as conn:
            ids = [row[0] for row in conn.execute("select id from payrail.provider_methods order by id")]
            providers = [row[0] for row in conn.execute("select distinct provider from payrail.provider_methods")]
        return Traffic(self.url, self.agent, self.operator, providers, ids, DIMENSIONS, MODEL)


@pytest.fixture
def registry(database_url, tmp_path):
    """RECORDS enabled records of random vectors, a login granted payrail_agent and one granted
    payrail_operator, and this checkout's code in a directory of its own."""
    suffix = urlsplit(database_url).path.lstrip("/")
    agent, operator = f"agent_{suffix}", f"operator_{suffix}"
    rng = np.random.default_rng(7)
    with psycopg.connect(database_url, autocommit=True) as admin:
        register_vector(admin)
        admin.execute("select payrail.set_embedding_model(%s, %s)", (MODEL, DIMENSIONS))
        with admin.cursor() as cursor:
            cursor.executemany(
                """insert into payrail.provider_methods
                     (provider, method, guidance, enabled, embedding, embedding_model, embedding_content_hash)
                   values (%(p)s, %(m)s, 'Purpose: test.', true, %(v)s, %(model)s, payrail._content_hash(%(p)s, %(m)s, 'Purpose: test.'))""",
                [
                    {"p": f"Provider {n // 3}", "m": f"Method {n}", "v": rng.standard_normal(DIMENSIONS).astype(np.float32), "model": MODEL}
                    for n in range(RECORDS)
                ],
            )
        admin.execute(sql.SQL("create role {} login in role payrail_agent").format(sql.Identifier(agent)))
        admin.execute(sql.SQL("create role {} login in role payrail_operator").format(sql.Identifier(operator)))
    yield Registry(database_url, agent, operator, code_tree(tmp_path / "code"), tmp_path)
    with psycopg.connect(database_url, autocommit=True) as admin:
        admin.execute(sql.SQL("drop role {}, {}").format(sql.Identifier(agent), sql.Identifier(operator)))


def apply_json(result) -> dict:
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout)


def drop_derived_rows(registry: Registry, count: int) -> None:
    """Search's derived rows gone missing, as after a superuser's mistake."""
    with psycopg.connect(registry.url) as conn:
        conn.execute(
            "delete from payrail.provider_method_half_vectors where provider_method_id in "
            "(select provider_method_id from payrail.provider_method_half_vectors order by 1 limit %s)",
            (count,),
        )


def searched_after(traffic: Traffic, count: int) -> None:
    """Until traffic has run a few searches more than count."""
    wait_until(lambda: len(traffic.searches) >= count + 3, "the agents to search", timeout=30)


@pytest.mark.slow
def test_no_search_fails_while_db_apply_runs_unchanged_or_changing(registry):
    function_release = registry.changed("function-release", FUNCTION_CHANGE)
    constraint_release = registry.changed("constraint-release", CONSTRAINT_CHANGE)
    drop_derived_rows(registry, 3)
    applies = []
    with registry.traffic().running() as traffic:
        searched_after(traffic, 0)
        for code, args in [
            (registry.code, ()),  # current: nothing to do
            (function_release, ()),  # a function changed: shared locks
            (constraint_release, ()),  # a constraint changed: exclusive locks, validated after
            (registry.code, ()),  # and back
            (registry.code, ("--force",)),  # every file, and every derived row checked
        ]:
            started = time.perf_counter()
            result = apply_json(registry.apply("--json", *args, code=code))
            applies.append((result, started, time.perf_counter()))
        searched_after(traffic, len(traffic.searches))

    assert [(r["changed"], r["locks"]) for r, _, _ in applies] == [(False, None), (True, "shared"), (True, "exclusive"), (True, "exclusive"), (True, "shared")]
    assert applies[2][0]["validatedConstraints"] == ["provider_methods.provider_methods_guidance_length_check"]
    assert [(r["derivedRowsChecked"], r["repairedDerivedRows"]) for r, _, _ in applies] == [(False, 0), (False, 0), (False, 0), (False, 0), (True, 3)]
    for result, started, ended in applies:
        searches = overlapping(traffic.searches, started, ended)
        assert len(searches) >= 3, f"too few searches ran during {result} to show anything"
    failed = [c.error for c in traffic.searches if c.error]
    assert failed == [], f"{len(failed)} of {len(traffic.searches)} searches failed: {sorted(set(failed))}"
    assert [c.error for c in traffic.edits if c.error] == []
    assert traffic.edits, "no edit ran"
    with psycopg.connect(registry.url) as conn:
        assert "'query is empty'" in conn.execute("select pg_get_functiondef('payrail._check_query(text)'::regprocedure)").fetchone()[0]


def test_derived_rows_are_checked_when_a_release_changes_how_they_are_derived(registry):
    """Checking them reads every vector, so an apply does it only when it changed their derivation
    (or with --force): a release that changes another function leaves even a missing row missing."""
    drop_derived_rows(registry, 2)
    result = apply_json(registry.apply("--json", code=registry.changed("function-release", FUNCTION_CHANGE)))
    assert (result["changed"], result["derivedRowsChecked"], result["repairedDerivedRows"]) == (True, False, 0)
    derivation_release = registry.changed(
        "derivation-release", ("functions/130-provider_method_half_vectors.sql", "found without a lock", "found first, without a lock")
    )
    result = apply_json(registry.apply("--json", code=derivation_release))
    assert (result["changed"], result["derivedRowsChecked"], result["repairedDerivedRows"]) == (True, True, 2)


def test_a_release_that_tightens_a_rule_checks_the_stored_rows_again_after_its_transaction(registry):
    """A name rule (an immutable function the constraints call) tightened: the constraints that call
    it are added again NOT VALID, so new writes obey it at once, and checked against every stored
    row after the transaction. A stored name that breaks it fails the apply naming the rule, and
    `db status` says so until the name is fixed and the apply runs again."""
    with psycopg.connect(registry.url) as conn:
        conn.execute("insert into payrail.provider_methods (provider, method, guidance) values ('Longco', 'A method name of thirty letters', 'Purpose: test.')")
    release = registry.changed("rule-release", ("schema/015-text_rules.sql", "(p_name)) operator(pg_catalog.<=) 120", "(p_name)) operator(pg_catalog.<=) 20"))
    result = registry.apply("--json", code=release)
    assert result.returncode == 1, result.stdout + result.stderr
    assert 'check constraint \\"provider_methods_method_check\\"' in result.stdout, result.stdout
    status = json.loads(run_cli_of(release, registry.env(), "db", "status", "--json").stdout)
    assert status["applyDue"] is True
    # Among the constraints left not valid (the follow-up stops at the first that fails; which others
    # it had validated by then depends on the order the catalog lists them in).
    not_validated = next(r for r in status["applyDueReasons"] if r.startswith("constraints not validated: "))
    assert "provider_methods.provider_methods_method_check" in not_validated.split(": ", 1)[1].split(", "), not_validated

    with psycopg.connect(registry.url) as conn:
        with pytest.raises(psycopg.errors.CheckViolation, match="provider_methods_method_check"):
            conn.execute(
                "insert into payrail.provider_methods (provider, method, guidance) values ('Newco', 'Another name of thirty letters', 'Purpose: test.')"
            )
        conn.rollback()
        conn.execute("update payrail.provider_methods set method = 'Short' where provider = 'Longco'")
    result = apply_json(registry.apply("--json", code=release))
    assert "provider_methods.provider_methods_method_check" in result["validatedConstraints"]
    assert json.loads(run_cli_of(release, registry.env(), "db", "status", "--json").stdout)["applyDue"] is False


def test_a_current_registry_is_applied_without_a_lock_that_searches_or_edits_wait_for(registry):
    """An apply that finds nothing to do reads the catalog and the record of the last apply, with
    the ACCESS SHARE locks a search takes and nothing more: it returns at once while another
    session holds every registry table against writers (as a running apply or an index build
    does) and an agent's transaction is left open after a search, and again while an operator's
    edit is left open."""
    tables = ", ".join((*LOCK_ORDER, "payrail.deployments"))
    agent_url, operator_url = login_url(registry.url, registry.agent), login_url(registry.url, registry.operator)
    with psycopg.connect(registry.url) as holder, psycopg.connect(agent_url) as agent:
        holder.execute(f"lock table {tables} in share row exclusive mode")
        agent.execute("select * from payrail.search_provider_methods('Provider 1')")
        assert_current_at_once(registry)
    with psycopg.connect(operator_url) as editor:
        editor.execute("update payrail.provider_methods set urls = '{}' where id = (select min(id) from payrail.provider_methods)")
        assert_current_at_once(registry)


def assert_current_at_once(registry: Registry) -> None:
    started = time.perf_counter()
    result = apply_json(registry.apply("--json", "--lock-timeout", "30"))
    assert time.perf_counter() - started < 30, "it waited for a lock"
    assert result["changed"] is False
    assert result["database"] == display_url(registry.url)


def test_an_apply_waits_at_most_lock_timeout_tries_again_and_names_who_holds_the_lock(registry):
    release = registry.changed("function-release", FUNCTION_CHANGE)
    with psycopg.connect(login_url(registry.url, registry.operator), application_name="forgotten psql") as holder:
        holder.execute("update payrail.provider_methods set urls = '{}' where id = (select min(id) from payrail.provider_methods)")
        pid = holder.info.backend_pid
        time.sleep(1.1)  # idle in transaction for at least a second
        started = time.perf_counter()
        result = registry.apply("--lock-timeout", "0.2", "--attempts", "3", code=release)
        elapsed = time.perf_counter() - started

    assert result.returncode == 1, result.stdout + result.stderr
    waits = re.findall(r"applying db/, attempt (\d) of 3: waited for (.+); trying again", result.stderr)
    assert [attempt for attempt, _ in waits] == ["1", "2"], result.stderr
    for _, wait in waits:
        assert wait.startswith("ShareRowExclusiveLock on payrail.provider_methods, held by "), wait
        assert f"pid {pid} (role {registry.operator}, application forgotten psql, idle in transaction for " in wait, wait
    assert "gave up after 3 attempts" in result.stderr
    assert elapsed < 20
    with psycopg.connect(registry.url) as conn:
        assert "'query is empty'" in conn.execute("select pg_get_functiondef('payrail._check_query(text)'::regprocedure)").fetchone()[0]
    # Once that session is gone, the same apply goes through.
    assert apply_json(registry.apply("--json", code=release))["changed"] is True


def test_no_role_but_the_deployer_can_make_an_apply_wait(registry):
    """The lock that serializes applies is one on payrail.deployments, which no role may lock (the
    advisory lock it replaced could be held by any login); an apply that finds the registry current
    waits for nobody."""
    everything = f"{registry.operator}_all"
    with psycopg.connect(registry.url, autocommit=True) as admin:
        admin.execute(sql.SQL("create role {} login in role payrail_agent, payrail_operator, payrail_embedder").format(sql.Identifier(everything)))
    try:
        with psycopg.connect(login_url(registry.url, everything)) as login:
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                login.execute("lock table payrail.deployments in exclusive mode")
            login.rollback()
            login.execute("select pg_advisory_lock(%s)", (FIRST_APPLY_LOCK_KEY,))
            login.commit()
            result = apply_json(registry.apply("--json", "--force", "--lock-timeout", "0.2", "--attempts", "1"))
            assert result["changed"] is True and result["attempts"] == 1
    finally:
        with psycopg.connect(registry.url, autocommit=True) as admin:
            admin.execute(sql.SQL("drop role {}").format(sql.Identifier(everything)))


def test_db_apply_prints_which_database_and_whether_it_changed_anything_with_stable_json_keys(registry):
    password_url = registry.url.replace("postgres:@", "postgres:not-the-password@")
    result = run_cli_of(registry.code, {**without_settings(), "PAYRAIL_DATABASE_URL": password_url}, "db", "apply")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith(f"{display_url(registry.url)}: the registry is current, nothing applied")
    assert "not-the-password" not in result.stdout + result.stderr
    result = registry.apply("--force")
    assert result.stdout.startswith(f"applied db/ to {display_url(registry.url)}: changed ("), result.stdout
    assert set(apply_json(registry.apply("--json"))) == {
        "database",
        "changed",
        "locks",
        "files",
        "upgrades",
        "validatedConstraints",
        "derivedRowsChecked",
        "repairedDerivedRows",
        "attempts",
        "seconds",
    }
