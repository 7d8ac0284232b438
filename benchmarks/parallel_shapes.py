"""Which function shapes PostgreSQL runs with parallel workers: the evidence behind db/SEARCH.md.

    ./scripts/benchmark parallel_shapes [--records 100000] [--dimensions 1536] [--postgres 18]

One throwaway embedded PostgreSQL with db/ applied and N enabled records of random unit vectors
(by binary COPY, as `search_speed --load copy` does, then vacuum analyzed). The same first-pass query (the 64 nearest
half-precision vectors by inner product) is wrapped in each shape a search could take: a top-level
SELECT, SQL functions (inlinable or not, security definer, called in FROM or in the select list),
PL/pgSQL statements (RETURN QUERY, SELECT INTO, an assignment, a FOR loop) and combinations; then
the schema's own payrail.search_provider_methods as payrail_agent. For each, in sessions that price
workers at nothing (parallel_setup_cost = parallel_tuple_cost = 0, min_parallel_table_scan_size
= 0, as a function's SET clauses can; the schema's search in default sessions), it prints the workers PostgreSQL planned (debug_print_plan,
every statement the call plans), whether workers ran (PostgreSQL 18: launched per call, counted in
pg_stat_database; 16: whether background workers read any page, pg_stat_io) and the p50 latency
with max_parallel_workers_per_gather = 0 and = 2, query by query interleaved. A second table checks
what the settings do: SET clauses on a function, default costs, a table's parallel_workers option
below min_parallel_table_scan_size.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from contextlib import ExitStack

import numpy as np
import psycopg
from pgvector.psycopg import register_vector

from search_speed import MODEL, WORKERS_PLANNED, analyze, load_by_copy, shared_buffers_for, unit_vectors
from throwaway_postgres import throwaway_postgres

FIRST_PASS = """
  select hv.provider_method_id, hv.unit_embedding <#> (select l2_normalize(p_q)::halfvec) as inner_product
  from payrail.provider_method_half_vectors as hv
  order by 2 limit p_limit"""
SELECT_INTO = """
declare
  v_ids bigint[];
  v_distances double precision[];
begin
  select pg_catalog.array_agg(n.id order by n.distance), pg_catalog.array_agg(n.distance order by n.distance)
    into v_ids, v_distances
  from {source} as n(id, distance);
  return query select * from unnest(v_ids, v_distances);
end"""
SIGNATURE = "(p_q vector, p_limit integer) returns table (id bigint, distance double precision)"
# name: (language, attributes, body)
FUNCTIONS = {
    "sql_inlinable": ("sql", "stable", FIRST_PASS),
    "sql_inlinable_safe": ("sql", "stable parallel safe", FIRST_PASS),
    "sql_with_set": ("sql", "stable set search_path from current", FIRST_PASS),
    "sql_definer": ("sql", "stable security definer", FIRST_PASS),
    "sql_with_set_costs": ("sql", "stable set search_path from current set parallel_setup_cost = 0 set parallel_tuple_cost = 0", FIRST_PASS),
    "plpgsql_return_query": ("plpgsql", "stable", f"begin return query {FIRST_PASS}; end"),
    "plpgsql_select_into": ("plpgsql", "stable", SELECT_INTO.format(source=f"({FIRST_PASS})")),
    "plpgsql_assignment": (
        "plpgsql",
        "stable",
        f"""
declare
  v_ids bigint[];
begin
  v_ids := (select pg_catalog.array_agg(n.id order by n.distance) from ({FIRST_PASS}) as n(id, distance));
  return query select i, 0::double precision from pg_catalog.unnest(v_ids) as i;
end""",
    ),
    "plpgsql_for_loop": (
        "plpgsql",
        "stable",
        f"""
declare
  r record;
begin
  for r in {FIRST_PASS} loop
    id := r.provider_method_id; distance := r.inner_product; return next;
  end loop;
