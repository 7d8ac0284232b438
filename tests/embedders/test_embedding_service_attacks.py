"""The embedding service fails, lies or attacks, and agents still get true answers.

- An outage never takes the name path or the database with it: a query is embedded with no
  database connection held, so agents waiting on a hanging service (more of them than the pool
  has connections, or than a login may open) never keep exact names from answering, and their
  own failure names the embedding service, never the database.
- The timeout is one deadline for the whole request: a reply trickling in a byte at a time, or a
  Retry-After past it, ends on time.
- What comes back is bounded and checked (size, nesting, count, indexes, values), a redirect is
  refused rather than followed, and every such failure is search_unavailable (or the command's
  `unavailable`) on every face, never a traceback.

The real openai client over real HTTP to the fake (payrail_test_support.openai_fake), which lies
or stalls as each test tells it.
"""

from __future__ import annotations

import json
import subprocess
import threading

import anyio
import psycopg
import pytest
from psycopg import sql

from payrail_embedder import SearchUnavailable
from payrail_embedder.embedders import EmbeddingUnavailable, OpenAIEmbedder
from payrail_embedder.embedders.http import MAX_JSON_DEPTH, ReplyRefused, _JsonDepth, reply_limit
from payrail_embedder.embedders.openai import MAX_DIMENSIONS
from payrail_embedder.faces.api import Registry
from payrail_embedder.faces.mcp_server import LANE_THREADS
from payrail_test_support import CLI, REPO
from payrail_test_support.agent_helpers import (
    CATALOG,
    NAME_QUERIES,
    SEMANTIC_QUERY,
    expected_name_matches,
    expected_semantic_matches,
    import_catalog,
    mcp_client,
)
from payrail_test_support.backoffice import OPERATOR, PASSWORD, record_form, start_backoffice, use_operator_logins
from payrail_test_support.cli import cli_json, run_cli, write_jsonl
from payrail_test_support.interfaces import BackofficeOperator, api_registry
from payrail_test_support.logs import events_among
from payrail_test_support.openai_fake import FAKE_MODEL, HUGE_REPLY_BYTES, LYING, FakeOpenAI, SwitchAt
from payrail_test_support.waiting import wait_until

TEXTS = ["hotel room availability", "send an SMS text message"]


def embedder(fake: FakeOpenAI, **options) -> OpenAIEmbedder:
    return OpenAIEmbedder(FAKE_MODEL, api_key="test-key", base_url=fake.base_url, **{"timeout": 5.0, "max_retries": 1, **options})


# 1. What the service answers is checked before anything uses it ---------------------------------

# What each lie is refused as: the words of the embedder's error.
REFUSED_AS = {
    "deep": f"nests deeper than {MAX_JSON_DEPTH} levels",
    "nan": "zero or non-finite",
    "infinity": "zero or non-finite",
    "strings": "not a list of numbers",
    "nested_vector": "not a list of numbers",
    "too_few": "returned 1 embeddings for 2 inputs",
    "too_many": "returned 3 embeddings for 2 inputs",
    "repeated_index": "indexes are not 0 to 1, once each",
    "index_out_of_range": "indexes are not 0 to 1, once each",
    "no_data": "malformed response",
    "gzip": "compressed (gzip), which was not asked for",
}
assert set(REFUSED_AS) == set(LYING)


@pytest.mark.parametrize("lie", LYING)
def test_a_lying_reply_is_refused_as_the_services_failure(lie, openai_fake):
    openai_fake.behaviour = lie

    with pytest.raises(EmbeddingUnavailable) as refused:
        embedder(openai_fake).embed(TEXTS)

    assert REFUSED_AS[lie] in refused.value.detail, refused.value.detail
    assert refused.value.detail.startswith(FAKE_MODEL)
    assert len(openai_fake.requests) == 1, "a lie is not asked again"


@pytest.mark.parametrize("chunk_size", [1, 2, 3, 7, 4096])
def test_the_depth_is_counted_outside_strings_across_chunks(chunk_size):
    """Brackets inside strings, escaped quotes and backslashes (also split between two chunks)
    never count; real nesting past the limit does, wherever the chunks end."""
    shallow = json.dumps({"error": {"message": 'a "quoted" [[[{{{ \\" ]]] path\\', "data": [[1, [2]]]}}).encode()
    deep = b"[" * (MAX_JSON_DEPTH + 1) + b"]" * (MAX_JSON_DEPTH + 1)
    for reply, refused in ((shallow, False), (b'{"s": "' + b"[" * 100 + b'"}', False), (deep, True), (b'["\\\\", ' + deep + b"]", True)):
        depth = _JsonDepth()
        try:
            for start in range(0, len(reply), chunk_size):
                depth.feed(reply[start : start + chunk_size])
        except ReplyRefused:
            assert refused, reply
        else:
            assert not refused and depth.depth == 0, (reply, depth.depth)


