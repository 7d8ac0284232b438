"""Drafts are invisible to agents through every channel: the answer, the error, and the statistics
views any role can read. An agent's lookup of a draft's name must leave the same traces in
pg_stat_user_tables, pg_stat_user_indexes and pg_statio_user_* as a lookup of a name nobody has.
"""

from __future__ import annotations

import psycopg
import pytest

from payrail_embedder.postgres.connection import connect
from test_properties import seed_search

RECORDS = [
    ("Stripe", "Create a refund", True),
    ("Stripe", "Create a PaymentIntent", True),
    ("Twilio", "Send an SMS", True),
    ("Acme Maps", "Geocode an address", False),  # the draft
    # Enough records that the name path reads its indexes rather than the whole table.
    *((f"Provider {n}", f"Method {n}", n % 5 > 0) for n in range(100)),
]
# Every statistic of the registry's tables and indexes an agent's session could move.
TRACES = """
select 'table ' || t.relname, t.seq_scan, t.seq_tup_read, t.idx_scan, t.idx_tup_fetch,
       io.heap_blks_read + io.heap_blks_hit, io.idx_blks_read + io.idx_blks_hit
from pg_catalog.pg_stat_user_tables as t join pg_catalog.pg_statio_user_tables as io using (relid)
where t.schemaname = 'payrail'
union all
select 'index ' || i.indexrelname, i.idx_scan, i.idx_tup_read, i.idx_tup_fetch, 0,
       io.idx_blks_read + io.idx_blks_hit, 0
from pg_catalog.pg_stat_user_indexes as i join pg_catalog.pg_statio_user_indexes as io using (indexrelid)
where i.schemaname = 'payrail'
order by 1
"""


def seed(url: str) -> None:
    seed_search(url, RECORDS)
    with connect(url) as conn:
        conn.execute("analyze payrail.provider_methods")


def traces(observer: psycopg.Connection) -> dict[str, tuple]:
    observer.execute("select pg_catalog.pg_stat_clear_snapshot()")
    return {name: tuple(counts) for name, *counts in observer.execute(TRACES)}


def agent_lookup(url: str, query: str) -> tuple[str | None, str]:
    """What an agent sees when it searches by this name without a vector, its statistics flushed."""
    with psycopg.connect(url, autocommit=True) as agent:
        agent.execute("set role payrail_agent")
        try:
            agent.execute("select * from payrail.search_provider_methods(%s)", (query,))
            seen = (None, "answered")
        except psycopg.Error as error:
            seen = (error.sqlstate, error.diag.message_primary)
        takes_name_path = agent.execute("select payrail.query_takes_name_path(%s)", (query,)).fetchone()[0]
        agent.execute("reset role")
        agent.execute("select pg_catalog.pg_stat_force_next_flush()")
        agent.execute("select 1")
    return seen + (takes_name_path,)


def delta(before: dict, after: dict) -> dict:
    return {name: tuple(a - b for a, b in zip(after[name], before[name], strict=True)) for name in after}


@pytest.mark.parametrize(
    ("draft_name", "unknown_name"),
    [
        ("Acme Maps", "Acme Mapz"),
        ("geocode an address", "geocode an addresz"),
        ("ACME MAPS / Geocode an address", "Acme Maps / Geocode an addresz"),
        ("Acme Maps Geocode an address", "Acme Maps Geocode an addresz"),
    ],
)
def test_an_agent_learns_nothing_from_a_drafts_name(database_url, draft_name, unknown_name):
    seed(database_url)
    with psycopg.connect(database_url, autocommit=True) as observer:
        # Both once unmeasured, so caches and catalog lookups are warm for both alike.
        agent_lookup(database_url, draft_name)
        agent_lookup(database_url, unknown_name)
        before = traces(observer)
        seen_for_draft = agent_lookup(database_url, draft_name)
        between = traces(observer)
        seen_for_unknown = agent_lookup(database_url, unknown_name)
        after = traces(observer)
    assert seen_for_draft == seen_for_unknown == ("PYE01", seen_for_draft[1], False)
    assert delta(before, between) == delta(between, after)
    # The lookups did read the name indexes: the comparison above compared something.
    assert any(counts[0] for name, counts in delta(before, between).items() if name.startswith("index ")), delta(before, between)
