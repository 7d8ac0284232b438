"""Every interface behind a real PgBouncer (Debian's package, started by the tests) in front of the
test server: in transaction mode with a pool smaller than its clients, and in session mode.

Agents (psycopg's SQL, the Python API from threads, MCP over stdio and HTTP, the CLI) and operators
(the backoffice, import, sync, edit) at once, through the pooler: no errors, and every answer the
same as over a direct connection. The package keeps no state in the pool's server connections, and
prepared statements, which PgBouncer 1.18 cannot carry in transaction mode, can be turned off.
"""

from __future__ import annotations

import itertools
import threading
import time
import traceback
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from payrail_embedder import SearchUnavailable
from payrail_embedder.base import errcodes
from payrail_embedder.base.errors import PREPARED_STATEMENTS_HINT, database_reason
from payrail_embedder.embedders import OpenAIEmbedder
from payrail_embedder.faces.api import Registry
from payrail_embedder.postgres import connection
from payrail_test_support.agent_helpers import NAME_QUERIES, SEMANTIC_QUERIES, SEMANTIC_QUERY, import_catalog
from payrail_test_support.backoffice import HttpClient, post_sign_in, start_backoffice
from payrail_test_support.cli import cli_json, documented_commands, run_cli, run_commands, write_jsonl
from payrail_test_support.environments import cli_environment
from payrail_test_support.interfaces import (
    api_registry,
    backoffice_round,
    cli_answer,
    draft_record,
    editing,
    mcp_stdio_answers,
)
from payrail_test_support.logs import events_among
from payrail_test_support.openai_fake import FAKE_MODEL, fake_embedding
from payrail_test_support.pgbouncer import PASSWORD, PgBouncer, start_pgbouncer
from payrail_test_support.remote_agents import McpHttpServer

AGENT, OPERATOR = "pool_agent", "pool_operator"
QUERIES = NAME_QUERIES + SEMANTIC_QUERIES


def create_logins(admin_url: str) -> None:
    """An agent login and an operator login, once per server (roles belong to the cluster)."""
    with psycopg.connect(admin_url, autocommit=True) as conn:
        for login, groups in ((AGENT, ["payrail_agent"]), (OPERATOR, ["payrail_operator", "payrail_embedder"])):
            if conn.execute("select from pg_catalog.pg_roles where rolname = %s", (login,)).fetchone() is None:
                conn.execute(sql.SQL("create role {} login").format(sql.Identifier(login)))
            conn.execute(sql.SQL("grant {} to {}").format(sql.SQL(", ").join(map(sql.Identifier, groups)), sql.Identifier(login)))


@pytest.fixture
def catalog_url(server, database_url, openai_fake, tmp_path) -> str:
    """The test database holding agent_helpers.CATALOG, with the pooler tests' logins."""
    create_logins(server.admin_url)
    import_catalog(database_url, openai_fake, tmp_path)
    return database_url


def pooled_environment(bouncer: PgBouncer, database_url: str, login: str, openai_fake, tmp_path: Path) -> dict[str, str]:
    bouncer.allow(login)
    # Every interface at once loads the machine: the embedding deadline is not what these tests test.
    return cli_environment(bouncer.through(database_url, login), openai_fake, tmp_path) | {
        "PAYRAIL_PREPARED_STATEMENTS": "off",
        "PAYRAIL_EMBEDDING_TIMEOUT": "60",
    }


def answer_json(registry: Registry, query: str) -> dict:
    return {"matches": [match.to_json() for match in registry.search_provider_methods(query)["matches"]]}


def fake_registry(url: str, openai_fake, **options) -> Registry:
    return Registry(url, embedder=OpenAIEmbedder(FAKE_MODEL, api_key="test-key", base_url=openai_fake.base_url), **options)


ROUNDS_UNCONFIGURED = 12


def test_an_unconfigured_registry_stops_preparing_behind_a_transaction_pool(server, catalog_url, openai_fake, caplog):
    """Prepared statements left on (the default) behind PgBouncer 1.18 in transaction mode, one
    server connection for two clients, so what one prepared there the next meets: no search
    fails. Each Registry meets "prepared statement ... does not exist" (or "already exists") once,
    turns them off for its pool, says so once naming PAYRAIL_PREPARED_STATEMENTS=off, and answers."""
    bouncer = start_pgbouncer(server.admin_url, pool_mode="transaction", pool_size=1)
    try:
        url = bouncer.through(catalog_url)
        with fake_registry(catalog_url, openai_fake) as direct:
            expected = {query: answer_json(direct, query) for query in QUERIES}
        failures = []
        with fake_registry(url, openai_fake) as first, fake_registry(url, openai_fake) as second:
            for _ in range(ROUNDS_UNCONFIGURED):
                for registry, query in itertools.product((first, second), QUERIES):
                    try:
                        assert answer_json(registry, query) == expected[query]
                    except SearchUnavailable as error:
                        failures.append(error.detail)
        assert failures == []
        turned_off = [record.fields for record in caplog.records if getattr(record, "event", None) == "prepared_statements_off"]
        # Once for each Registry's pool that met one (the one that turned them off first may leave
        # the other's statements alone on the server connection).
        assert 1 <= len(turned_off) <= 2, turned_off
        for event in turned_off:
            assert "PAYRAIL_PREPARED_STATEMENTS=off" in event["reason"], event
            assert "(SQLSTATE 26000)" in event["reason"] or "(SQLSTATE 42P05)" in event["reason"], event
    finally:
        bouncer.stop()