end""",
    ),
    "plpgsql_into_over_sql_inlinable_safe": ("plpgsql", "stable", SELECT_INTO.format(source="shapes.sql_inlinable_safe(p_q, p_limit)")),
    "plpgsql_into_over_sql_with_set": ("plpgsql", "stable", SELECT_INTO.format(source="shapes.sql_with_set(p_q, p_limit)")),
    "plpgsql_into_over_plpgsql_return_query": ("plpgsql", "stable", SELECT_INTO.format(source="shapes.plpgsql_return_query(p_q, p_limit)")),
    "sql_definer_over_plpgsql": (
        "sql",
        "stable security definer set search_path from current",
        "select * from shapes.plpgsql_into_over_plpgsql_return_query(p_q, p_limit)",
    ),
}
TOP_LEVEL = FIRST_PASS.replace("p_q", "%(q)s::vector").replace("p_limit", "64")
SEARCH_IN_FROM = "select provider, method from payrail.search_provider_methods('shapes', %(q)s, %(model)s)"
SEARCH_IN_SELECT_LIST = "select payrail.search_provider_methods('shapes', %(q)s, %(model)s)"


def in_from(name: str) -> str:
    return f"select * from shapes.{name}(%(q)s, 64)"


def in_select_list(name: str) -> str:
    return f"select shapes.{name}(%(q)s, 64)"


SHAPES = {
    "top-level SELECT": TOP_LEVEL,
    "language sql, inlinable (parallel unsafe), in FROM": in_from("sql_inlinable"),
    "language sql, inlinable, parallel safe, in FROM": in_from("sql_inlinable_safe"),
    "language sql with a SET clause (not inlined), in FROM": in_from("sql_with_set"),
    "language sql with a SET clause, in the select list": in_select_list("sql_with_set"),
    "language sql, security definer (not inlined), in FROM": in_from("sql_definer"),
    "PL/pgSQL RETURN QUERY": in_from("plpgsql_return_query"),
    "PL/pgSQL SELECT ... INTO": in_from("plpgsql_select_into"),
    "PL/pgSQL v := (SELECT ...)": in_from("plpgsql_assignment"),
    "PL/pgSQL FOR r IN SELECT ... LOOP": in_from("plpgsql_for_loop"),
    "PL/pgSQL SELECT INTO over the parallel-safe inlinable SQL function": in_from("plpgsql_into_over_sql_inlinable_safe"),
    "PL/pgSQL SELECT INTO over the SQL function with a SET clause": in_from("plpgsql_into_over_sql_with_set"),
    "PL/pgSQL SELECT INTO over PL/pgSQL RETURN QUERY": in_from("plpgsql_into_over_plpgsql_return_query"),
    "security definer SQL over that, in the select list": in_select_list("sql_definer_over_plpgsql"),
}
# The schema's search, in sessions with PostgreSQL's default settings: it sets what it needs itself.
SEARCHES = {
    "payrail.search_provider_methods as payrail_agent, in FROM": SEARCH_IN_FROM,
    "payrail.search_provider_methods as payrail_agent, in the select list": SEARCH_IN_SELECT_LIST,
}
WORKERS_FREE = {"parallel_setup_cost": "0", "parallel_tuple_cost": "0", "min_parallel_table_scan_size": "0"}


def role_for(sql: str) -> str | None:
    """The schema's search runs as an agent would; the shapes as the owner."""
    return "payrail_agent" if "payrail.search_provider_methods" in sql else None


def create_shapes(url: str) -> None:
    with psycopg.connect(url) as conn:
        conn.execute("create schema shapes")
        conn.execute("grant usage on schema shapes to public")
        for name, (language, attributes, body) in FUNCTIONS.items():
            conn.execute(f"create function shapes.{name}{SIGNATURE} language {language} {attributes} as $body${body}$body$")


def session(stack: ExitStack, url: str, settings: dict[str, str], role: str | None = None) -> psycopg.Connection:
    conn = stack.enter_context(psycopg.connect(url, autocommit=True))
    register_vector(conn)
    for name, value in settings.items():
        conn.execute(f"select set_config('{name}', '{value}', false)")
    if role:
        conn.execute(f"set role {role}")
    return conn


def planned_workers(url: str, sql: str, settings: dict[str, str], role: str | None, q: np.ndarray) -> int:
    """The most workers any plan made during one call asks for, in a new session."""
    plans: list[str] = []
    with ExitStack() as stack:
        conn = session(stack, url, {**settings, "debug_print_plan": "on", "client_min_messages": "log"}, role)
        conn.add_notice_handler(lambda notice: plans.append(notice.message_detail or ""))
        conn.execute(sql, {"q": q, "model": MODEL}).fetchall()
    return max((int(n) for plan in plans for n in WORKERS_PLANNED.findall(plan)), default=0)


def workers_ran(url: str) -> Callable[[], object]:
    """A reading that grows when parallel workers run: launched workers (PostgreSQL 18) or pages
    read by background workers (16)."""

    def read() -> object:
        with psycopg.connect(url, autocommit=True) as conn:
            if conn.info.server_version >= 180000:
                return conn.execute("select parallel_workers_launched from pg_stat_database where datname = current_database()").fetchone()[0]
            return conn.execute(
                "select coalesce(sum(reads + hits), 0) from pg_stat_io where backend_type = 'background worker' and object = 'relation'"
            ).fetchone()[0]

    return read


