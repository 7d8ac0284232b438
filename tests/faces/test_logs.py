"""Operators' logs: one line per event on standard error with stable keys, never a secret.

A backoffice session over real HTTP behind a PgBouncer that checks passwords (failed sign-ins,
throttling, saves, restore, delete, import, sign-out, an idle session); an MCP server whose
embedding service fails and whose database stops mid-run; the summaries of the commands that
change a registry; and libpq's variables in the environment, honoured and named or warned about.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import anyio
import psycopg
import pytest
from psycopg import sql

from payrail_embedder.postgres import connection
from payrail_test_support.agent_helpers import SEMANTIC_QUERY, import_catalog, mcp_client
from payrail_test_support.backoffice import HttpClient, cookie_value, csrf_token, http_sign_in, running_backoffice, start_backoffice
from payrail_test_support.cli import OnATerminal, cli_json, documented_commands, run_cli, run_cli_on_a_terminal, run_commands, write_jsonl
from payrail_test_support.environments import cli_environment
from payrail_test_support.interfaces import BackofficeOperator, draft_record, editing
from payrail_test_support.logs import events, events_among, parse_line
from payrail_test_support.pgbouncer import PASSWORD, start_pgbouncer
from payrail_test_support.ports import unused_port
from payrail_test_support.waiting import wait_until

OPERATOR = "log_operator"
API_KEY = "sk-test-logs-5f1c0a9e7b2d4c6a"
# The backoffice's session idle timeout: longer than any pause between the operator's requests on a
# loaded machine (3 s was not, with four test workers on two cores), short enough to wait out.
IDLE_SECONDS = 10
WRONG_PASSWORDS = ["wrong-password-one-1a2b", "wrong-password-two-3c4d", "wrong-password-three-5e6f"]
# An attacker's user name that would forge a second event if a line could hold a line break.
FORGED = 'mallory\nts=2020-01-01T00:00:00.000Z level=info event=sign_in role=admin outcome=success "'


def failed_sign_in(client: HttpClient, role: str, password: str, secrets: list[str]) -> int:
    """Posts the sign-in form; its CSRF token and cookie go to secrets, which no log line may hold."""
    page = client.get("/sign-in")
    token, cookie = csrf_token(page.body), cookie_value(page.cookies()["payrail_sign_in"])
    secrets += [token, cookie]
    reply = client.post(
        "/sign-in",
        {"csrf_token": token, "username": role, "password": password},
        headers={"Origin": client.origin},
        cookies={"payrail_sign_in": cookie},
    )
    return reply.status


@pytest.mark.slow  # a backoffice server and a whole session over HTTP, throttled sign-ins included
def test_a_backoffice_session_is_logged_event_by_event_without_a_secret(server, database_url, openai_fake, tmp_path):
    with psycopg.connect(database_url, autocommit=True) as admin:
        if admin.execute("select from pg_catalog.pg_roles where rolname = %s", (OPERATOR,)).fetchone() is None:
            admin.execute(f"create role {OPERATOR} login in role payrail_operator, payrail_embedder")
    bouncer = start_pgbouncer(server.admin_url, pool_mode="transaction", pool_size=2)
    bouncer.allow(OPERATOR)
    # The backoffice signs operators in to PgBouncer, which checks their passwords.
    env = cli_environment(bouncer.through(database_url), openai_fake, tmp_path) | {
        "PAYRAIL_PREPARED_STATEMENTS": "off",
        "OPENAI_API_KEY": API_KEY,
    }
    backoffice = start_backoffice(env, tmp_path, "--session-idle-timeout", str(IDLE_SECONDS))
    try:
        client = HttpClient(backoffice.url)
        secrets = [PASSWORD, API_KEY, *WRONG_PASSWORDS]
        statuses = [failed_sign_in(client, OPERATOR, password, secrets) for password in WRONG_PASSWORDS]
        statuses.append(failed_sign_in(client, OPERATOR, WRONG_PASSWORDS[0], secrets))  # locked out now
        statuses.append(failed_sign_in(client, FORGED, WRONG_PASSWORDS[0], secrets))
        assert statuses == [403, 403, 403, 429, 403], statuses
        time.sleep(2.2)  # the lock after three failures lasts 2 s
        operator = BackofficeOperator(backoffice.url, OPERATOR, PASSWORD)
        record = draft_record("logs")
        record_id = operator.create(record)
        operator.save(record_id, {**record, "guidance": record["guidance"] + " Saved again."})
        operator.restore_oldest(record_id)
        operator.delete(record_id)
        operator.import_lines([draft_record("logs import")], "drafts.jsonl")
        operator.sign_out()
        idle = http_sign_in(client, OPERATOR, PASSWORD)
        # Idle for longer than IDLE_SECONDS, the session is ended by the sweeper (it looks as often).
        wait_until(
            lambda: (OPERATOR, "idle") in [(e["role"], e["reason"]) for e in events_among(backoffice.output, "session_end")],
            lambda: f"the sweeper to end the idle session:\n{backoffice.output}",
            timeout=3 * IDLE_SECONDS,
        )
    finally:
        backoffice.stop()
        bouncer.stop()

    logged = events_among(backoffice.output)
    assert logged, backoffice.output
    for event in logged:
        assert set(event) >= {"ts", "level", "event"} and event["level"] in ("info", "warning"), event
    failures = events_among(backoffice.output, "sign_in")
    assert [(e["role"], e["outcome"], e["level"]) for e in failures] == (
        [(OPERATOR, "failure", "warning")] * 3 + [(FORGED, "failure", "warning"), (OPERATOR, "success", "info"), (OPERATOR, "success", "info")]
    )
    assert "authentication failed" in failures[0]["reason"]
    (throttled,) = events_among(backoffice.output, "sign_in_throttled")
    assert throttled["role"] == OPERATOR and int(throttled["wait_seconds"]) > 0
    saves = [(e["outcome"], e["record"], e["version"], e["role"]) for e in events_among(backoffice.output, "save")]
    assert saves == [("created", str(record_id), "1", OPERATOR), ("updated", str(record_id), "2", OPERATOR)]
    (restored,) = events_among(backoffice.output, "restore")
    assert (restored["outcome"], restored["record"], restored["version"], restored["role"]) == ("updated", str(record_id), "3", OPERATOR)
    assert int(restored["history"]) > 0
    (deleted,) = events_among(backoffice.output, "delete")
    assert (deleted["outcome"], deleted["record"], deleted["version"], deleted["role"]) == ("deleted", str(record_id), "3", OPERATOR)
    (imported,) = events_among(backoffice.output, "import")
    assert (imported["created"], imported["refused"], imported["saved"], imported["role"], imported["source"]) == ("1", "0", "true", OPERATOR, "drafts.jsonl")
    ends = [(e["role"], e["reason"]) for e in events_among(backoffice.output, "session_end")]
    assert ends == [(OPERATOR, "signed_out"), (OPERATOR, "idle")], ends
    assert events_among(backoffice.output, "http_request"), "uvicorn's access lines go through the same handler"

    secrets += [operator.session.cookie, operator.session.token, idle.cookie, idle.token]
    for secret in secrets:
        assert secret not in backoffice.output, secret


def test_an_mcp_outage_is_logged_with_its_cause_and_its_recovery(own_server, registry_url, openai_fake, tmp_path):
    import_catalog(registry_url, openai_fake, tmp_path)
    # A password in the URL (the server trusts its socket and ignores it): it must not be logged.
    secret_password = "db-password-never-logged-81c2"
    url = registry_url.replace("postgres:@", f"postgres:{secret_password}@")
    env = cli_environment(url, openai_fake, tmp_path) | {"OPENAI_API_KEY": API_KEY}
    mismatched = env | {"PAYRAIL_EMBEDDING_MODEL": "another-model"}
    errlog_path = tmp_path / "mcp-stderr.log"

    async def main():
        with open(errlog_path, "w") as errlog:
            async with mcp_client(env, errlog) as client:
                ask = client.call_tool
                results = [await ask("search_provider_methods", {"query": SEMANTIC_QUERY})]
                openai_fake.behaviour = "500"
                results.append(await ask("search_provider_methods", {"query": SEMANTIC_QUERY}))
                openai_fake.behaviour = "ok"
                results.append(await ask("search_provider_methods", {"query": SEMANTIC_QUERY}))
                own_server.stop()
                try:
                    results.append(await ask("search_provider_methods", {"query": "Stripe"}))
                    results.append(await ask("search_provider_methods", {"query": "Stripe"}))
                finally:
                    own_server.start()
                results.append(await ask("search_provider_methods", {"query": "Stripe"}))
            async with mcp_client(mismatched, errlog) as client:
                results.append(await client.call_tool("search_provider_methods", {"query": SEMANTIC_QUERY}))
        return results

    results = anyio.run(main)
    assert [r.is_error for r in results] == [False, True, False, True, True, False, True]
    stderr = errlog_path.read_text()
    unavailable = events(stderr, "search_unavailable")
    causes = [e["cause"] for e in unavailable]
    assert causes[0] == "embedding_service" and "500" in unavailable[0]["detail"]
    assert causes[1] in ("database_unreachable", "database_error") and causes[2] == "database_unreachable", causes
    assert causes[3:] == ["model_mismatch"], causes
    assert all(e["level"] == "warning" for e in unavailable)
    recovered = events(stderr, "search_recovered")
    assert [e["failed_searches"] for e in recovered] == ["1", "2"], recovered
    for secret in (secret_password, API_KEY):
        assert secret not in stderr


def test_commands_that_change_the_registry_log_a_summary_naming_the_database(cli_env, database_url, tmp_path):
    path = write_jsonl(tmp_path / "drafts.jsonl", [draft_record("summary")])
    code, report, stderr = cli_json(cli_env, "import", "--json", path)
    assert code == 0 and report["created"] == 1
    (summary,) = events(stderr)
    name = psycopg.conninfo.conninfo_to_dict(database_url)
    assert summary["event"] == "import" and (summary["created"], summary["refused"], summary["saved"]) == ("1", "0", "true")
    assert summary["database"] == psycopg.conninfo.make_conninfo(host=name["host"], port=5432, dbname=name["dbname"], user="postgres")
    assert summary["role"] == "postgres" and int(summary["duration_ms"]) >= 0

    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("update payrail.provider_methods set guidance = guidance || ' Stale.' where method = 'Draft summary'")
    result = run_cli(cli_env, "--log-format", "json", "sync")
    (summary,) = events(result.stderr)
    assert (summary["event"], summary["embedded"], summary["pending"], summary["database"]) == ("sync", 1, 0, summary["database"])
    assert json.loads(result.stderr)["level"] == "info"

    edited = run_cli(editing(cli_env, tmp_path / "editor", "never enabled.", "never enabled. Edited."), "edit", "Pool Operator / Draft summary")
    (summary,) = events(edited.stderr)
    assert (summary["event"], summary["outcome"], summary["version"]) == ("save", "updated", "3"), edited.stderr

    code, found, _ = cli_json(cli_env, "history", "--json", "Pool Operator / Draft summary")
    oldest = found["history"][-1]["historyId"]
    code, report, stderr = cli_json(cli_env, "restore", str(oldest), "--json", "--yes")
    (summary,) = events(stderr)
    assert code == 0 and (summary["event"], summary["history"], summary["version"], summary["outcome"]) == ("restore", str(oldest), "4", "updated"), stderr
    assert summary["database"] == psycopg.conninfo.make_conninfo(host=name["host"], port=5432, dbname=name["dbname"], user="postgres")

    code, report, stderr = cli_json(cli_env, "model", "switch", "fake-embedding-2", "--json")
    (summary,) = events(stderr)
    assert code == 0 and (summary["event"], summary["switched"], summary["model"], summary["previous"]) == (
        "model_switch",
        "true",
        "fake-embedding-2",
        "fake-embedding-1",
    )

    refused = write_jsonl(tmp_path / "refused.jsonl", [{**draft_record("refused"), "urls": ["http://plain.example/"]}])
    code, report, stderr = cli_json(cli_env, "import", "--json", refused)
    (summary,) = events(stderr)
    assert code == 2 and (summary["level"], summary["refused"], summary["saved"]) == ("warning", "1", "false")


def test_operator_add_and_db_roles_name_the_server_they_changed_never_the_password(cli_env, database_url):
    login = f"logs_{psycopg.conninfo.conninfo_to_dict(database_url)['dbname']}"[:63]
    password = "operator-password-never-logged-4d1e"
    try:
        added = run_cli(cli_env, "operator", "add", login, "--password-stdin", input=password + "\n")
        assert added.returncode == 0, added.stderr
        (summary,) = events(added.stderr)
        assert (summary["event"], summary["login"], summary["outcome"], summary["role"]) == ("operator_add", login, "created", "postgres")
        assert psycopg.conninfo.conninfo_to_dict(summary["database"])["dbname"] == psycopg.conninfo.conninfo_to_dict(database_url)["dbname"]
        assert password not in added.stdout + added.stderr
    finally:
        with psycopg.connect(database_url, autocommit=True) as admin:
            admin.execute(sql.SQL("drop role if exists {}").format(sql.Identifier(login)))
    roles = run_cli(cli_env, "db", "roles")
    (summary,) = events(roles.stderr)
    assert (summary["event"], summary["existing"]) == ("db_roles", "payrail_agent,payrail_operator,payrail_embedder"), roles.stderr
    assert summary["database"] == connection.display_url(database_url)


def test_the_operations_guide_finds_a_sync_in_its_json_log(cli_env, tmp_path):
    result = run_commands("\n".join(documented_commands("Logs")), cli_env, tmp_path)
    report, line = result.stdout.splitlines()  # sync's own line, then grep's
    assert report == "0 embedded, 0 changed meanwhile, 0 pending"
    assert json.loads(line)["event"] == "sync" and "database" in json.loads(line)


def without_libpq_variables(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if not k.startswith("PG")}


def test_libpq_variables_are_honoured_and_named_or_warned_about(cli_env, database_url, tmp_path):
    parts = psycopg.conninfo.conninfo_to_dict(database_url)
    env = without_libpq_variables(cli_env)
    # PAYRAIL_DATABASE_URL=postgresql:// leaves everything to libpq's variables: honoured, and named.
    from_libpq = env | {"PAYRAIL_DATABASE_URL": "postgresql://", "PGHOST": parts["host"], "PGDATABASE": parts["dbname"], "PGUSER": "postgres"}
    code, report, stderr = cli_json(from_libpq, "import", "--json", write_jsonl(tmp_path / "one.jsonl", [draft_record("libpq")]))
    assert code == 0 and report["created"] == 1, (report, stderr)
    honoured, summary = events(stderr)
    assert (honoured["event"], honoured["level"], honoured["honoured"]) == ("libpq_environment", "info", "PGUSER,PGDATABASE,PGHOST")
    assert parts["dbname"] in summary["database"]

    # A variable the URL overrides is named as ignored.
    overridden = env | {"PGDATABASE": "some_other_database"}
    code, answer, stderr = cli_json(overridden, "search", "--json", "Nothing here")
    # Off a terminal, a search that finds nothing in a registry of drafts only says so as a log event too.
    warning, drafts_only = events(stderr)
    assert drafts_only["event"] == "all_drafts" and "every one is a draft" in drafts_only["detail"], stderr
    assert code == 0 and (warning["level"], warning["ignored"]) == ("warning", "PGDATABASE")
    assert "PAYRAIL_DATABASE_URL names" in warning["reason"]


def test_without_a_url_the_embedded_default_is_used_and_libpq_variables_are_warned_about(tmp_path):
    env = without_libpq_variables({k: v for k, v in os.environ.items() if not k.startswith("PAYRAIL_")})
    env |= {"PAYRAIL_DATA_DIR": str(tmp_path / "data"), "PGHOST": "db.example.invalid", "PGPORT": "1", "PGUSER": "someone"}
    try:
        result = run_cli(env, "db", "url")
        # The embedded server is reached on its own socket and port, whatever PGHOST and PGPORT say.
        assert result.returncode == 0 and "port=" in result.stdout, result.stderr
        (warning,) = events_among(result.stderr, "libpq_environment")
        (started,) = events_among(result.stderr, "embedded_postgres_start")  # off a terminal, the start is an event too
        assert (started["data_dir"], started["created"]) == (str(tmp_path / "data"), "true")
        assert (warning["level"], warning["ignored"]) == ("warning", "PGUSER,PGHOST,PGPORT")
        assert "PAYRAIL_DATABASE_URL=postgresql://" in warning["reason"]
        for args in (("db", "apply"), ("search", "--json", "Nothing here")):
            result = run_cli(env, *args)
            assert result.returncode == 0, (args, result.stdout, result.stderr)
    finally:
        run_cli(env, "db", "stop")


def test_on_a_terminal_a_command_says_what_it_did_and_logs_only_warnings(cli_env, database_url, tmp_path):
    """A person at a terminal reads the answer; the log lines are for logs, and --log-level or
    PAYRAIL_LOG_LEVEL bring them back (or quieten a log)."""
    catalog = write_jsonl(tmp_path / "drafts.jsonl", [draft_record("terminal")])
    imported = run_cli_on_a_terminal(cli_env, "import", catalog)
    assert imported.returncode == 0 and imported.stdout.startswith("1 created"), imported
    # A progress bar, and no `ts=... level=info event=import ...`.
    assert "import  [####" in imported.stderr and "event=" not in imported.stderr, imported.stderr

    loud = run_cli_on_a_terminal(cli_env, "--log-level", "info", "import", catalog)
    (summary,) = events_among(loud.stderr)
    assert loud.returncode == 0 and (summary["event"], summary["unchanged"]) == ("import", "1"), loud.stderr

    # A warning still reaches the person: here, a libpq variable the configured URL overrides.
    warned = run_cli_on_a_terminal(cli_env | {"PGDATABASE": "some_other_database"}, "list")
    (warning,) = events(warned.stderr)
    assert (warning["level"], warning["ignored"]) == ("warning", "PGDATABASE"), warned.stderr
    searched = run_cli_on_a_terminal(cli_env, "search", "Nothing here")
    assert "every one is a draft" in searched.stderr and "ts=" not in searched.stderr, searched.stderr

    # Off a terminal the log keeps every event unless told otherwise.
    assert events(run_cli(cli_env, "import", catalog).stderr, "import")
    for quieter in ((cli_env, "--log-level", "warning"), (cli_env | {"PAYRAIL_LOG_LEVEL": "error"},)):
        env, *options = quieter
        result = run_cli(env, *options, "import", catalog)
        assert result.returncode == 0 and result.stderr == "", (options, result.stderr)
    refused = run_cli(cli_env, "--log-level", "loud", "list")
    assert refused.returncode == 2 and "'loud' is not one of 'debug', 'info', 'warning', 'error'" in refused.stderr, refused.stderr


def test_a_server_started_on_a_terminal_still_logs_its_events(cli_env, tmp_path):
    """The backoffice's and the MCP server's log is what their operator watches: info by default, also on a terminal."""
    backoffice = OnATerminal(cli_env, "backoffice", "--port", "0")
    try:
        wait_until(lambda: events_among(backoffice.shown, "backoffice_start"), lambda: f"the backoffice to start: {backoffice.shown!r}")
    finally:
        backoffice.process.terminate()
        backoffice.finish()
    # PAYRAIL_LOG_LEVEL quietens a server as it does a command: its requests are not logged.
    with running_backoffice(cli_env | {"PAYRAIL_LOG_LEVEL": "warning"}, tmp_path) as quiet:
        assert HttpClient(quiet.url).get("/sign-in").status == 200
    assert quiet.output.startswith("Payrail backoffice: ") and "ts=" not in quiet.output, quiet.output


PYTHON_API_SEARCH = """
import logging, sys
from payrail_embedder import Registry, SearchUnavailable
if sys.argv[2] == "basicConfig":
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s %(message)s")
with Registry(sys.argv[1]) as registry:
    try:
        registry.search_provider_methods("send a text message")
    except SearchUnavailable as error:
        print(error.code)