def test_a_lost_prepared_statement_names_the_setting_that_avoids_it(server, catalog_url):
    """Where nothing carries on for them (the CLI's commands), the error names the setting."""
    bouncer = start_pgbouncer(server.admin_url, pool_mode="transaction", pool_size=1)
    try:
        url = bouncer.through(catalog_url)
        with psycopg.connect(url, autocommit=True, prepare_threshold=0) as first, psycopg.connect(url, autocommit=True, prepare_threshold=0) as second:
            first.execute("select 1")  # prepares _pg3_0 on the one server connection
            with pytest.raises(psycopg.Error) as raised:
                second.execute("select 2")  # prepares its own _pg3_0 there: "already exists"
        assert raised.value.sqlstate in errcodes.PREPARED_STATEMENT_LOST
        assert database_reason(raised.value).endswith(f". {PREPARED_STATEMENTS_HINT}")
        assert "PAYRAIL_PREPARED_STATEMENTS=off" in PREPARED_STATEMENTS_HINT
    finally:
        bouncer.stop()


def test_db_apply_through_a_transaction_pool_repeats_its_statements_unprepared(server, catalog_url, openai_fake, tmp_path):
    # Ids spread over many more of --force's repair batches (a transaction each) than psycopg's
    # prepare threshold, while other clients keep the pool's two server connections changing hands.
    with psycopg.connect(catalog_url, autocommit=True) as admin:
        admin.execute("select pg_catalog.setval(pg_catalog.pg_get_serial_sequence('payrail.provider_methods', 'id'), 1000000)")
    bouncer = start_pgbouncer(server.admin_url, pool_mode="transaction", pool_size=2)
    done = threading.Event()

    def other_client():
        with psycopg.connect(bouncer.through(catalog_url), autocommit=True, prepare_threshold=None) as conn:
            while not done.is_set():
                conn.execute("select pg_catalog.pg_sleep(0.002)")

    others = [threading.Thread(target=other_client) for _ in range(3)]
    try:
        env = pooled_environment(bouncer, catalog_url, "postgres", openai_fake, tmp_path)
        code, report, stderr = cli_json(env, "import", "--json", write_jsonl(tmp_path / "far.jsonl", [draft_record("far id")]))
        assert code == 0, (report, stderr)
        for thread in others:
            thread.start()
        code, report, stderr = cli_json(env, "db", "apply", "--force", "--json")
        assert code == 0 and report["derivedRowsChecked"] and report["repairedDerivedRows"] == 0, (report, stderr)
    finally:
        done.set()
        for thread in others:
            thread.join()
        bouncer.stop()


def test_the_backoffice_signs_no_one_in_through_a_pgbouncer_that_checks_no_password(server, catalog_url, openai_fake, tmp_path):
    bouncer = start_pgbouncer(server.admin_url, auth_type="trust")
    backoffice = start_backoffice(pooled_environment(bouncer, catalog_url, OPERATOR, openai_fake, tmp_path), tmp_path)
    try:
        client = HttpClient(backoffice.url)
        for password in (PASSWORD, "any password at all"):
            reply = post_sign_in(client, OPERATOR, password)
            assert reply.status == 403 and "without checking a password" in reply.body, (reply.status, reply.body[:2000])
    finally:
        backoffice.stop()
        bouncer.stop()
    reasons = [event["reason"] for event in events_among(backoffice.output, "sign_in")]
    assert len(reasons) == 2 and all("did not" in reason and "authentication" in reason for reason in reasons), reasons


# What a client may leave on a server connection: settings (the search path, and the notes db/'s
# files set for the deploy's session; reset, a note reads as empty) and prepared statements.
SESSION_STATE = """
select pg_catalog.current_setting('search_path'), coalesce(pg_catalog.current_setting('payrail.new_registry', true), ''),
       coalesce(pg_catalog.current_setting('payrail.text_rules_before', true), ''),
       (select count(*) from pg_catalog.pg_prepared_statements)
"""


