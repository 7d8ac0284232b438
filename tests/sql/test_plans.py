"""Every lookup uses its index whatever the statistics say: right after a bulk load, before any ANALYZE.

A registry of RECORDS records (a tenth drafts, a history entry for half of them) is loaded by
COPY in one transaction with autovacuum off for its tables, so no statistics exist, or only those
an ANALYZE took while the load was uncommitted (the table then looks empty to the planner, pages
full of rows notwithstanding): what a server holds in the minute after an import, a restore or a
model switch. Each path then runs in a transaction whose
own counters PostgreSQL keeps (pg_stat_xact_user_tables, and pg_stat_xact_user_functions with
track_functions = pl): a path that used its indexes scanned no table sequentially and normalized
a handful of names (payrail._normalize_name, PL/pgSQL, is counted per call), where a scan
normalizes every stored one. A plan pinned once per session from no statistics (force_generic_plan)
made the name path such a scan: 1 s a question at 10,000 records; at 6,000 records here, in the
analyzed-mid-load state, 43,000 names normalized per question, 1.3 to 2.8 s on a busy machine.
"""

from __future__ import annotations

import numpy as np
import psycopg
import pytest
from pgvector.psycopg import register_vector

from payrail_embedder.embedders import OPENAI_MAX_BATCH, Embedder
from payrail_embedder.registry import golden, labelled_queries, stored
from payrail_embedder.registry.records import ProviderMethod
from payrail_embedder.registry.write import Change, check_changes, save_changes
from payrail_test_support.servers import server_names
from payrail_test_support.stored import content_hash

pytestmark = pytest.mark.slow  # a 6,000-record registry loaded per server and statistics state

RECORDS = 6000
DIMENSIONS = 8
MODEL = "plans-test-model"
GUIDANCE = "Purpose: a record of the plan test."
# A path that uses its indexes normalizes the query and the names of the few rows it finds (the
# second pass of semantic search: up to 64 candidates, two names each); a scan, every stored name.
MOST_NORMALIZED = 200
TABLES = ["provider_methods", "provider_method_history"]


def name(number: int) -> tuple[str, str]:
    return f"Provider {number // 4:05d}", f"Method {number:05d}"


STATES = ["never analyzed", "analyzed mid-load"]


@pytest.fixture(scope="module", params=[(server, state) for server in server_names() for state in STATES], ids="-".join)
def loaded(request, servers):
    """A registry of RECORDS records loaded in one transaction, whose statistics are none (never
    analyzed), or those an ANALYZE took while the load was not yet committed (autovacuum's, in the
    middle of an import): no rows in pages full of them. Loaded once for the module's tests, which
    change nothing: each runs its path in a transaction rolled back (lookups)."""
    server_name, state = request.param
    server = servers(server_name)
    database_url = server.create_database()
    rng = np.random.default_rng(20)
    with psycopg.connect(database_url, autocommit=True) as conn, psycopg.connect(database_url, autocommit=True) as other:
        register_vector(conn)
        for table in TABLES + ["provider_method_half_vectors"]:
            conn.execute(f"alter table payrail.{table} set (autovacuum_enabled = off)")
        conn.execute("select payrail.set_embedding_model(%s, %s)", (MODEL, DIMENSIONS))
        copy_sql = (
            "copy payrail.provider_methods (provider, method, guidance, enabled, embedding, embedding_model, embedding_content_hash) from stdin (format binary)"
        )
        with conn.transaction():
            with conn.cursor().copy(copy_sql) as copy:
                copy.set_types(["text", "text", "text", "bool", "vector", "text", "bytea"])
                for number in range(RECORDS):
                    provider, method = name(number)
                    vector = rng.standard_normal(DIMENSIONS).astype(np.float32)
                    copy.write_row((provider, method, GUIDANCE, number % 10 != 9, vector, MODEL, content_hash(provider, method, GUIDANCE)))
            conn.execute("update payrail.provider_methods set urls = array['https://example.com/' || id] where id % 2 = 0")
            if state == "analyzed mid-load":
                other.execute(f"analyze {', '.join('payrail.' + t for t in TABLES)}")
    yield database_url, state
    server.drop_database(database_url)


