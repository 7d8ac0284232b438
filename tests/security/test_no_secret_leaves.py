"""No secret reaches an agent, a log or a terminal, and no control character from elsewhere does.

The attacks: an OpenAI-compatible server whose error echoes the API key with terminal controls
and forged lines (the fake's "echo_secrets"); database URLs whose password libpq cannot read (an
unencoded %, a broken IPv6 host) or reads only percent-decoded; a role name made of escape
sequences and line breaks, and hostile names typed at sign-in. Through every face: the CLI (text
and --json, standard output and error), its log lines, the Python API, the MCP tool and the
backoffice's pages. Each checks that the scrubbed text still says what failed.
"""

from __future__ import annotations

import html
import json
import logging
import re
import sys

import anyio
import psycopg
import pytest
from psycopg import sql

from payrail_embedder.base import safe_text
from payrail_embedder.base.logs import LineFormatter
from payrail_embedder.faces.api import Registry
from payrail_embedder.postgres import connection
from payrail_embedder.registry.search import SearchUnavailable
from payrail_embedder.settings import Settings
from payrail_test_support.agent_helpers import SEMANTIC_QUERY, import_catalog, mcp_client
from payrail_test_support.backoffice import ACME, ENABLED, OPERATOR, PASSWORD, HttpClient, post_sign_in, record_form, start_backoffice, stored
from payrail_test_support.cli import cli_json, run_cli, write_jsonl
from payrail_test_support.interfaces import BackofficeOperator, draft_record
from payrail_test_support.logs import events, events_among, parse_line

# A key of no known shape: only being the configured OPENAI_API_KEY can hide it.
API_KEY = "gateway-token-7c41e9d2"
# What no output may hold raw: C0 but the newline that ends a line, DEL, C1, the line and
# paragraph separators and a bidirectional override (written out here, not taken from safe_text).
RAW_CONTROLS = [chr(c) for c in range(0x20) if c != 0x0A] + ["\x7f"] + [chr(c) for c in range(0x80, 0xA0)] + ["\u2028", "\u2029", "\u202e"]
# The forged line the fake's error carries: it must never start a line of any output.
FORGED_LINE = re.compile(r"^(ts=2020-01-01|Error: none)", re.MULTILINE)


def assert_safe(text: str, *secrets: str) -> None:
    """text holds none of secrets, no raw control character, and no line the attacker forged."""
    for secret in secrets:
        assert secret not in text, (secret, text)
    raw = sorted({c for c in text if c in RAW_CONTROLS})
    assert not raw, (raw, text)
    assert not FORGED_LINE.search(text), text


def assert_says_the_upstream_failed(detail: str) -> None:
    assert "Error code: 401 - upstream refused Bearer [hidden]" in detail, detail
    assert "\\x1b]0;owned\\x07" in detail and "\\nts=2020-01-01" in detail, detail  # seen, never obeyed


# --- the text filter itself ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "scrubbed"),
    [
        ("postgresql://ada:s3cret@db.example/registry", "postgresql://ada:[hidden]@db.example/registry"),
        ('URI: "postgresql://ada:s3cret-Pass@[::1/db"', 'URI: "postgresql://ada:[hidden]@[::1/db"'),
        ("https://u:p@ss@h.example/x", "https://u:[hidden]@h.example/x"),
        ("host=db password='two words' sslpassword=x9", "host=db password=[hidden] sslpassword=[hidden]"),
        ("GET /v1?api_key=abcd1234&q=1", "GET /v1?api_key=[hidden]&q=1"),
        ('{"password": "a\\"b", "user": "ada"}', '{"password": [hidden], "user": "ada"}'),
        ("{'access_token': 'xyz'}", "{'access_token': [hidden]}"),
        ("Authorization: Basic dXNlcjpwYXNz", "Authorization: [hidden]"),
        ("refused Bearer eyJhbGciOi.J9.sig-", "refused Bearer [hidden]"),
        ("Incorrect API key provided: sk-proj-abc1********************wxyz.", "Incorrect API key provided: [hidden]."),
    ],
)
def test_secrets_are_hidden_by_their_shape_and_the_words_around_them_kept(text, scrubbed):
    assert safe_text.scrub(text) == scrubbed
    assert safe_text.scrub(scrubbed) == scrubbed  # scrubbing again changes nothing