def test_the_package_leaves_no_session_state_on_the_pools_server_connections(server, catalog_url, openai_fake, tmp_path):
    bouncer = start_pgbouncer(server.admin_url, pool_mode="transaction", pool_size=1)
    try:
        with psycopg.connect(bouncer.through(catalog_url), autocommit=True) as client:
            before = client.execute(SESSION_STATE).fetchone()
        env = pooled_environment(bouncer, catalog_url, "postgres", openai_fake, tmp_path)
        for args in (("db", "apply", "--force"), ("import", str(write_jsonl(tmp_path / "one.jsonl", [draft_record("state")]))), ("sync",)):
            result = run_cli(env, *args)
            assert result.returncode == 0, (args, result.stderr)
        assert cli_answer(env, SEMANTIC_QUERY)["matches"]
        with api_registry(env) as registry:
            assert answer_json(registry, SEMANTIC_QUERY)["matches"]
        # Another client of the same pool (the one server connection) finds it as it was.
        with psycopg.connect(bouncer.through(catalog_url), autocommit=True) as client:
            assert client.execute(SESSION_STATE).fetchone() == before == ('"$user", public', "", "", 0)
    finally:
        bouncer.stop()


@pytest.mark.slow  # the operations guide's commands, each a process, through PgBouncer
def test_the_operations_guide_runs_behind_pgbouncer_in_transaction_mode(server, catalog_url, openai_fake, tmp_path):
    bouncer = start_pgbouncer(server.admin_url, pool_mode="transaction", pool_size=2)
    try:
        env = cli_environment(bouncer.through(catalog_url), openai_fake, tmp_path)  # prepared statements: the guide turns them off
        result = run_commands("\n".join(documented_commands("Running behind a pooler")), env, tmp_path)
        assert '"matches": [{' in result.stdout and "0 pending" in result.stdout, result.stdout
    finally:
        bouncer.stop()


# --- everything at once --------------------------------------------------------------------------


class Run:
    """Threads that each repeat one interface's work, recording every error; agents keep asking
    until the operators are done."""

    def __init__(self) -> None:
        self.errors: list[str] = []
        self.operators_done = threading.Event()
        self.threads: list[threading.Thread] = []
        self.counts: dict[str, int] = {}

    def agent(self, name: str, ask_all, pause: float = 0.0) -> None:
        """ask_all() asks every query once and returns the answers' mismatches; pause: seconds
        between rounds, for an agent whose every round starts processes that would otherwise take
        the machine's cores from the operators it runs beside."""

        def loop():
            while True:
                self.errors += [f"{name}: {m}" for m in ask_all()]
                self.counts[name] = self.counts.get(name, 0) + 1
                if self.operators_done.wait(pause):
                    return

        self._start(name, loop)

    def operator(self, name: str, rounds: int, work) -> None:
        def loop():
            for round_number in range(rounds):
                work(round_number)
                self.counts[name] = round_number + 1

        self._start(name, loop)

    def _start(self, name: str, body) -> None:
        def guarded():
            try:
                body()
            except BaseException:
                self.errors.append(f"{name}: {traceback.format_exc()}")

        thread = threading.Thread(target=guarded, name=name)
        self.threads.append(thread)
        thread.start()

    def finish(self, operators: int, timeout: float = 600) -> None:
        deadline = time.monotonic() + timeout
        for thread in self.threads[-operators:]:
            thread.join(max(0, deadline - time.monotonic()))
        self.operators_done.set()
        for thread in self.threads:
            thread.join(max(0, deadline - time.monotonic()))
        assert not any(thread.is_alive() for thread in self.threads), "a thread did not finish"


def mismatches(expected: dict[str, dict], answers: dict[str, dict]) -> list[str]:
    return [f"{query!r}: {answers[query]} != {expected[query]}" for query in expected if answers[query] != expected[query]]


def sql_answers(url: str) -> dict[str, dict]:
    """What a plain psycopg client gets from the search function, its query embedded by itself."""
    keys = ("provider", "method", "urls", "docsUrl", "guidance")
    with psycopg.connect(url, autocommit=True, prepare_threshold=None) as conn:
        answers = {}
        for query in QUERIES:
            vector = None if query in NAME_QUERIES else str(fake_embedding(query).tolist())
            rows = conn.execute(
                "select provider, method, urls, docs_url, guidance from payrail.search_provider_methods(%s, %s::vector, %s)",
                (query, vector, None if vector is None else FAKE_MODEL),
            ).fetchall()
            answers[query] = {"matches": [dict(zip(keys, row, strict=True)) for row in rows]}
        return answers


ROUNDS = 3
# Between the rounds of the agents that start a process a round (mcp-stdio, cli): each still runs
# beside every operator's step, which take seconds, without their start-ups filling both cores.
PROCESS_PAUSE = 2.0