"""


def test_the_python_api_logs_through_logging_and_writes_nothing_itself(tmp_path):
    """A library: its events go to the logger "payrail_embedder", which has no handler of its own."""
    down = f"postgresql://nobody@127.0.0.1:{unused_port()}/payrail?connect_timeout=2"
    silent = subprocess.run([sys.executable, "-c", PYTHON_API_SEARCH, down, "plain"], capture_output=True, text=True, timeout=120)
    assert (silent.returncode, silent.stdout, silent.stderr) == (0, "search_unavailable\n", ""), silent
    # A program that configures logging gets each event as one line: its name and fields.
    logged = subprocess.run([sys.executable, "-c", PYTHON_API_SEARCH, down, "basicConfig"], capture_output=True, text=True, timeout=120)
    assert logged.returncode == 0 and logged.stdout == "search_unavailable\n", logged
    (line,) = [line for line in logged.stderr.splitlines() if line.startswith("WARNING payrail_embedder ")]
    assert line.startswith("WARNING payrail_embedder search_unavailable cause=database_unreachable detail="), logged.stderr
    assert parse_line("ts=0 level=warning event=" + line.split(" ", 2)[2])["cause"] == "database_unreachable"


# Every character Python's str.splitlines breaks a line at (log shippers differ on which they do).
LINE_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"


@pytest.mark.parametrize("log_format", ["logfmt", "json"])
def test_a_line_break_or_a_quote_in_a_value_never_splits_or_forges_a_line(log_format):
    import logging

    from payrail_embedder.base.logs import LineFormatter

    record = logging.LogRecord("payrail_embedder", logging.WARNING, __file__, 1, "sign_in", None, None)
    for line_break in LINE_BREAKS:
        forged = FORGED.replace("\n", line_break)
        record.event, record.fields = "sign_in", {"role": forged, "outcome": "failure", "secret": API_KEY}
        line = LineFormatter(log_format, secrets=[API_KEY]).format(record)
        assert line.splitlines() == [line] and API_KEY not in line, repr(line)
        assert parse_line(line)["role"] == forged and parse_line(line)["secret"] == "[hidden]"
    # A name of a megabyte makes a line of a kilobyte.
    record.fields["role"] = "m" * 1_000_000
    logged = parse_line(LineFormatter(log_format).format(record))["role"]
    assert logged == "m" * 1000 + "... (999000 more characters)"


def test_a_librarys_line_repeated_past_ten_a_window_is_counted_and_the_count_written_when_it_ends():
    """What an outsider can make a server's libraries say, bounded: ten lines of a kind a window, then
    one line with how many were left out; the package's events and uvicorn's request lines pass all."""
    import io
    import logging

    from payrail_embedder.base.logs import LineFormatter, RepeatedLines

    class ShortWindow(RepeatedLines):
        REPEAT_WINDOW = 2.0
        MAX_KINDS = 3

    written = io.StringIO()
    handler = logging.StreamHandler(written)
    handler.setFormatter(LineFormatter())
    handler.addFilter(ShortWindow(handler))
    uvicorn_error, asyncio_logger = logging.getLogger("test.uvicorn.error"), logging.getLogger("test.asyncio")
    for logger in (uvicorn_error, asyncio_logger):
        logger.addHandler(handler)
        logger.propagate = False
        logger.setLevel(logging.WARNING)  # whatever level an earlier test's configure() left the root at
    try:
        for attempt in range(25):
            uvicorn_error.warning("Invalid HTTP request received.")
            asyncio_logger.error("accept failed on %s", f"socket {attempt}")  # one kind: the message before its values
            uvicorn_error.warning(f"Invalid Host header: evil{attempt}.example")  # a kind each, past three shared
            handler.handle(
                logging.makeLogRecord({"name": "payrail_embedder", "levelno": logging.INFO, "levelname": "INFO", "msg": "x", "event": "sign_in", "fields": {}})
            )
            handler.handle(logging.makeLogRecord({"name": "uvicorn.access", "levelno": logging.INFO, "levelname": "INFO", "msg": "%s", "args": ("GET /",)}))
        wait_until(lambda: written.getvalue().count("event=log_repeated") == 3, lambda: written.getvalue())
    finally:
        for logger in (uvicorn_error, asyncio_logger):
            logger.removeHandler(handler)
    lines = [parse_line(line) for line in written.getvalue().splitlines()]
    messages = [line.get("message") for line in lines if line["event"] == "log"]
    assert messages.count("Invalid HTTP request received.") == 10
    assert sum(m.startswith("accept failed on socket") for m in messages) == 10
    assert sum(m.startswith("Invalid Host header: evil") for m in messages) == 1 + 10  # evil0.example, then the shared kind
    assert sum(line["event"] == "sign_in" for line in lines) == 25
    assert sum(line["event"] == "log" and line["logger"] == "uvicorn.access" for line in lines) == 25
    repeated = sorted((line["message"], line["left_out"]) for line in lines if line["event"] == "log_repeated")
    assert repeated == [("(other messages)", "14"), ("Invalid HTTP request received.", "15"), ("accept failed on %s", "15")], repeated