@pytest.fixture
def unanalyzed(loaded):
    """A connection (autocommit) of the test's own to the loaded registry: its session has planned
    nothing yet, as an agent's or operator's first connection after an import."""
    database_url, state = loaded
    with psycopg.connect(database_url, autocommit=True) as conn:
        register_vector(conn)
        assert_statistics(conn, state)
        conn.execute("set track_functions = 'pl'")
        yield conn
        assert_statistics(conn, state)


def assert_statistics(conn: psycopg.Connection, state: str) -> None:
    """The registry's tables are still in the state the fixture made."""
    rows = conn.execute(
        """select s.relname, c.reltuples, s.last_analyze is not null or s.last_autoanalyze is not null
           from pg_stat_user_tables as s join pg_class as c on c.oid = s.relid
           where s.schemaname = 'payrail' and s.relname = any(%s) order by s.relname""",
        (TABLES,),
    ).fetchall()
    if state == "never analyzed":
        assert [analyzed for _, _, analyzed in rows] == [False, False], rows
    else:
        assert [(reltuples, analyzed) for _, reltuples, analyzed in rows] == [(0, True), (0, True)], rows


COUNTERS = """
select coalesce(sum(seq_scan) filter (where relname = 'provider_methods'), 0),
       coalesce(sum(seq_scan) filter (where relname = 'provider_method_history'), 0),
       coalesce(sum(idx_scan), 0),
       (select coalesce(sum(calls), 0) from pg_stat_xact_user_functions
        where schemaname = 'payrail' and funcname = '_normalize_name')
from pg_stat_xact_user_tables
where schemaname = 'payrail' and relname in ('provider_methods', 'provider_method_history')
"""


def lookups(conn: psycopg.Connection, run) -> dict:
    """What run did in one transaction: sequential scans of the registry's tables, index scans, names
    normalized. The counters are read before and after: they hold what earlier transactions of the
    session did until the session reports them."""
    with conn.transaction(force_rollback=True):
        before = conn.execute(COUNTERS).fetchone()
        run()
        after = conn.execute(COUNTERS).fetchone()
    records, history, indexes, normalized = (int(a - b) for a, b in zip(after, before, strict=True))
    return {
        "sequential scans": {table: n for table, n in zip(TABLES, (records, history), strict=True) if n},
        "index scans": indexes,
        "names normalized": normalized,
    }


def assert_uses_indexes(conn: psycopg.Connection, run, most_normalized: int = MOST_NORMALIZED) -> None:
    done = lookups(conn, run)
    assert done["sequential scans"] == {} and done["index scans"] > 0 and done["names normalized"] <= most_normalized, done


def query_vector() -> np.ndarray:
    return np.random.default_rng(7).standard_normal(DIMENSIONS).astype(np.float32)


SQL_PATHS = {
    "name path: a provider": ("select * from payrail.search_provider_methods(%s)", ["provider 00012"]),
    "name path: a method": ("select * from payrail.search_provider_methods(%s)", ["METHOD 00050"]),
    "name path: a pair": ("select * from payrail.search_provider_methods(%s)", ["Provider 00012 / Method 00050"]),
    "name path: an unknown name": ("select * from payrail.search_provider_methods(%s, %s)", ["no such provider", query_vector()]),
    "query_takes_name_path": ("select payrail.query_takes_name_path(%s)", ["Provider 00012 Method 00049"]),
    "semantic search": ("select * from payrail.search_provider_methods(%s, %s, %s)", ["a question", query_vector(), MODEL]),
    "preview_search, semantic": ("select * from payrail.preview_search(%s, %s, %s, %s, %s)", [*name(9), "a question", query_vector(), MODEL]),
    "preview_search, by name": ("select * from payrail.preview_search(%s, %s, %s)", [*name(9), "method 00009"]),
    "save_provider_method by name": (
        "select * from payrail.save_provider_method(null, null, %s, %s, array['https://example.com/new'], null, %s)",
        [*name(20), GUIDANCE],
    ),
    "get_provider_method_history": ("select * from payrail.get_provider_method_history(%s, %s)", [*name(40)]),
    # The lookalike rule's lookups (tg_provider_methods__refuse_lookalikes, check_provider_method):
    # "Provider OOO12" with letters O for the digits looks like the stored "Provider 00012".
    "the look-alikes of a provider, a method and a docs host": (
        "select l.field, (l.other).id from payrail._lookalikes(null, %s, %s, %s) as l",
        ["Provider OOO12", "Method OOO5O", "https://examp1e.com/"],
    ),
    "check_provider_method of a look-alike": (
        "select * from payrail.check_provider_method(null, %s, %s, '{}', 'https://examp1e.com/', %s)",
        ["Provider OOO12", "Method OOO5O", GUIDANCE],
    ),
    "save_provider_method of a new name, looked up for look-alikes": (
        "select * from payrail.save_provider_method(null, null, %s, %s, '{}', 'https://docs.example.com/', %s)",
        ["Provider 99999", "New method", GUIDANCE],
    ),
}