@pytest.mark.parametrize(
    "text",
    [
        "https://docs.acme.example:8443/v1/geocode?q=a@b",
        "sk-learn and task-0123456789abcdefgh",
        "basic authentication; the bearer of a card",
        "the password is empty: the backoffice signs in only with a password PostgreSQL checks",
        'password authentication failed for user "ada"',
    ],
)
def test_text_without_a_secret_is_left_as_it_is(text):
    assert safe_text.scrub(text) == text


def test_a_configured_secret_is_hidden_anywhere_and_a_short_one_where_it_stands_as_a_word():
    safe_text.hide(["long-secret-4e1f", "sh%rt"])
    assert safe_text.scrub("x long-secret-4e1fy") == "x [hidden]y"
    assert safe_text.scrub('invalid percent-encoded token: "sh%rt"') == 'invalid percent-encoded token: "[hidden]"'
    assert safe_text.scrub("ash%rts") == "ash%rts"


def test_control_characters_are_escaped_but_those_kept():
    text = "a\x00\x07\x1b[2J\t\n\r\x7f\x85\x9b\u2028\u2029\u202e\u2066é→"
    assert safe_text.escape_controls(text) == "a\\x00\\x07\\x1b[2J\\t\\n\\r\\x7f\\x85\\x9b\\u2028\\u2029\\u202e\\u2066é→"
    assert safe_text.escape_controls(text, keep="\n\t") == "a\\x00\\x07\\x1b[2J\t\n\\r\\x7f\\x85\\x9b\\u2028\\u2029\\u202e\\u2066é→"
    assert safe_text.one_line("  ends\x1b]0;t\x07\n") == "ends\\x1b]0;t\\x07"


@pytest.mark.parametrize(
    ("url", "secrets"),
    [
        ("postgresql://ada:pa%ss-w0rd@db.example/registry", {"pa%ss-w0rd"}),
        ("postgresql://ada:s3cret-Pass@[::1/db", {"s3cret-Pass"}),
        ("postgresql://ada:p%40ss%2Fw0rd@db.example/registry", {"p%40ss%2Fw0rd", "p@ss/w0rd"}),
        ("postgresql://ada:p@ss@db.example/registry", {"p", "p@ss"}),
        ("host=db user=ada password='it\\'s %' sslpassword=k3y", {"it's %", "k3y"}),
    ],
)
def test_every_password_of_a_database_url_is_found_also_where_libpq_cannot_read_it(url, secrets):
    assert secrets <= set(connection.url_secrets(url)), connection.url_secrets(url)
    shown = connection.display_url(url)
    assert all(len(secret) < safe_text.MIN_WORD_SECRET_LENGTH or secret not in shown for secret in secrets), shown


@pytest.mark.parametrize("log_format", ["logfmt", "json"])
def test_a_log_value_keeps_no_secret_and_no_raw_control_character_and_reads_back_unchanged(log_format):
    # Quotes and backslashes in a secret: JSON writes them escaped, so a line scrubbed only after
    # it was encoded kept the secret.
    secret = 'pa"ss\\w0rd-91ac'
    hostile = "mallory\x1b]0;owned\x07\x9b31m\x7f\u202e\u2066"
    record = logging.LogRecord("payrail_embedder", logging.WARNING, __file__, 1, "sign_in", None, None)
    record.event, record.fields = "sign_in", {"role": hostile, "reason": f"refused {secret}", "cut": "m" * 995 + secret}
    line = LineFormatter(log_format, secrets=[secret]).format(record)
    assert_safe(line)
    logged = parse_line(line)
    assert (logged["role"], logged["reason"]) == (hostile, "refused [hidden]")
    # Scrubbed before the cut at 1,000 characters, which would have left a part of it.
    assert logged["cut"] == "m" * 995 + "[hidd... (3 more characters)"

    # Another library's line, its traceback included.
    try:
        raise ValueError(f"connection to postgresql://ada:{secret}@db failed\x1b[2J")
    except ValueError:
        library = logging.LogRecord("uvicorn.error", logging.ERROR, __file__, 1, "failed: %s", (secret,), exc_info=sys.exc_info())
    line = LineFormatter(log_format).format(library)
    assert_safe(line)
    logged = parse_line(line)
    assert logged["message"] == "failed: [hidden]" and "ValueError: connection to postgresql://ada:[hidden]@db failed\x1b[2J" in logged["traceback"]


