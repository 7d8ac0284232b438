"""Every shell command of the docs (the README and docs/) works as printed in a fresh shell after
the setup command: bash without profile or rc files, an environment of nothing but HOME (a new,
empty one), a plain PATH and the locale, in the clone, with the README's one activation step
(`. .venv/bin/activate`) first. The registry is the embedded default of that new HOME, as a new
user's is.

Every command line of the docs' sh blocks is in COMMANDS, which says how it is run: as printed,
in the order a new operator follows them (psql and its SQL blocks included); with --help, where it
needs what no test has (a production server, an API key); or not at all, where it is the test
suite or a benchmark's synopsis, which tests/test_docs.py checks. A command added to the docs
without a line here fails the test. The sections of docs/operations.md in RUN_ELSEWHERE are left
to the tests that run them as written on servers of their own.

./scripts/setup itself is not run here: it reinstalls the .venv this very test runs in. CI runs
the README's first command verbatim, setup included, on a clean clone (.ci/run).
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import time
from pathlib import Path

import platformdirs
import pytest

from payrail_test_support import REPO
from payrail_test_support.docs import DOCS, code_blocks, headings, pages, read, section
from payrail_test_support.logs import embedded_start
from payrail_test_support.ports import unused_port

OPERATIONS = DOCS / "operations.md"
# docs/operations.md's sections whose commands other tests run as written: test_operations.py the
# first two, test_operations_deploying.py the next two, test_pooler.py and test_logs.py the next two,
# test_tune.py the last.
RUN_ELSEWHERE = {
    "Backup and restore",
    "Upgrading PostgreSQL",
    "Deploying",
    "Upgrading the product",
    "Running behind a pooler",
    "Logs",
    "Tuned models on several machines",
}
DOCS_TEXT = "\n".join(
    [read(page) for page in pages() if page != OPERATIONS]
    + [section(read(OPERATIONS), f"## {title}") for level, title in headings(read(OPERATIONS)) if level == 2 and title not in RUN_ELSEWHERE]
)
ACTIVATE = ". .venv/bin/activate"
SETUP = "./scripts/setup && "

# The tests follow one another in the same new HOME, as a new operator does: pytest-xdist's
# --dist loadfile (pyproject.toml) keeps them on one worker, in order.
pytestmark = pytest.mark.slow  # a new embedded server, the sample catalog embedded, a dozen processes

RUN, HELP, SERVE, NOT_RUN = "run", "help", "serve", "not run"
GOLDEN_QUERY = "send an SMS text message to a customer's phone"
GOLDEN_ADD = f'payrail-embedder golden add "{GOLDEN_QUERY}" --relevant "Twilio / Programmable Messaging: Send an SMS"'
GOLDEN_REMOVE = f'payrail-embedder golden remove "{GOLDEN_QUERY}"'
LANGUAGES_BLOCK = next(block for block in code_blocks(read(DOCS / "embeddings.md"), "sh") if "eine SMS" in block)
AGENT_ADD = "payrail-embedder agent add booking_agent"
MAKE_TOKEN = 'umask 077 && echo "booking-agent $(openssl rand -hex 32)" >> agent-tokens'
SERVE_REMOTE = "payrail-embedder mcp --http 8471 --host 0.0.0.0 --token-file agent-tokens"
CURL_SEARCH = 'curl -H "Authorization: Bearer $TOKEN" "https://registry.example.com/search?query=send+an+SMS"'
# Every command line of the docs' sh blocks (comments dropped), and how it is run.
COMMANDS = {
    SETUP
    + ACTIVATE
    + ' && payrail-embedder db apply && payrail-embedder import catalog/sample.jsonl && payrail-embedder search "find live hotel availability through a paid API"': RUN,
    "./scripts/test": NOT_RUN,
    'payrail-embedder search "send an SMS to a customer" --json': RUN,
    'echo "send an SMS to a customer" | payrail-embedder search - --json': RUN,
    "payrail-embedder operator add ada": RUN,
    # Remote agents (docs/agents.md): a login, a token, the server beyond loopback, a search with curl.
    AGENT_ADD: RUN,
    MAKE_TOKEN: RUN,
    SERVE_REMOTE: SERVE,
    CURL_SEARCH: RUN,
    "payrail-embedder backoffice": SERVE,
    "export PAYRAIL_DATABASE_URL=postgresql://db.internal/registry PAYRAIL_EMBEDDER=openai OPENAI_API_KEY=sk-...": HELP,
    "payrail-embedder backoffice --public-url https://registry.example.com": HELP,
    'psql "$(payrail-embedder db url)"': RUN,
    'export PAYRAIL_DATABASE_URL="$(payrail-embedder db url)"': RUN,
    'payrail-embedder preview "geocode a street address" --draft "Acme Maps / Geocode an address" --json': RUN,
    'payrail-embedder preview --draft "Acme Maps / Geocode an address"': RUN,
    'payrail-embedder edit --yes "Acme Maps / Geocode an address"': RUN,
    'payrail-embedder history "Acme Maps / Geocode an address"': RUN,
    "payrail-embedder restore 42": RUN,
    "payrail-embedder restore 42 --as-draft": RUN,
    'payrail-embedder edit "Acme Maps / Geocode an address"': RUN,
    "payrail-embedder edit --new": RUN,
    "payrail-embedder export -o catalog.jsonl": RUN,
    "payrail-embedder import catalog.jsonl": RUN,
    "payrail-embedder model show": RUN,
    # The bundled model is English-only (docs/embeddings.md): its measured example, one block.
    **{line: RUN for line in LANGUAGES_BLOCK.splitlines()},
    # Many records at once (docs/operators.md), after the walkthrough.
    'payrail-embedder show "Acme Maps / Geocode an address"': RUN,
    "payrail-embedder enable --state draft --yes": RUN,
    'payrail-embedder disable --text "acme maps" --yes': RUN,
    "payrail-embedder undo --yes": RUN,
    # Advice on the editorial template (docs/operators.md), on the walkthrough's registry.
    "payrail-embedder advise --summary": RUN,
    "payrail-embedder advise --code vague_purpose": RUN,
    'payrail-embedder advise "Acme Maps / Geocode an address"': RUN,
    # The golden queries' loop (docs/operators.md), on the sample catalog.
    GOLDEN_ADD: RUN,
    "payrail-embedder golden list": RUN,
    "payrail-embedder eval": RUN,
    "payrail-embedder eval --min-hit-at-3 0.8 --min-mrr 0.6": RUN,
    "payrail-embedder golden export golden.jsonl": RUN,
    GOLDEN_REMOVE: RUN,
    "payrail-embedder golden import golden.jsonl": RUN,
    "payrail-embedder --embedder openai model switch text-embedding-3-large": HELP,
    # Tuning takes minutes and labelled queries of the registry's own: tests/test_tune.py runs it.
    "payrail-embedder model tune": HELP,
    "payrail-embedder model tune golden.jsonl": HELP,
    "payrail-embedder eval golden.jsonl --compare all-MiniLM-L6-v2-tuned-3f9c0e1a7b42": HELP,
    "payrail-embedder model switch all-MiniLM-L6-v2-tuned-3f9c0e1a7b42": HELP,
    "payrail-embedder model list": RUN,
    "export PAYRAIL_DATABASE_URL=postgresql://deployer@db.internal/registry": HELP,
    "payrail-embedder db apply": HELP,
    "export PAYRAIL_EMBEDDER=openai OPENAI_API_KEY=sk-...": HELP,
    'PAYRAIL_DATABASE_URL=postgresql://agent_login@replica.internal/registry payrail-embedder search "send an SMS" --json': HELP,
    "payrail-embedder eval labelled.jsonl [--json]": HELP,
} | {line: NOT_RUN for line in re.findall(r"^\./scripts/benchmark .+?$", DOCS_TEXT, flags=re.M)}


def documented_commands() -> list[str]:
    lines = [line for block in code_blocks(DOCS_TEXT, "sh") for line in block.splitlines()]
    return [re.sub(r"\s+#.*$", "", line).strip() for line in lines if line.strip()]


def sql_block(first_line: str) -> str:
    """The docs' SQL block that begins with first_line, as a reader pastes it into psql."""
    return next(block for block in code_blocks(DOCS_TEXT, "sql") if block.startswith(first_line))