@pytest.mark.parametrize("path", SQL_PATHS)
def test_sql_paths_use_their_indexes_before_any_analyze(unanalyzed, path):
    statement, arguments = SQL_PATHS[path]
    # Twice: the first call plans each statement, the second runs the plan a session keeps.
    for _ in range(2):
        assert_uses_indexes(unanalyzed, lambda: unanalyzed.execute(statement, arguments).fetchall())


class RandomEmbedder(Embedder):
    model_name = MODEL
    batch_size = OPENAI_MAX_BATCH

    def embed(self, texts):
        return list(np.random.default_rng(len(texts)).standard_normal((len(texts), DIMENSIONS)).astype(np.float32))


def test_write_path_finds_records_by_their_keys_before_any_analyze(unanalyzed):
    """Import's plan, check and save of a batch of existing records (by name) and new ones."""
    changes = [Change(ProviderMethod(*name(number), [f"https://example.com/changed/{number}"], None, GUIDANCE, None)) for number in range(0, 400, 7)] + [
        Change(ProviderMethod(f"New Provider {n}", "Method", [], None, GUIDANCE, True)) for n in range(20)
    ]
    # Each change's own names: planned, checked, saved, its key indexes written (about 22).
    most_normalized = 40 * len(changes)
    assert_uses_indexes(unanalyzed, lambda: check_changes(unanalyzed, changes), most_normalized)
    outcomes = []
    assert_uses_indexes(unanalyzed, lambda: outcomes.extend(save_changes(unanalyzed, RandomEmbedder, changes)), most_normalized)
    assert [o.outcome for o in outcomes] == ["updated"] * 58 + ["created"] * 20, outcomes


@pytest.mark.parametrize("words", [list(name(33)), [" / ".join(name(33))], [" ".join(name(33))]])
def test_operators_find_records_by_name_before_any_analyze(unanalyzed, words):
    assert_uses_indexes(unanalyzed, lambda: stored.find_by_name(unanalyzed, words))
    assert_uses_indexes(unanalyzed, lambda: stored.resolve_former_name(unanalyzed, words))


# The records list filtered by text or state scans the narrow list entries (no index: the same
# plan with statistics or without), then reads the page's records by id: never every record.
@pytest.mark.parametrize(("text", "state"), [("METHOD 00050", None), ("provider 0001", None), ("method 0", "draft"), ("", "enabled")])
def test_the_records_list_filters_without_reading_every_record_before_any_analyze(unanalyzed, text, state):
    for _ in range(2):
        assert_uses_indexes(unanalyzed, lambda: stored.list_records(unanalyzed, text, state, limit=100))
        assert lookups(unanalyzed, lambda: stored.counts(unanalyzed))["sequential scans"] == {}


def test_eval_and_golden_queries_find_records_by_their_keys_before_any_analyze(unanalyzed):
    """eval's labels and answers to records, golden queries added, listed, and going with a deleted record."""
    numbers = range(0, 600, 30)
    pairs = [name(number) for number in numbers]
    ids = [stored.find_by_name(unanalyzed, list(pair))["id"] for pair in pairs]
    assert_uses_indexes(unanalyzed, lambda: labelled_queries.NormalizedNames(unanalyzed, pairs), 10 * len(pairs))

    def golden_queries_of_a_registry():
        for number, record_id in enumerate(ids):
            relevant = [record_id] if number == 0 else [record_id, ids[0]]
            unanalyzed.execute("select payrail.add_golden_query(%s, %s)", (f"question {number}", relevant))
        assert [len(g.relevant) for g in golden.golden_queries(unanalyzed)] == [1] + [2] * (len(ids) - 1)
        unanalyzed.execute("select payrail.delete_provider_method(%s, null, true)", (ids[0],))
        assert [len(g.relevant) for g in golden.golden_queries(unanalyzed)] == [1] * (len(ids) - 1)

    assert_uses_indexes(unanalyzed, golden_queries_of_a_registry)