# --- an upstream whose error echoes the key with terminal controls -------------------------------------


@pytest.fixture
def hostile_upstream(database_url, openai_fake, cli_env, tmp_path) -> dict[str, str]:
    """A registry whose embedding service now answers every request with the hostile 401; the
    environment of a CLI whose OPENAI_API_KEY is API_KEY."""
    import_catalog(database_url, openai_fake, tmp_path)
    openai_fake.behaviour = "echo_secrets"
    return cli_env | {"OPENAI_API_KEY": API_KEY}


def test_the_cli_shows_an_upstream_error_without_the_key_or_its_controls(hostile_upstream, database_url, tmp_path):
    code, failure, stderr = cli_json(hostile_upstream, "search", "--json", SEMANTIC_QUERY)
    assert (code, failure["error"]) == (1, "search_unavailable"), failure
    assert_says_the_upstream_failed(failure["detail"])
    text = run_cli(hostile_upstream, "search", SEMANTIC_QUERY)
    assert text.returncode == 1 and text.stderr.startswith("Error: search_unavailable: embedding service failed: "), text.stderr
    for output in (json.dumps(failure), stderr, text.stdout, text.stderr):
        assert_safe(output, API_KEY)

    # A save that needs an embedding: refused by the service; what the import says, and its log line.
    new = write_jsonl(tmp_path / "new.jsonl", [draft_record("hostile upstream")])
    code, failure, stderr = cli_json(hostile_upstream, "--log-format", "json", "import", "--json", new)
    assert (code, failure["error"]) == (1, "unavailable"), failure
    assert_says_the_upstream_failed(failure["detail"])
    assert_safe(json.dumps(failure) + stderr, API_KEY)

    # sync: the error in its report, on standard error, and in its summary line.
    with psycopg.connect(database_url) as conn:
        conn.execute("update payrail.provider_methods set enabled = false, guidance = guidance || ' Stale.' where method = 'Create a refund'")
    result = run_cli(hostile_upstream, "sync")
    assert result.returncode == 1, result.stderr
    (summary,) = events_among(result.stderr, "sync")
    assert_says_the_upstream_failed(summary["error"])
    assert_safe(result.stdout + result.stderr, API_KEY)
    code, report, stderr = cli_json(hostile_upstream, "sync", "--json")
    assert_says_the_upstream_failed(report["error"])
    assert_safe(json.dumps(report) + stderr, API_KEY)


def test_the_python_api_and_the_mcp_tool_report_an_upstream_error_without_the_key_or_its_controls(hostile_upstream, monkeypatch, tmp_path):
    monkeypatch.setenv("OPENAI_API_KEY", API_KEY)  # the Python API reads it from the environment, as the CLI does
    with Registry(settings=Settings.from_env(hostile_upstream)) as registry, pytest.raises(SearchUnavailable) as raised:
        registry.search_provider_methods(SEMANTIC_QUERY)
    for shown in (str(raised.value), raised.value.detail, json.dumps(raised.value.to_json())):
        assert_safe(shown, API_KEY)
    assert_says_the_upstream_failed(raised.value.detail)

    errlog_path = tmp_path / "mcp-stderr.log"

    async def ask():
        with open(errlog_path, "w") as errlog:
            async with mcp_client(hostile_upstream, errlog) as client:
                return await client.call_tool("search_provider_methods", {"query": SEMANTIC_QUERY})

    result = anyio.run(ask)
    answer = result.content[0].text
    assert result.is_error and json.loads(answer)["error"] == "search_unavailable", answer
    assert_says_the_upstream_failed(json.loads(answer)["detail"])
    stderr = errlog_path.read_text()
    (logged,) = events(stderr, "search_unavailable")
    assert_says_the_upstream_failed(logged["detail"])
    assert_safe(answer + stderr, API_KEY)


