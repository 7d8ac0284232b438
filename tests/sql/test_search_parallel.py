"""Search's first pass runs with parallel workers once the registry is big enough to gain from them,
whoever calls it and however, and every promise of the search holds meanwhile.

payrail._first_pass scans with workers when payrail.provider_method_half_vectors holds at least the
min_parallel_table_scan_size set on it (db/SEARCH.md, "One search, every core"). A registry just
above that size is loaded once per server, with near-copies (so the bounded first pass is not
enough and search must rescan) and drafts. Workers are shown twice, without timing anything: in the
plans PostgreSQL makes for the statements inside the functions (debug_print_plan: workers planned
for a scan of the half-precision table) and in the table's statistics (every process that scans
it, the leader and each worker, counts one sequential scan: workers launched).
"""

from __future__ import annotations

import re

import numpy as np
import psycopg
import pytest
from pgvector.psycopg import register_vector

from payrail_test_support.servers import server_names
from test_search_two_pass import MODEL, PLAIN_EXACT_ORDER, load, unit

DIMENSIONS = 1536
FIRST_PASS = "payrail._first_pass(vector, bigint, boolean, integer, double precision)"
# Both ways a client can call a set-returning function; the second evaluates it row by row.
CALL_FORMS = {
    "in from": "select provider, method from payrail.search_provider_methods(%s, %s, %s)",
    "in the select list": "select (s).provider, (s).method from (select payrail.search_provider_methods(%s, %s, %s) as s) as r",
}
WORKERS_PLANNED = re.compile(r":num_workers (\d+)")


def first_pass_threshold_bytes(conn: psycopg.Connection) -> int:
    """min_parallel_table_scan_size as set on payrail._first_pass, in bytes."""
    return conn.execute(
        """
        select pg_size_bytes(o.option_value)
        from pg_proc as p, pg_options_to_table(p.proconfig) as o
        where p.oid = %s::regprocedure and o.option_name = 'min_parallel_table_scan_size'
        """,
        (FIRST_PASS,),
    ).fetchone()[0]


def half_table_scans(url: str) -> int:
    """Sequential scans of the half-precision table so far, one per process taking part in each."""
    with psycopg.connect(url) as conn:
        return conn.execute("select seq_scan from pg_stat_user_tables where relid = 'payrail.provider_method_half_vectors'::regclass").fetchone()[0]


def registry_vectors(rng: np.random.Generator, count: int) -> tuple[np.ndarray, np.ndarray]:
    """Random directions, then 100 near-copies of one center (closer than the first pass can tell
    apart), then disabled drafts among them all."""
    near_copies = unit(rng.standard_normal(DIMENSIONS)) + rng.standard_normal((100, DIMENSIONS)) * (1e-4 / np.sqrt(DIMENSIONS))
    vectors = np.vstack([rng.standard_normal((count - 100, DIMENSIONS)), near_copies]).astype(np.float32)
    enabled = rng.random(count) > 0.05
    return vectors, enabled


@pytest.fixture(scope="module", params=server_names())
def big_registry(request, servers):
    """A registry whose half-precision table is just over the first pass's threshold for workers."""
    server = servers(request.param)
    url = server.create_database()
    rng = np.random.default_rng(14)
    with psycopg.connect(url) as conn:
        register_vector(conn)
        threshold = first_pass_threshold_bytes(conn)
        # Two half-precision rows of 1,536 dimensions fill an 8 kB page.
        vectors, enabled = registry_vectors(rng, int(threshold / 8192 * 2 / 0.95) + 200)
        load(conn, vectors, enabled)
        size = conn.execute("select pg_relation_size('payrail.provider_method_half_vectors')").fetchone()[0]
        assert size >= threshold, (size, threshold)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("analyze")  # as autovacuum would after a bulk load: the name path then uses its indexes
    yield url, vectors, enabled
    server.drop_database(url)


def plain_exact_order(url: str, query: np.ndarray, draft_id: int | None = None) -> list[tuple[str, str]]:
    with psycopg.connect(url) as conn:
        register_vector(conn)
        return conn.execute(PLAIN_EXACT_ORDER, {"query": query, "draft": draft_id}).fetchall()


def search_once(url: str, role: str | None, sql: str, params: tuple) -> tuple[list, int, int]:
    """Runs sql in a new session (so every statement is planned afresh) as role. Returns its rows,
    the most workers a plan scanning the half-precision table asks for, and how many processes
    scanned that table (1 + the workers launched, per first pass)."""
    plans: list[str] = []
    scans_before = half_table_scans(url)
    with psycopg.connect(url, autocommit=True) as conn:
        register_vector(conn)
        half_table = conn.execute("select 'payrail.provider_method_half_vectors'::regclass::oid").fetchone()[0]
        conn.add_notice_handler(lambda notice: plans.append(notice.message_detail or ""))
        conn.execute("set debug_print_plan = on")
        conn.execute("set client_min_messages = log")
        if role:
            conn.execute(f"set role {role}")
        rows = conn.execute(sql, params).fetchall()
        conn.execute("reset role")
        conn.execute("reset debug_print_plan")
        conn.execute("select pg_stat_force_next_flush()")  # the leader's counts, flushed once idle
    first_pass_plans = [plan for plan in plans if re.search(rf":relid {half_table}\b", plan)]
    planned = max((int(n) for plan in first_pass_plans for n in WORKERS_PLANNED.findall(plan)), default=0)
    return rows, planned, half_table_scans(url) - scans_before


