"""What the search's check of an agent session's limits costs (payrail._refuse_lifted_limits).

    ./scripts/benchmark session_limits [--records 1000] [--calls 300] [--rounds 5]

Every search first compares the session's statement_timeout, lock_timeout and
idle_in_transaction_session_timeout with the limits its login is given, read from
pg_db_role_setting once per session (db/functions/200-search.sql). This measures that against
the same search without it.

A throwaway embedded PostgreSQL 18 with db/ applied, `--records` enabled records of 384
dimensions (random unit vectors inserted with SQL: the cost of an exact scan does not depend on
the vectors), and two logins granted payrail_agent: one given the three limits (ALTER ROLE ...
SET), one given none. For each login and path (name: an existing provider's name; semantic: a
random unit vector), `--rounds` rounds of `--calls` warm calls of payrail.search_provider_methods
(psycopg, Unix socket, prepared after the fifth as the package does), each round once as
installed and once with the check replaced by a function that does nothing, interleaved so both
see the same machine load. The table gives the median and 90th percentile of the client round
trip, and the median's difference. The second table measures inside the server, where a round
trip's noise does not reach: one statement calling the check alone, then the name and the
semantic search, many times each, divided; and the check's share of each search.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import psycopg
from pgvector.psycopg import register_vector
from psycopg import sql

from throwaway_postgres import throwaway_postgres

DIMENSIONS = 384
# Long enough for the in-server statements below; the check compares values, whatever they are.
LIMITS = {"statement_timeout": "30s", "lock_timeout": "1s", "idle_in_transaction_session_timeout": "10s"}
# Inside the server: one statement calling each this many times (the select list calls it per row).
IN_SERVER = {
    "check alone": ("select pg_catalog.count(payrail._refuse_lifted_limits()::text) from pg_catalog.generate_series(1, 2000)", 2000),
    "name search": (
        "select pg_catalog.count(*) from (select payrail.search_provider_methods('Provider 17') from pg_catalog.generate_series(1, 2000)) as s",
        2000,
    ),
    "semantic search": (
        "select pg_catalog.count(*) from (select payrail.search_provider_methods('a question', %s, 'bench-model') "
        "from pg_catalog.generate_series(1, 100)) as s",
        100,
    ),
}
NO_CHECK = """
create or replace function payrail._refuse_lifted_limits() returns void language plpgsql stable security invoker
set search_path = pg_catalog, pg_temp as $$ begin end $$
"""


def fill(url: str, records: int, rng: np.random.Generator) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        register_vector(conn)
        conn.execute("select payrail.set_embedding_model('bench-model', %s)", (DIMENSIONS,))
        vectors = rng.standard_normal((records, DIMENSIONS), dtype=np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        with conn.cursor() as cursor:
            cursor.executemany(
                """insert into payrail.provider_methods
                     (provider, method, guidance, enabled, embedding, embedding_model, embedding_content_hash)
                   values (%(provider)s, 'Method', 'Purpose: a benchmark record.', true, %(vector)s, 'bench-model',
                           payrail._content_hash(%(provider)s, 'Method', 'Purpose: a benchmark record.'))""",
                [{"provider": f"Provider {n}", "vector": vector} for n, vector in enumerate(vectors)],
            )
        conn.execute("vacuum (analyze)")


def login(admin_url: str, name: str, limits: dict[str, str]) -> str:
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("create role {} login in role payrail_agent").format(sql.Identifier(name)))
        # Only for "check alone", which calls the check as the login: agents call it through search.
        conn.execute(
            sql.SQL(
                "grant execute on function payrail._refuse_lifted_limits(), payrail._session_login_limits(), "
                "payrail._login_limits_of(name), payrail._milliseconds(text) to {}"
            ).format(sql.Identifier(name))
        )
        for setting, value in limits.items():
            conn.execute(sql.SQL("alter role {} set {} = {}").format(sql.Identifier(name), sql.Identifier(setting), sql.Literal(value)))
    user_and_host = admin_url.split("@", 1)
    return f"postgresql://{name}@{user_and_host[1]}"


def timed_calls(conn: psycopg.Connection, statement: str, arguments, calls: int) -> list[float]:
    times = []
    for _ in range(calls):
        started = time.perf_counter()
        conn.execute(statement, arguments()).fetchall()
        times.append((time.perf_counter() - started) * 1e6)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1000)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=5)
    options = parser.parse_args()
    rng = np.random.default_rng(7)
    with throwaway_postgres() as server:
        url = server.registry("payrail_bench")
        fill(url, options.records, rng)
        logins = {"given the three limits": login(url, "bench_agent_limited", LIMITS), "given none": login(url, "bench_agent_free", {})}

        def unit_vector():
            vector = rng.standard_normal(DIMENSIONS, dtype=np.float32)
            return (vector / np.linalg.norm(vector),)

        paths = {
            "name": ("select * from payrail.search_provider_methods('Provider 17')", lambda: None),
            "semantic": ("select * from payrail.search_provider_methods('a question', %s, 'bench-model')", unit_vector),
        }
        print(f"{options.records} records, {options.rounds} rounds of {options.calls} calls, PostgreSQL 18, one client\n")
        print("| login | path | p50 us, with the check | p50 us, without | difference | p90 us, with | p90 us, without |")
        print("|---|---|---:|---:|---:|---:|---:|")
        with psycopg.connect(url, autocommit=True) as admin:
            installed = admin.execute("select pg_catalog.pg_get_functiondef('payrail._refuse_lifted_limits()'::pg_catalog.regprocedure)").fetchone()[0]
            for label, login_url in logins.items():
                for path, (statement, arguments) in paths.items():
                    measured: dict[bool, list[float]] = {True: [], False: []}
                    with psycopg.connect(login_url, autocommit=True) as agent:
                        register_vector(agent)
                        for _ in range(options.rounds):
                            for checked in (True, False):
                                admin.execute(installed if checked else NO_CHECK)
                                timed_calls(agent, statement, arguments, 10)  # the function's plans made again
                                measured[checked] += timed_calls(agent, statement, arguments, options.calls)
                    admin.execute(installed)
                    p50 = {checked: statistics.median(times) for checked, times in measured.items()}
                    p90 = {checked: statistics.quantiles(times, n=10)[-1] for checked, times in measured.items()}
                    print(
                        f"| {label} | {path} | {p50[True]:.0f} | {p50[False]:.0f} | {p50[True] - p50[False]:+.0f} "
                        f"({(p50[True] / p50[False] - 1) * 100:+.1f}%) | {p90[True]:.0f} | {p90[False]:.0f} |"
                    )
        print("\nInside the server (one statement of many calls, best of 4), us a call:\n")
        print("| login | check alone | name search | check / name | semantic search | check / semantic |")
        print("|---|---:|---:|---:|---:|---:|")
        vector = unit_vector()
        for label, login_url in logins.items():
            with psycopg.connect(login_url, autocommit=True) as agent:
                register_vector(agent)
                cost = {}
                for what, (statement, calls) in IN_SERVER.items():
                    best = float("inf")
                    for _ in range(4):
                        started = time.perf_counter()
                        agent.execute(statement, vector if "%s" in statement else None).fetchone()
                        best = min(best, time.perf_counter() - started)
                    cost[what] = best / calls * 1e6
            check, name, semantic = cost["check alone"], cost["name search"], cost["semantic search"]
            print(f"| {label} | {check:.1f} | {name:.1f} | {check / name:.1%} | {semantic:.0f} | {check / semantic:.2%} |")


if __name__ == "__main__":
    main()