# --- database URLs whose passwords libpq cannot read --------------------------------------------------


@pytest.mark.parametrize(
    ("url", "password", "problem"),
    [
        ("postgresql://ada:pa%ss-w0rd-51d@db.example.invalid/registry", "pa%ss-w0rd-51d", 'invalid percent-encoded token: "[hidden]"'),
        ("postgresql://ada:sh%rt@db.example.invalid/registry", "sh%rt", 'invalid percent-encoded token: "[hidden]"'),
        (
            "postgresql://ada:v6-s3cret-88e@[::1/registry",
            "v6-s3cret-88e",
            'end of string reached when looking for matching "]" in IPv6 host address in URI: "postgresql://ada:[hidden]@[::1/registry"',
        ),
    ],
)
def test_a_database_url_libpq_cannot_read_is_named_without_its_password(url, password, problem, tmp_path):
    env = {"PAYRAIL_DATABASE_URL": url, "PAYRAIL_DATA_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"}
    outputs = []
    for args in (("list",), ("db", "roles")):
        result = run_cli(env, *args)
        assert result.returncode == 1 and result.stderr == f"Error: unavailable: database: {problem}\n", result.stderr
        outputs.append(result.stdout + result.stderr)
    code, failure, stderr = cli_json(env, "search", "--json", "Stripe")
    assert (code, failure) == (1, {"error": "search_unavailable", "detail": f"cannot reach the database: {problem}"})
    code, status, stderr = cli_json(env, "db", "status", "--json")
    assert (code, status["error"], status["url"]) == (1, problem, url.replace(password, "[hidden]")), status
    outputs.append(json.dumps(status) + stderr)
    # The backoffice refuses to start: it could only ever fail each sign-in.
    served = run_cli(env, "backoffice", "--port", "0")
    assert served.returncode == 2 and served.stdout == "", served.stdout
    assert served.stderr == f"Error: invalid_input: cannot read the database URL (PAYRAIL_DATABASE_URL, --database-url): {problem}\n"
    for output in outputs + [served.stderr]:
        assert_safe(output, password)


def test_a_percent_encoded_password_is_shown_in_neither_form(server, database_url, cli_env):
    # The test servers trust their socket, so any password connects: here one with %, @ and /.
    url = database_url.replace("postgres:@", "postgres:p%25ss%40w%2Frd-6b0@")
    env = cli_env | {"PAYRAIL_DATABASE_URL": url}
    roles = run_cli(env, "db", "roles")
    (logged,) = events(roles.stderr, "db_roles")
    status = run_cli(env, "db", "status")
    assert roles.returncode == status.returncode == 0, roles.stderr + status.stderr
    assert logged["database"] == connection.display_url(database_url) and "password" not in logged["database"]
    assert_safe(roles.stdout + roles.stderr + status.stdout + status.stderr, "p%25ss%40w%2Frd-6b0", "p%ss@w/rd-6b0")


# --- role names and typed names from elsewhere ----------------------------------------------------------

# A role name (PostgreSQL takes any character but NUL; 63 bytes at most) that sets a terminal's
# title, clears its screen, starts a line of its own and hides behind C1's CSI and a bidi override.
HOSTILE_ROLE = "mal\x1b]0;owned\x07\x1b[2J\nts=2020-01-01 role=admin\x9b1m\u202e"
HOSTILE_ROLE_SHOWN = "mal\\x1b]0;owned\\x07\\x1b[2J\\nts=2020-01-01 role=admin\\x9b1m\\u202e"