@pytest.mark.slow
@pytest.mark.parametrize("role", [None, "payrail_agent"])
@pytest.mark.parametrize("call_form", list(CALL_FORMS))
def test_first_pass_runs_with_workers_for_every_caller(big_registry, role, call_form):
    url, _, _ = big_registry
    query = np.random.default_rng(1).standard_normal(DIMENSIONS).astype(np.float32)
    rows, planned, scans = search_once(url, role, CALL_FORMS[call_form], (f"parallel query as {role}", query, MODEL))
    assert rows == plain_exact_order(url, query)
    assert planned >= 1
    assert scans >= 2  # the leader and at least one worker


@pytest.mark.slow
def test_agent_still_reads_no_table_and_calls_no_helper(big_registry):
    url, vectors, _ = big_registry
    with psycopg.connect(url, autocommit=True) as conn:
        register_vector(conn)
        conn.execute("set role payrail_agent")
        for sql, params in [
            ("select count(*) from payrail.provider_method_half_vectors", ()),
            ("select count(*) from payrail.provider_methods", ()),
            ("select * from payrail._first_pass(%s, null, true, 64, null)", (vectors[0],)),
        ]:
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(sql, params)


@pytest.mark.slow
def test_rescan_for_near_copies_still_runs_with_workers(big_registry):
    """At the near-copies more records than the bounded first pass keeps lie within the cutoff, so
    search runs the first pass a second time over every record that near, and still answers exactly."""
    url, vectors, _ = big_registry
    center = vectors[-100:].mean(axis=0)
    random_query = np.random.default_rng(2).standard_normal(DIMENSIONS).astype(np.float32)
    with psycopg.connect(url) as conn:
        register_vector(conn)
        conn.execute("set track_functions = 'pl'")
        calls = "select pg_stat_get_xact_function_calls(%s::regprocedure)"
        conn.execute(CALL_FORMS["in from"], ("near-copies", center, MODEL)).fetchall()
        assert conn.execute(calls, (FIRST_PASS,)).fetchone()[0] == 2
        conn.execute(CALL_FORMS["in from"], ("anywhere", random_query, MODEL)).fetchall()
        assert conn.execute(calls, (FIRST_PASS,)).fetchone()[0] == 3
        conn.rollback()
    for query, passes in [(center, 2), (random_query, 1)]:
        rows, planned, scans = search_once(url, "payrail_agent", CALL_FORMS["in from"], ("q", query, MODEL))
        assert rows == plain_exact_order(url, query)
        assert planned >= 1
        assert scans >= 2 * passes


@pytest.mark.slow
def test_preview_counts_its_draft_with_workers(big_registry):
    url, _, _ = big_registry
    with psycopg.connect(url) as conn:
        register_vector(conn)
        drafts = conn.execute("select id, provider, method, embedding from payrail.provider_methods where not enabled order by id limit 5").fetchall()
    for draft_id, provider, method, embedding in drafts:
        query = embedding.to_numpy() * 2  # right at the draft, so it must come first
        rows, planned, scans = search_once(
            url, "payrail_operator", "select provider, method from payrail.preview_search(%s, %s, %s, %s, %s)", (provider, method, "preview", query, MODEL)
        )
        assert rows[0] == (provider, method)
        assert rows == plain_exact_order(url, query, draft_id)
        assert planned >= 1
        assert scans >= 2


def test_small_registry_searches_without_workers(database_url):
    """Below the threshold a search runs alone: starting workers would cost more than they save."""
    rng = np.random.default_rng(3)
    with psycopg.connect(database_url) as conn:
        register_vector(conn)
        vectors = rng.standard_normal((1000, DIMENSIONS)).astype(np.float32)
        load(conn, vectors, np.ones(1000, dtype=bool))
        size = conn.execute("select pg_relation_size('payrail.provider_method_half_vectors')").fetchone()[0]
        assert size < first_pass_threshold_bytes(conn)
    query = rng.standard_normal(DIMENSIONS).astype(np.float32)
    rows, planned, scans = search_once(database_url, "payrail_agent", CALL_FORMS["in from"], ("small", query, MODEL))
    assert rows == plain_exact_order(database_url, query)
    assert (planned, scans) == (0, 1)