def measure(url: str, shapes: dict[str, str], settings: dict[str, str], queries: int, dimensions: int) -> list[list]:
    """Per shape: workers planned, workers run (the third call), p50 ms with 0 and with 2 workers
    per gather, the calls interleaved."""
    rng = np.random.default_rng(14)
    read = workers_ran(url)
    with ExitStack() as stack:
        sessions = {
            (name, workers): session(stack, url, {**settings, "max_parallel_workers_per_gather": str(workers)}, role_for(sql))
            for name, sql in shapes.items()
            for workers in (0, 2)
        }
        times: dict[tuple[str, int], list[float]] = {key: [] for key in sessions}
        ran: dict[str, object] = {}
        for number in range(queries + 2):  # two to warm up and plan
            q = unit_vectors(rng, 1, dimensions)[0]
            for (name, workers), conn in sessions.items():
                before = read()
                started = time.perf_counter()
                conn.execute(shapes[name], {"q": q, "model": MODEL}).fetchall()
                elapsed = (time.perf_counter() - started) * 1000
                conn.execute("select pg_stat_force_next_flush()")  # flushed as the session goes idle
                if workers and number == 2:
                    ran[name] = read() - before
                if number >= 2:
                    times[(name, workers)].append(elapsed)
    q = unit_vectors(rng, 1, dimensions)[0]
    return [
        [name, planned_workers(url, sql, settings, role_for(sql), q), ran[name], statistics.median(times[(name, 0)]), statistics.median(times[(name, 2)])]
        for name, sql in shapes.items()
    ]


def print_table(headers: list[str], rows: list[list]) -> None:
    print("| " + " | ".join(headers) + " |")
    print("|---|" + "---:|" * (len(headers) - 1))
    for row in rows:
        print("| " + " | ".join(f"{c:.1f}" if isinstance(c, float) else str(c) for c in row) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=100000)
    parser.add_argument("--small-records", type=int, default=1000, help="the registry below min_parallel_table_scan_size")
    parser.add_argument("--dimensions", type=int, default=1536)
    parser.add_argument("--queries", type=int, default=9, help="timed calls per shape and worker count")
    parser.add_argument("--postgres", type=int, default=18, choices=[16, 18])
    args = parser.parse_args()
    settings = {"shared_buffers": shared_buffers_for(args.records, args.dimensions), "max_wal_size": "4GB"}
    with throwaway_postgres(args.postgres, settings) as server:
        urls = {}
        for records in (args.records, args.small_records):
            urls[records] = server.registry(f"shapes_{records}")
            load_by_copy(urls[records], unit_vectors(np.random.default_rng(records), records, args.dimensions), None)
            analyze(urls[records])
            create_shapes(urls[records])
        with psycopg.connect(urls[args.records]) as conn:
            version = conn.execute("show server_version").fetchone()[0]
        ran = "workers launched per call" if args.postgres >= 18 else "background-worker pages read"
        print(
            f"PostgreSQL {version}, {os.cpu_count()} CPUs, {args.records} records of {args.dimensions} dimensions;"
            f" sessions: {WORKERS_FREE}; p50 of {args.queries} calls; loaded by binary COPY, then vacuum (analyze)\n"
        )
        headers = ["shape", "workers planned", ran, "p50 ms, 0 workers", "p50 ms, 2 workers"]
        print_table(
            headers,
            measure(urls[args.records], SHAPES, WORKERS_FREE, args.queries, args.dimensions)
            + measure(urls[args.records], SEARCHES, {}, args.queries, args.dimensions),
        )

        print("\nSettings: default costs in the session unless stated\n")
        settings_rows = [
            [f"{records} records: {name}", *row[1:]]
            for records, name, shapes, session_settings in [
                (args.records, "SQL function with a SET clause", {"x": in_from("sql_with_set")}, {}),
                (args.records, "the same with SET parallel_setup_cost = 0, parallel_tuple_cost = 0 on the function", {"x": in_from("sql_with_set_costs")}, {}),
                (args.small_records, "payrail.search_provider_methods as payrail_agent", {"x": SEARCH_IN_FROM}, {}),
                (args.small_records, "top-level SELECT, session costs 0", {"x": TOP_LEVEL}, {"parallel_setup_cost": "0", "parallel_tuple_cost": "0"}),
            ]
            for row in measure(urls[records], shapes, session_settings, args.queries, args.dimensions)
        ]
        with psycopg.connect(urls[args.small_records], autocommit=True) as conn:
            conn.execute("alter table payrail.provider_method_half_vectors set (parallel_workers = 2)")
        settings_rows += [
            [f"{args.small_records} records: top-level SELECT, session costs 0, table option parallel_workers = 2", *row[1:]]
            for row in measure(
                urls[args.small_records], {"x": TOP_LEVEL}, {"parallel_setup_cost": "0", "parallel_tuple_cost": "0"}, args.queries, args.dimensions
            )
        ]
        print_table(headers, settings_rows)


if __name__ == "__main__":
    main()