@pytest.fixture
def hostile_author(registry, database_url):
    """HOSTILE_ROLE, an operator role, saved the current version of ENABLED."""
    role = sql.Identifier(HOSTILE_ROLE)
    with psycopg.connect(database_url, autocommit=True) as admin:
        admin.execute(sql.SQL("drop role if exists {}").format(role))
        admin.execute(sql.SQL("create role {} in role payrail_operator").format(role))
        try:
            with admin.transaction():
                admin.execute(sql.SQL("set local role {}").format(role))
                admin.execute("update payrail.provider_methods set docs_url = 'https://docs.acme.example/v2' where method = %s", (ACME[1],))
            yield registry
        finally:
            admin.execute(sql.SQL("drop role {}").format(role))  # roles are the server's, not the test database's


def test_a_role_name_with_escape_sequences_and_line_breaks_is_shown_escaped_by_the_cli(hostile_author):
    listed = run_cli(hostile_author, "list")
    assert f"by {HOSTILE_ROLE_SHOWN})" in listed.stdout, listed.stdout
    shown = run_cli(hostile_author, "history", *ACME)
    # The current version's author, and who replaced the version before.
    assert shown.stdout.count(f"by {HOSTILE_ROLE_SHOWN}") == 2, shown.stdout
    for result in (listed, shown):
        assert result.returncode == 0, result.stderr
        assert_safe(result.stdout + result.stderr)
    # --json keeps the true name, every control character written as JSON's escape.
    code, found, _ = cli_json(hostile_author, "history", "--json", *ACME)
    assert found["record"]["savedBy"] == HOSTILE_ROLE
    assert_safe(run_cli(hostile_author, "history", "--json", *ACME).stdout)


def test_the_backoffice_shows_a_hostile_role_name_escaped_and_logs_a_hostile_typed_name_on_one_line(hostile_author, openai_fake, tmp_path):
    backoffice = start_backoffice(hostile_author | {"OPENAI_API_KEY": API_KEY}, tmp_path)
    try:
        ada = BackofficeOperator(backoffice.url, OPERATOR, PASSWORD)
        record_id = stored(hostile_author["PAYRAIL_DATABASE_URL"], *ACME)["id"]
        page = ada._get(f"/records/{record_id}").body
        assert f"by <strong>{html.escape(HOSTILE_ROLE_SHOWN)}</strong>" in page, page
        assert_safe(page)

        # A save whose embedding the hostile upstream refuses: the message says so, safely.
        openai_fake.behaviour = "echo_secrets"
        edited = {**ENABLED, "docsUrl": "https://docs.acme.example/v2", "guidance": ENABLED["guidance"] + " Edited."}
        refused = ada._post(f"/records/{record_id}", record_form(edited, ada.version(record_id), ada.session.token))
        assert refused.status == 422, (refused.status, refused.body[:3000])
        problem = html.unescape(re.search(r'<p class="message error" role="alert">([^<]*)</p>', refused.body).group(1))
        assert problem.startswith("Not saved: the embedding service is unavailable (fake-embedding-1 via OpenAI API: "), problem
        assert_says_the_upstream_failed(problem)
        assert_safe(refused.body, API_KEY)

        typed = post_sign_in(HttpClient(backoffice.url), HOSTILE_ROLE, "wrong-password-5a")
        assert typed.status == 403
        # The form keeps the name as typed, in its field (for the person who typed it to correct); the rest of the page is safe.
        assert f'value="{html.escape(HOSTILE_ROLE)}"' in typed.body
        assert_safe(typed.body.replace(html.escape(HOSTILE_ROLE), ""))
    finally:
        backoffice.stop()
    (failed,) = [e for e in events_among(backoffice.output, "sign_in") if e["outcome"] == "failure"]
    assert failed["role"] == HOSTILE_ROLE  # one line, read back unchanged
    (save,) = events_among(backoffice.output, "save")
    assert_says_the_upstream_failed(save["reason"])
    assert_safe(backoffice.output, API_KEY)
