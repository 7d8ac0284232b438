"""Scale-out: a hot-standby replica of the embedded PostgreSQL (18 and 16) serves search with the
primary's answers, and refuses writes.

The standby is made the way an operator makes one: pg_basebackup -R over the primary's unix
socket into a new data directory, then pg_ctl start on a socket directory of its own. As root,
the embedded server runs as the system user `pgserver`, so both run as that user too.
"""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest
from psycopg import errors

from payrail_embedder.embedders import OpenAIEmbedder
from payrail_test_support.agent_helpers import NAME_QUERIES, SEMANTIC_QUERIES, import_catalog
from payrail_test_support.cli import run_cli
from payrail_test_support.environments import cli_environment
from payrail_test_support.openai_fake import FAKE_MODEL
from payrail_test_support.registry_state import agent_answers
from payrail_test_support.servers import Cluster, replace_database
from payrail_test_support.waiting import wait_until

pytestmark = pytest.mark.slow  # a base backup and a second server per PostgreSQL version


def start_standby(primary, pgdata: Path) -> Cluster:
    """A hot standby of an embedded server (a TestServer): pg_basebackup -R over its unix socket
    into a new data directory, started on a socket directory of its own."""
    standby = Cluster(primary.version, pgdata)
    postmaster = primary._handle.get_postmaster_info()
    standby.run(
        "pg_basebackup",
        "-h",
        str(postmaster.socket_dir),
        "-p",
        str(postmaster.port),
        "-U",
        "postgres",
        "-D",
        str(pgdata),
        "-R",
        "--wal-method=stream",
        "--checkpoint=fast",
    )
    return standby.start()


def wait_for_replay(primary_url: str, standby_url: str, timeout: float = 60) -> None:
    """Until the standby has replayed everything the primary has written so far: up to its insert
    position, as a commit without synchronous_commit (the test servers') may not be written yet."""
    with psycopg.connect(primary_url, autocommit=True) as primary:
        target = primary.execute("select pg_current_wal_insert_lsn()").fetchone()[0]
    with psycopg.connect(standby_url, autocommit=True) as standby:
        assert standby.execute("select pg_is_in_recovery()").fetchone()[0]
        wait_until(
            lambda: standby.execute("select pg_last_wal_replay_lsn() >= %s::pg_lsn", (target,)).fetchone()[0],
            "the standby to catch up",
            timeout=timeout,
        )


@pytest.fixture(params=["pg18", "pg16"])
def primary(request, servers):
    return servers(request.param)


def test_a_hot_standby_serves_the_primarys_answers_and_refuses_writes(primary, openai_fake, tmp_path):
    url = primary.create_database()
    database = urlsplit(url).path.lstrip("/")
    import_catalog(url, openai_fake, tmp_path)
    standby = start_standby(primary, tmp_path / "standby")
    try:
        standby_url = standby.url(database)
        # Edits after the base backup reach the standby by streaming: a draft enabled, a record
        # disabled, new URLs, and a new draft.
        with psycopg.connect(url) as conn:
            conn.execute("update payrail.provider_methods set enabled = true where provider = 'Amadeus'")
            conn.execute("update payrail.provider_methods set enabled = false where provider = 'Twilio'")
            conn.execute("update payrail.provider_methods set urls = '{https://api.stripe.com/v1/refunds/new}' where method = 'Create a refund'")
            conn.execute(
                "insert into payrail.provider_methods (provider, method, guidance) "
                "values ('Acme Maps', 'Geocode an address', 'Purpose: turn an address into coordinates.')"
            )
        wait_for_replay(primary.admin_url, replace_database(standby_url, "postgres"))

        embedder = OpenAIEmbedder(FAKE_MODEL, api_key="test-key", base_url=openai_fake.base_url, max_retries=0)
        queries = NAME_QUERIES + SEMANTIC_QUERIES
        on_primary = agent_answers(url, embedder, queries)
        assert agent_answers(standby_url, embedder, queries) == on_primary
        # The edits are in those answers: the enabled draft leads the hotel query, the disabled
        # record is gone, the refund has its new URL.
        assert on_primary[SEMANTIC_QUERIES[0]][0]["provider"] == "Amadeus"
        assert "Twilio" not in {m["provider"] for answer in on_primary.values() for m in answer}
        assert on_primary["Create a refund"][0]["urls"] == ["https://api.stripe.com/v1/refunds/new"]

        # The agent's role and the CLI, pointed at the standby for search only.
        with psycopg.connect(standby_url) as conn:
            conn.execute("set role payrail_agent")
            assert len(conn.execute("select * from payrail.search_provider_methods('Stripe')").fetchall()) == 2
        standby_env = cli_environment(standby_url, openai_fake, tmp_path)
        result = run_cli(standby_env, "search", SEMANTIC_QUERIES[0], "--json")
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout) == {"matches": on_primary[SEMANTIC_QUERIES[0]]}

        # Writes go to the primary: every kind of write is refused on the standby.
        with psycopg.connect(standby_url, autocommit=True) as conn:
            history_id = conn.execute("select max(id) from payrail.provider_method_history").fetchone()[0]
            for statement in [
                "insert into payrail.provider_methods (provider, method, guidance) values ('A', 'B', 'C')",
                "update payrail.provider_methods set enabled = false",
                "delete from payrail.provider_methods",
                "select payrail.set_embedding_model('other-model', 3)",
                f"select payrail.restore_provider_method({history_id})",
            ]:
                with pytest.raises(errors.ReadOnlySqlTransaction):
                    conn.execute(statement)
        # sync has the new draft to embed, and says why it cannot.
        result = run_cli(standby_env, "sync", "--json")
        assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
        assert "read-only transaction" in result.stdout + result.stderr, result.stdout + result.stderr
    finally:
        standby.close()
        primary.drop_database(url)