def test_a_reply_longer_than_any_real_one_is_refused_while_it_arrives(openai_fake):
    """A reply that never ends (256 MB at most) is dropped at the request's limit, never held whole."""
    openai_fake.behaviour = "huge"

    with pytest.raises(EmbeddingUnavailable, match="the most this request can need; refused") as refused:
        embedder(openai_fake).embed(["hotel room availability"])

    limit = reply_limit(1, MAX_DIMENSIONS)  # the fake's model is not one of OpenAI's: any dimensions
    assert f"longer than {limit:,} bytes" in refused.value.detail
    wait_until(lambda: openai_fake.hanging == 0, "the fake to notice the client hung up")
    # What the kernel's socket buffers took beyond the limit, at most; not the 256 MB the fake had.
    assert openai_fake.huge_bytes_sent < limit + 16 * 1024 * 1024 < HUGE_REPLY_BYTES


def test_a_reply_declaring_more_than_any_real_one_is_refused_before_its_body(openai_fake):
    openai_fake.behaviour = "huge_declared"

    with pytest.raises(EmbeddingUnavailable, match=r"reply is 10,737,418,240 bytes long, more than the [\d,]+ this request can need"):
        embedder(openai_fake).embed(["hotel room availability"])


def test_the_reply_limit_is_far_above_a_real_reply():
    """The limits docs/security.md gives for OpenAI's text-embedding-3-small (1,536 dimensions,
    replies in base64 as the client asks): 1.1 MB for a query, over 100 times its real reply, and
    129 MB for a batch of 2,048, over 7 times; and replies written out as floats at their longest
    are under two thirds of it."""
    assert reply_limit(1, 1536) == 1536 * 40 + 1024 + 1024 * 1024 == 1_111_040
    assert reply_limit(2048, 1536) == 128_974_848
    for texts, times in ((1, 100), (2048, 7)):
        base64_reply = texts * (1536 * 4 * 4 // 3 + 200) + 200
        float_reply = texts * (1536 * len("-1.2345678918063641e-05, ") + 200) + 200
        assert times * base64_reply < reply_limit(texts, 1536), texts
        assert 3 * float_reply < 2 * reply_limit(texts, 1536), texts


def test_a_redirect_is_refused_and_the_query_never_reaches_the_other_host(openai_fake):
    other_host = FakeOpenAI().start()
    try:
        openai_fake.behaviour, openai_fake.redirect_to = "redirect", other_host.base_url

        with pytest.raises(EmbeddingUnavailable, match="answered HTTP 307, a redirect to another address, which is not followed"):
            embedder(openai_fake).embed(["my agent's private question"])

        assert other_host.requests == [], "the query was sent where the redirect pointed"
        assert len(openai_fake.requests) == 1
    finally:
        other_host.stop()


# 2. One deadline for the whole request ----------------------------------------------------------


def test_a_reply_trickling_in_ends_at_the_deadline(openai_fake):
    """Every byte (status line and headers included) arrives well within any read timeout, so a
    timeout per read never fires; the deadline of the whole request does, and is not retried."""
    openai_fake.behaviour = "trickle"

    with pytest.raises(EmbeddingUnavailable, match=r"timed out: no whole reply within 1 s \(PAYRAIL_EMBEDDING_TIMEOUT, retries included\)"):
        embedder(openai_fake, timeout=1.0, max_retries=2).embed(["hotel room availability"])

    assert openai_fake.hanging == 1, "the client waited for the whole reply instead of its deadline"
    assert len(openai_fake.requests) == 1, "a retry after the deadline"


def test_a_hanging_service_is_given_up_at_the_deadline_without_retries(openai_fake):
    openai_fake.behaviour = "hang"

    # 2 s: at 0.5 the request had, once, not even reached the fake on a loaded machine.
    with pytest.raises(EmbeddingUnavailable, match="timed out"):
        embedder(openai_fake, timeout=2, max_retries=3).embed(["hotel room availability"])

    assert (len(openai_fake.requests), openai_fake.hanging) == (1, 1)


def test_a_retry_after_past_the_deadline_is_not_waited_for(openai_fake):
    openai_fake.behaviour, openai_fake.retry_after_seconds = "retry_after", "60"

    with pytest.raises(EmbeddingUnavailable, match="it asked to be retried after 60 s, past the 5 s deadline"):
        embedder(openai_fake).embed(["hotel room availability"])

    assert len(openai_fake.requests) == 1


def test_a_retry_after_within_the_deadline_is_honoured(openai_fake):
    openai_fake.behaviour, openai_fake.retry_after_seconds = "retry_after", "0.2"
    openai_fake.requests = SwitchAt(openai_fake, 2, "ok")

    vectors = embedder(openai_fake).embed(["hotel room availability"])

    assert len(vectors) == 1 and len(openai_fake.requests) == 2


# 3. Every face: search_unavailable (or unavailable), never a traceback ---------------------------


@pytest.fixture
def lying_registry(cli_env, database_url, openai_fake, tmp_path) -> dict:
    """The catalog imported with an honest service, which then nests its replies 100,000 deep
    (Python's json raised RecursionError on them)."""
    import_catalog(database_url, openai_fake, tmp_path)
    openai_fake.behaviour = "deep"
    return cli_env


def refusal_of(detail: str) -> None:
    assert f"nests deeper than {MAX_JSON_DEPTH} levels" in detail, detail


def test_cli_search_and_eval(lying_registry, tmp_path):
    code, answer, stderr = cli_json(lying_registry, "search", "--json", SEMANTIC_QUERY)
    assert (code, answer["error"]) == (1, "search_unavailable"), (answer, stderr)
    assert answer["detail"].startswith("embedding service failed: ")
    refusal_of(answer["detail"])
    assert "Traceback" not in stderr

    golden = write_jsonl(tmp_path / "golden.jsonl", [{"query": SEMANTIC_QUERY, "relevant": [[CATALOG[0]["provider"], CATALOG[0]["method"]]]}])
    code, answer, stderr = cli_json(lying_registry, "eval", "--json", golden)
    assert (code, answer["error"]) == (1, "search_unavailable"), (answer, stderr)
    refusal_of(answer["detail"])
    assert "Traceback" not in stderr


def test_sync_and_import_save_nothing(lying_registry, database_url, tmp_path):
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("update payrail.provider_methods set guidance = guidance || ' Edited.' where not enabled")
        before = conn.execute("select id, guidance, embedding::text from payrail.provider_methods order by id").fetchall()

    code, report, stderr = cli_json(lying_registry, "sync", "--json")
    assert code == 1 and report["pending"], (report, stderr)
    assert "Traceback" not in stderr
    refusal_of(stderr)

    new = dict(CATALOG[0], provider="Resend", method="Send email", guidance="Purpose: Send an email.")
    result = run_cli(lying_registry, "import", write_jsonl(tmp_path / "new.jsonl", [new]))
    assert result.returncode == 1 and result.stderr.startswith("Error: unavailable: "), result.stderr
    refusal_of(result.stderr)
    assert "Traceback" not in result.stderr

    with psycopg.connect(database_url, autocommit=True) as conn:
        assert conn.execute("select id, guidance, embedding::text from payrail.provider_methods order by id").fetchall() == before


def test_python_api(lying_registry, openai_fake):
    with api_registry(lying_registry) as registry:
        with pytest.raises(SearchUnavailable) as raised:
            registry.search_provider_methods(SEMANTIC_QUERY)
        assert (raised.value.code, raised.value.cause) == ("search_unavailable", "embedding_service")
        refusal_of(raised.value.detail)
        assert registry.search_provider_methods("Stripe")["matches"], "an exact name needs no embedding"

        # Vectors of other dimensions than the registry's: the service's failure, not the database's.
        openai_fake.behaviour = "wrong_dimensions"
        with pytest.raises(SearchUnavailable) as raised:
            registry.search_provider_methods(SEMANTIC_QUERY)
        assert raised.value.cause == "embedding_service", raised.value.detail
        assert "returned a 65-dimensional embedding, but the registry's model has 64 dimensions" in raised.value.detail


def test_mcp_tool(lying_registry, tmp_path):
    async def main():
        with (tmp_path / "mcp.log").open("w") as errlog:
            async with mcp_client(lying_registry, errlog) as client:
                return await client.call_tool("search_provider_methods", {"query": SEMANTIC_QUERY})

    result = anyio.run(main)

    assert result.is_error
    error = json.loads(result.content[0].text)
    assert error["error"] == "search_unavailable"
    refusal_of(error["detail"])
    stderr = (tmp_path / "mcp.log").read_text()
    assert "Traceback" not in stderr and "cause=embedding_service" in stderr, stderr


def test_backoffice_save_and_try_a_query(lying_registry, server, database_url, tmp_path):
    use_operator_logins(server, database_url)
    backoffice = start_backoffice(lying_registry, tmp_path)
    try:
        operator = BackofficeOperator(backoffice.url, OPERATOR, PASSWORD)
        with psycopg.connect(database_url, autocommit=True) as conn:
            record_id, before = conn.execute(
                "select id, guidance from payrail.provider_methods where provider = %s and method = %s", (CATALOG[0]["provider"], CATALOG[0]["method"])
            ).fetchone()

        page = operator.try_query(record_id, SEMANTIC_QUERY)
        assert "search_unavailable: embedding service failed" in page and "nests deeper than" in page, page

        form_reply = operator.client.post(
            f"/records/{record_id}",
            record_form(CATALOG[0], operator.version(record_id), operator.session.token, guidance=before + " Edited."),
            headers={"Origin": operator.client.origin},
            cookies=operator.session.cookies,
        )
        assert form_reply.status == 422 and "Not saved: the embedding service is unavailable" in form_reply.body, form_reply.body[:3000]
        with psycopg.connect(database_url, autocommit=True) as conn:
            assert conn.execute("select guidance from payrail.provider_methods where id = %s", (record_id,)).fetchone() == (before,)
    finally:
        backoffice.stop()
    assert "Traceback" not in backoffice.output, backoffice.output


# 4. An outage never takes the name path or the database with it ----------------------------------


def test_exact_names_answer_while_more_agents_than_the_pool_holds_wait_on_a_hanging_service(database_url, openai_fake, tmp_path, caplog):
    """Six agents' semantic queries wait on a hanging service, three times the pool's two
    connections: exact names are answered meanwhile (before any of the six has given up), and the
    six fail at their deadline naming the embedding service, in their errors and in the log."""
    import_catalog(database_url, openai_fake, tmp_path)
    openai_fake.behaviour = "hang"
    waiting = 6
    outcomes: list[SearchUnavailable | dict] = []

    def agent(registry: Registry) -> None:
        try:
            outcomes.append(registry.search_provider_methods(SEMANTIC_QUERY))
        except SearchUnavailable as error:
            outcomes.append(error)

    with Registry(database_url, embedder=embedder(openai_fake, timeout=6.0), pool_size=2) as registry:
        agents = [threading.Thread(target=agent, args=(registry,)) for _ in range(waiting)]
        for thread in agents:
            thread.start()
        wait_until(lambda: openai_fake.hanging == waiting, "every agent's query to wait on the embedding service")

        names = {query: registry.search_provider_methods(query)["matches"] for query in NAME_QUERIES}
        still_waiting = not outcomes

        for thread in agents:
            thread.join()

    assert still_waiting, f"the names were answered only after an agent's embedding gave up: {outcomes}"
    assert {query: [match.to_json() for match in matches] for query, matches in names.items()} == {
        query: expected_name_matches(query) for query in NAME_QUERIES
    }
    assert len(outcomes) == waiting
    for error in outcomes:
        assert isinstance(error, SearchUnavailable) and error.cause == "embedding_service", error
        assert error.detail.startswith("embedding service failed: ") and "timed out" in error.detail, error.detail
    logged = [record.fields for record in caplog.records if getattr(record, "event", None) == "search_unavailable"]
    assert [fields["cause"] for fields in logged] == ["embedding_service"] * waiting, logged


@pytest.fixture
def limited_login(database_url):
    """An agent login that may open two connections, as docs/security.md has a DBA limit agents."""
    login = f"limited_{psycopg.conninfo.conninfo_to_dict(database_url)['dbname']}"
    with psycopg.connect(database_url, autocommit=True) as admin:
        admin.execute(sql.SQL("create role {} login connection limit 2 in role payrail_agent").format(sql.Identifier(login)))
    yield psycopg.conninfo.make_conninfo(database_url, user=login)
    with psycopg.connect(database_url, autocommit=True) as admin:
        admin.execute(sql.SQL("drop role {}").format(sql.Identifier(login)))


def test_cli_searches_waiting_on_a_hanging_service_hold_no_connection(cli_env, database_url, openai_fake, limited_login, tmp_path):
    """Three `search` processes wait on the hanging service, more than the login's connection
    limit: were their connections held, exact names would be refused (too many connections). When
    the service answers again, each goes on to its answer. (That a search gives up at its deadline
    is test_openai_backend's and the embedder's own tests' point.)"""
    import_catalog(database_url, openai_fake, tmp_path)
    openai_fake.behaviour = "hang"
    # Each search starts once the one before it waits on the service, so the third connects while two
    # wait: started together, two could hold their name-path connections at the moment the third
    # opened its own, refused for a reason the test is not about. The deadline covers three starts
    # under CI's load.
    env = {**cli_env, "PAYRAIL_DATABASE_URL": limited_login, "PAYRAIL_EMBEDDING_TIMEOUT": "45"}
    searches: list[subprocess.Popen] = []

    def all_waiting() -> bool:
        for search in searches:
            assert search.poll() is None, f"a search exited before the service answered: {search.communicate()}"
        return openai_fake.hanging == len(searches)

    try:
        for _ in range(3):
            searches.append(
                subprocess.Popen([str(CLI), "search", "--json", SEMANTIC_QUERY], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
            )
            wait_until(all_waiting, f"search {len(searches)} to wait on the embedding service", timeout=40)

        code, answer, stderr = cli_json(env, "search", "--json", "Stripe")
        still_waiting = [search.poll() is None for search in searches]
        # The point is made: the limit goes, since three searches resuming at once each need a
        # connection for the vector search, and the service comes back.
        login = psycopg.conninfo.conninfo_to_dict(limited_login)["user"]
        with psycopg.connect(database_url, autocommit=True) as admin:
            admin.execute(sql.SQL("alter role {} connection limit -1").format(sql.Identifier(login)))
        openai_fake.recover()

        outputs = [search.communicate(timeout=60) for search in searches]
    finally:
        for search in searches:
            if search.poll() is None:
                search.kill()
    assert (code, answer) == (0, {"matches": expected_name_matches("Stripe")}), (answer, stderr)
    assert all(still_waiting), "a search gave up before the name was answered"
    for search, (stdout, stderr) in zip(searches, outputs, strict=True):
        assert search.returncode == 0, (stdout, stderr)
        assert json.loads(stdout) == {"matches": expected_semantic_matches(SEMANTIC_QUERY)}, stderr
        assert "Traceback" not in stderr


@pytest.mark.slow
def test_mcp_answers_exact_names_while_more_searches_than_its_threads_wait_on_a_hanging_service(cli_env, database_url, openai_fake, tmp_path):
    """More semantic calls than the server has worker threads for them wait on the hanging
    service; an exact name is answered meanwhile, before any of them has given up."""
    import_catalog(database_url, openai_fake, tmp_path)
    openai_fake.behaviour = "hang"
    env = {**cli_env, "PAYRAIL_EMBEDDING_TIMEOUT": "8"}
    semantic_calls = LANE_THREADS + 5
    openai_fake.requests = []
    outcomes: list[dict] = []

    async def main():
        with (tmp_path / "mcp.log").open("w") as errlog, anyio.fail_after(120):
            async with mcp_client(env, errlog) as client:

                async def semantic():
                    outcomes.append(json.loads((await client.call_tool("search_provider_methods", {"query": SEMANTIC_QUERY})).content[0].text))

                async with anyio.create_task_group() as group:
                    for _ in range(semantic_calls):
                        group.start_soon(semantic)
                    while openai_fake.hanging < LANE_THREADS:
                        await anyio.sleep(0.05)
                    name = await client.call_tool("search_provider_methods", {"query": "Stripe"})
                    answered_while_waiting = not outcomes
                return name, answered_while_waiting

    name, answered_while_waiting = anyio.run(main)

    assert not name.is_error and name.structured_content == {"matches": expected_name_matches("Stripe")}, name
    assert answered_while_waiting, "the name waited for a thread that waited on the embedding service"
    assert len(openai_fake.requests) == semantic_calls
    assert len(outcomes) == semantic_calls
    for error in outcomes:
        assert error["error"] == "search_unavailable" and error["detail"].startswith("embedding service failed: "), error
    logged = events_among((tmp_path / "mcp.log").read_text(), "search_unavailable")
    assert [event["cause"] for event in logged] == ["embedding_service"] * semantic_calls, logged