@pytest.mark.slow
@pytest.mark.parametrize("pool_mode", ["transaction", "session"])
def test_every_interface_at_once_through_pgbouncer(pool_mode, server, catalog_url, openai_fake, tmp_path):
    with fake_registry(catalog_url, openai_fake) as direct:
        expected = {query: answer_json(direct, query) for query in QUERIES}
    # Transaction pooling: fewer server connections than clients. Session pooling holds one per client.
    bouncer = start_pgbouncer(server.admin_url, pool_mode=pool_mode, pool_size=2 if pool_mode == "transaction" else 25)
    agents = pooled_environment(bouncer, catalog_url, AGENT, openai_fake, tmp_path)
    operators = pooled_environment(bouncer, catalog_url, OPERATOR, openai_fake, tmp_path)
    backoffice = start_backoffice(operators, tmp_path)
    mcp_http = McpHttpServer(agents, tmp_path / "mcp-http.log")
    run = Run()
    try:
        # Agents: their answers never change, since operators only touch drafts.
        run.agent("sql", lambda: mismatches(expected, sql_answers(bouncer.through(catalog_url, AGENT))))
        registry = api_registry(agents)
        for number in range(4):
            run.agent(f"api-{number}", lambda: mismatches(expected, {q: answer_json(registry, q) for q in QUERIES}))
        run.agent(
            "mcp-stdio",
            lambda: mismatches(expected, dict(zip(QUERIES, mcp_stdio_answers(agents, QUERIES, tmp_path / "mcp.log"), strict=True))),
            pause=PROCESS_PAUSE,
        )
        run.agent("mcp-http", lambda: mismatches(expected, dict(zip(QUERIES, mcp_http.answers(QUERIES), strict=True))))
        cli_queries = {query: expected[query] for query in (NAME_QUERIES[0], SEMANTIC_QUERY)}
        run.agent("cli", lambda: mismatches(cli_queries, {query: cli_answer(agents, query) for query in cli_queries}), pause=PROCESS_PAUSE)

        # Operators, each on drafts of its own.
        def cli_import(round_number):
            path = write_jsonl(tmp_path / f"import-{round_number}.jsonl", [draft_record(f"import {round_number}")])
            code, report, stderr = cli_json(operators, "import", "--json", path)
            assert (code, report["created"]) == (0, 1), (report, stderr)

        def stale_then_sync(round_number):
            with psycopg.connect(bouncer.through(catalog_url, OPERATOR), autocommit=True, prepare_threshold=None) as conn:
                conn.execute("update payrail.provider_methods set guidance = guidance || ' Stale.' where provider = 'Pool Operator' and method = 'Draft sync'")
            code, report, stderr = cli_json(operators, "sync", "--json")
            assert code == 0 and not report["pending"], (report, stderr)

        def cli_edit(round_number):
            env = editing(operators, tmp_path / f"editor-{round_number}", "never enabled.", "never enabled. Edited.")
            result = run_cli(env, "edit", "Pool Operator / Draft edit")
            assert result.returncode == 0, (result.stdout, result.stderr)

        for label in ("sync", "edit"):
            code, report, stderr = cli_json(operators, "import", "--json", write_jsonl(tmp_path / f"{label}.jsonl", [draft_record(label)]))
            assert code == 0, (report, stderr)
        run.operator("backoffice", ROUNDS, lambda n: backoffice_round(backoffice.url, OPERATOR, PASSWORD, f"{pool_mode} {n}"))
        run.operator("import", ROUNDS, cli_import)
        run.operator("sync", ROUNDS, stale_then_sync)
        run.operator("edit", ROUNDS, cli_edit)
        run.finish(operators=4)
        registry.close()
    finally:
        run.operators_done.set()
        mcp_http.stop()
        backoffice.stop()
        bouncer.stop()

    assert run.errors == [], "\n".join(run.errors)
    assert all(run.counts.get(name, 0) >= 1 for name in ("sql", "api-0", "mcp-stdio", "mcp-http", "cli")), run.counts
    assert "Traceback" not in backoffice.output, backoffice.output
    # What the operators did is all there.
    with connection.connect(catalog_url, autocommit=True) as conn:
        drafts = dict(conn.execute("select method, guidance from payrail.provider_methods where provider = 'Pool Operator'").fetchall())
        assert conn.execute("select count(*) from payrail.provider_methods where embedding is null").fetchone() == (0,)
    assert {f"Draft import {n}" for n in range(ROUNDS)} | {f"Draft backoffice import {pool_mode} {n}" for n in range(ROUNDS)} <= set(drafts)
    assert not any(method.startswith(f"Draft backoffice {pool_mode}") for method in drafts), "deleted in each round"
    assert drafts["Draft edit"].count("Edited.") == ROUNDS
    assert drafts["Draft sync"].count("Stale.") == ROUNDS