@pytest.fixture(scope="module")
def fresh_env(tmp_path_factory):
    """The environment of a new login: nothing but a new, empty HOME, a plain PATH and the locale.
    The cache keeps the model setup exported (what ./scripts/setup leaves in a user's cache);
    EDITOR is `true`, an editor that closes without a change."""
    home = tmp_path_factory.mktemp("h")  # short: the embedded server's socket lives below it
    runtime = home / "run"
    runtime.mkdir(mode=0o700)
    env = {
        "HOME": str(home),
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "XDG_RUNTIME_DIR": str(runtime),
        "XDG_CACHE_HOME": platformdirs.user_cache_dir(),
        "EDITOR": "true",
        "HF_HUB_OFFLINE": "1",
    }
    yield env
    shell(env, "payrail-embedder db stop")


def shell(env: dict[str, str], command: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    """command in a new bash (no profile, no rc) after the README's activation step, in the clone."""
    return subprocess.run(
        ["bash", "--noprofile", "--norc", "-c", f"{ACTIVATE} && {command}"],
        cwd=REPO,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=600,
    )


def ok(env: dict[str, str], command: str, stdin: str | None = None) -> str:
    assert COMMANDS.get(command) == RUN or command == "payrail-embedder sync", command
    result = shell(env, command, stdin)
    # psql reads SQL from standard input as a person pastes it: an error does not end it, but says ERROR.
    assert result.returncode == 0 and "ERROR" not in result.stderr, f"{command}\n{result.stdout}\n{result.stderr}"
    return result.stdout


def test_every_documented_command_is_classified():
    assert sorted(set(documented_commands())) == sorted(COMMANDS)
    assert set(RUN_ELSEWHERE) <= {title for level, title in headings(read(OPERATIONS)) if level == 2}


def test_without_the_activation_step_the_command_is_not_found(fresh_env):
    """The environment is a fresh one: the activation step is what puts the command on PATH."""
    result = subprocess.run(["bash", "--noprofile", "--norc", "-c", "payrail-embedder --help"], cwd=REPO, env=fresh_env, capture_output=True, text=True)
    assert result.returncode == 127 and "command not found" in result.stderr


def test_the_walkthrough_runs_as_printed_in_a_fresh_shell(fresh_env):
    env = fresh_env
    first = next(command for command in COMMANDS if command.startswith(SETUP))
    # The first command as printed, but for setup (above); it activates .venv itself.
    result = subprocess.run(["bash", "--noprofile", "--norc", "-c", first.removeprefix(SETUP)], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    assert [line[:3] for line in result.stdout.splitlines() if re.match(r"\d\. ", line)] == ["1. ", "2. ", "3. "], result.stdout
    assert embedded_start(result.stderr)["data_dir"].startswith(env["HOME"]), result.stderr

    assert len(json.loads(ok(env, 'payrail-embedder search "send an SMS to a customer" --json'))["matches"]) == 3
    piped = ok(env, 'echo "send an SMS to a customer" | payrail-embedder search - --json')
    assert json.loads(piped)["matches"][0]["provider"], piped

    # docs/agents.md's psycopg block, as printed, after the export it says the embedded default needs.
    psycopg_block = next(block for block in code_blocks(read(DOCS / "agents.md"), "python") if "import psycopg" in block)
    export = 'export PAYRAIL_DATABASE_URL="$(payrail-embedder db url)"'
    assert COMMANDS[export] == RUN and "PAYRAIL_DATABASE_URL" not in env
    printed = shell({**env, "BLOCK": psycopg_block}, f'{export} && python -c "$BLOCK"')
    assert printed.returncode == 0, printed.stderr
    sms = json.loads(ok(env, 'payrail-embedder search "send an SMS to a customer" --json'))["matches"]
    assert printed.stdout.splitlines() == [f"{m['provider']} {m['method']} {m['docsUrl']}" for m in sms], printed.stdout

    # The front page's SQL: an exact name needs no embedding.
    psql = 'psql "$(payrail-embedder db url)"'
    assert "https://docs.stripe.com" in ok(env, psql, sql_block("select * from payrail.search_provider_methods('Stripe');"))

    # Operators in psql: the draft docs/operators.md adds, sync, then enabling it; the rules in words.
    ok(env, psql, sql_block("-- Add a draft"))
    assert "1 embedded" in ok(env, "payrail-embedder sync")
    ok(env, psql, sql_block("update payrail.provider_methods set enabled = true"))
    rules = ok(env, psql, sql_block("select * from payrail.rules"))
    assert "provider_methods_docs_url_check" in rules and "provider_methods_urls_https_check" in rules, rules
    # The write path in SQL: a draft saved, new content answered with what to embed, the records list.
    saved = ok(env, psql, sql_block("-- Save a batch"))
    assert "| created " in saved and "| needs_embedding | all-MiniLM-L6-v2" in saved and "Invoice lookup | draft needing an embedding" in saved, saved

    preview = json.loads(ok(env, 'payrail-embedder preview "geocode a street address" --draft "Acme Maps / Geocode an address" --json'))
    assert preview["matches"][0]["provider"] == "Acme Maps", preview
    history = ok(env, 'payrail-embedder history "Acme Maps / Geocode an address"')
    assert history.splitlines()[-1].startswith("restore one with: payrail-embedder restore HISTORY_ID")
    # 42 stands for a history id `history` printed.
    history_id = re.search(r"^history (\d+):", history, flags=re.M).group(1)
    for command in ("payrail-embedder restore 42", "payrail-embedder restore 42 --as-draft"):
        assert COMMANDS[command] == RUN
        restored = shell(env, command.replace("42", history_id))
        assert restored.returncode == 0 and '"Acme Maps / Geocode an address"' in restored.stdout, restored.stderr

    for command in ('payrail-embedder edit "Acme Maps / Geocode an address"', "payrail-embedder edit --new"):
        assert ok(env, command) == "nothing saved\n"

    try:
        ok(env, "payrail-embedder export -o catalog.jsonl")
        records = len((REPO / "catalog.jsonl").read_text().splitlines())
        assert ok(env, "payrail-embedder import catalog.jsonl").startswith(f"0 created, 0 updated, {records} unchanged")
    finally:
        (REPO / "catalog.jsonl").unlink(missing_ok=True)
    # Golden queries: added, listed, measured and gated through search, exported, removed, imported again.
    assert ok(env, GOLDEN_ADD).startswith("added golden query 1: " + GOLDEN_QUERY)
    # What enabling a record would change for them (it is enabled: nothing); edit --yes, closed unchanged.
    assert ok(env, 'payrail-embedder preview --draft "Acme Maps / Geocode an address"') == "No golden query's top three changes (1 golden query).\n"
    assert ok(env, 'payrail-embedder edit --yes "Acme Maps / Geocode an address"') == "nothing saved\n"
    listed = ok(env, "payrail-embedder golden list")
    assert "relevant: Twilio / Programmable Messaging: Send an SMS\n" in listed and listed.endswith("1 golden query\n"), listed
    assert "1 queries\nhit@1            1.000\nhit@3            1.000\n" in ok(env, "payrail-embedder eval")
    assert "0 missed" in ok(env, "payrail-embedder eval --min-hit-at-3 0.8 --min-mrr 0.6")
    try:
        ok(env, "payrail-embedder golden export golden.jsonl")
        exported = (REPO / "golden.jsonl").read_bytes()
        assert exported.decode().startswith(json.dumps({"query": GOLDEN_QUERY}, ensure_ascii=False)[:-1]), exported
        assert ok(env, GOLDEN_REMOVE).startswith("removed golden query 1: ")
        assert ok(env, "payrail-embedder golden import golden.jsonl") == "1 golden query added, 0 unchanged\n"
        assert shell(env, "payrail-embedder golden export").stdout.encode() == exported
    finally:
        (REPO / "golden.jsonl").unlink(missing_ok=True)
    assert ok(env, "payrail-embedder model show").startswith("all-MiniLM-L6-v2 (384 dimensions)")
    assert ok(env, "payrail-embedder model list") == f"no tuned models in {env['HOME']}/.local/share/payrail-agent-search/models\n"


@contextlib.contextmanager
def serving(env: dict[str, str], command: str, log: Path, ready: str):
    """command (a server) in a fresh shell, as printed, until it says ready in its output; stopped after."""
    with log.open("w") as output:
        process = subprocess.Popen(
            ["bash", "--noprofile", "--norc", "-c", f"{ACTIVATE} && exec {command}"], cwd=REPO, env=env, stdout=output, stderr=subprocess.STDOUT
        )
    try:
        deadline = time.monotonic() + 90
        while ready not in log.read_text():
            assert process.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        yield log
    finally:
        process.terminate()
        process.wait(20)


def test_the_languages_example_runs_as_printed_and_finds_what_its_table_says(fresh_env):
    """The block in one shell, as a reader pastes it: a throwaway registry of the sample catalog."""
    printed = shell(fresh_env, LANGUAGES_BLOCK.replace("\n", " && ", LANGUAGES_BLOCK.count("\n") - 1).strip())
    assert printed.returncode == 0, printed.stderr
    row = next(line for line in read(DOCS / "embeddings.md").splitlines() if line.startswith("| eine SMS an einen Kunden senden |"))
    expected = [cell.strip() for cell in row.strip("|").split("|")[1:]]
    assert [line[3:] for line in printed.stdout.splitlines() if re.match(r"\d\. ", line)] == expected, printed.stdout


def test_many_records_at_once_as_printed(fresh_env):
    shown = ok(fresh_env, 'payrail-embedder show "Acme Maps / Geocode an address"')
    assert shown.startswith("Acme Maps / Geocode an address\nrecord "), shown
    ok(fresh_env, "payrail-embedder enable --state draft --yes")
    assert ok(fresh_env, 'payrail-embedder disable --text "acme maps" --yes') == "Disabled 1 record.\n"
    assert "draft: agents cannot find it" in ok(fresh_env, 'payrail-embedder show "Acme Maps / Geocode an address"')
    assert re.fullmatch(r"Enabled 1 record again: bulk action \d+ is undone \(as bulk action \d+\)\.\n", ok(fresh_env, "payrail-embedder undo --yes"))
    assert "enabled: agents can find it" in ok(fresh_env, 'payrail-embedder show "Acme Maps / Geocode an address"')


def test_advice_on_the_editorial_template_as_printed(fresh_env):
    """The sample catalog and the record docs/operators.md adds in psql: the sample's one piece of
    advice (Mapbox's Purpose names a /path), which its table counts, and the added record fits."""
    summary = ok(fresh_env, "payrail-embedder advise --summary")
    assert "1 record has a vague Purpose line (vague_purpose): " in summary, summary
    row = next(line for line in read(DOCS / "operators.md").splitlines() if line.startswith("| a vague Purpose line (`vague_purpose`) |"))
    assert row.split("|")[2].strip() == "1", row
    listed = ok(fresh_env, "payrail-embedder advise --code vague_purpose")
    assert listed.startswith("Mapbox / Geocoding API v6: Forward geocoding (record "), listed
    assert ok(fresh_env, 'payrail-embedder advise "Acme Maps / Geocode an address"').endswith("checked against the editorial template: every one fits it\n")
    counted = ok(fresh_env, 'psql "$(payrail-embedder db url)"', sql_block("select code, enabled + drafts as records"))
    assert "vague_purpose" in counted and "no_docs_url" in counted, counted


def test_the_backoffice_command_serves_as_printed(fresh_env, tmp_path):
    # The registry the walkthrough applies, whichever worker ran it (a no-op where it is current).
    applied = shell(fresh_env, "payrail-embedder db apply")
    assert applied.returncode == 0, applied.stderr
    # The password it asks for twice, typed.
    ok(fresh_env, "payrail-embedder operator add ada", stdin="a long passphrase\na long passphrase\n")
    # --port 0 added: on a machine shared with other test runs, 8470 may be taken.
    with serving(fresh_env, "payrail-embedder backoffice --port 0", tmp_path / "backoffice.log", "Payrail backoffice: http://127.0.0.1:") as log:
        assert "Sign in with a login made by `payrail-embedder operator add NAME`" in log.read_text()


def test_the_remote_agent_commands_run_as_printed(fresh_env, tmp_path):
    applied = shell(fresh_env, "payrail-embedder db apply")
    assert applied.returncode == 0, applied.stderr
    added = ok(fresh_env, AGENT_ADD, stdin="a long passphrase\na long passphrase\n")
    assert added.startswith("created login booking_agent"), added
    # The URL it prints is the embedded default's socket, and psql connects with it as the login,
    # the password given apart; with another password PostgreSQL refuses it.
    url = re.search(r"^agents connect with (\S+) \(the password apart", added, flags=re.M).group(1)
    assert re.fullmatch(r"postgresql://booking_agent@/payrail\?host=/\S+/postgresql-18&port=\d+", url), url
    assert url.split("host=")[1].startswith(fresh_env["HOME"]) and "passphrase" not in url
    login = 'psql -X -w -At -c "select current_user" "$URL"'
    assert shell({**fresh_env, "URL": url, "PGPASSWORD": "a long passphrase"}, login).stdout == "booking_agent\n"
    refused = shell({**fresh_env, "URL": url, "PGPASSWORD": "another passphrase"}, login)
    assert refused.returncode != 0 and "password authentication failed" in refused.stderr, refused.stderr
    tokens = REPO / "agent-tokens"
    port = unused_port()
    try:
        ok(fresh_env, MAKE_TOKEN)
        assert oct(tokens.stat().st_mode & 0o777) == "0o600"
        token = tokens.read_text().split()[1]
        # Another port than the docs' 8471: on a machine shared with other test runs, it may be taken.
        with serving(fresh_env, SERVE_REMOTE.replace("8471", str(port)), tmp_path / "mcp.log", "serving MCP"):
            # The docs' curl, at this server instead of the example host.
            curl = CURL_SEARCH.replace("https://registry.example.com", f"http://127.0.0.1:{port}")
            answer = json.loads(shell({**fresh_env, "TOKEN": token}, curl).stdout)
            searched = shell(fresh_env, 'payrail-embedder search "send an SMS" --json')
            assert answer == json.loads(searched.stdout) and len(answer["matches"]) == 3, answer
            assert json.loads(shell({**fresh_env, "TOKEN": "wrong" * 8}, curl).stdout)["error"] == "unauthorized"
            # docs/agents.md's Python client, as printed, at this server: a good token gets the
            # matches search answers; a wrong one, the 401 in words and a non-zero exit.
            block = next(block for block in code_blocks(read(DOCS / "agents.md"), "python") if "PAYRAIL_AGENT_TOKEN" in block)
            client = {**fresh_env, "BLOCK": block, "PAYRAIL_MCP_URL": f"http://127.0.0.1:{port}/mcp"}
            printed = shell({**client, "PAYRAIL_AGENT_TOKEN": token}, 'python -c "$BLOCK"')
            sms = json.loads(ok(fresh_env, 'payrail-embedder search "send an SMS to a customer" --json'))["matches"]
            assert printed.returncode == 0 and printed.stdout.splitlines() == [f"{m['provider']} {m['method']} {m['docsUrl']}" for m in sms], printed
            refused = shell({**client, "PAYRAIL_AGENT_TOKEN": "wrong" * 8}, 'python -c "$BLOCK"')
            assert refused.returncode == 1 and refused.stdout == "", refused
            assert refused.stderr == (
                "cannot search the registry: 401 unauthorized: the bearer token is not one of this server's agents' tokens (mistyped, or revoked?)\n"
            ), refused.stderr
    finally:
        tokens.unlink(missing_ok=True)


def test_commands_that_need_a_production_server_or_a_key_resolve_in_a_fresh_shell(fresh_env):
    for command, how in COMMANDS.items():
        if how != HELP or command.startswith("export "):
            continue
        # The option syntax of a synopsis ([--json]) is the reader's to fill in; the command must exist.
        result = shell(fresh_env, re.sub(r"\s*\[.*$", "", command) + " --help")
        assert result.returncode == 0 and result.stdout.startswith("Usage: payrail-embedder"), (command, result.stderr)
    for command in (c for c, how in COMMANDS.items() if how == HELP and c.startswith("export ")):
        assert shell(fresh_env, command).returncode == 0, command
