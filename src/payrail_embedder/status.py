"""`db status`: what an operator needs to know of the registry's database, read without changing it."""

from __future__ import annotations

from pathlib import Path

import psycopg

from .base import paths
from .base.errors import reason
from .postgres import connection, deploy, local_server
from .registry import stored


def status(database_url: str | None, data_dir: Path | None) -> dict:
    """Which database is configured (its connection string without secrets), whether the embedded
    one runs and where (and why it would not start), the product's, PostgreSQL's and pgvector's
    versions, the schema version the registry holds and whether `db apply` is due, who besides
    its owners could create objects in a schema on the registry's search path (db apply refuses
    then), and the registry's counts. Never starts the embedded server. "error" says why the database could not be read.
    Its keys are stable: scripts read them with --json."""
    report: dict[str, object] = {
        "productVersion": deploy.product_version(),
        "database": "configured" if database_url else "embedded",
        "url": None,
        "embedded": None,
        "server": None,
        "schemaVersion": None,
        "applyDue": None,
        "applyDueReasons": [],
        "writableSearchPathSchemas": None,
        "registry": None,
        "error": None,
    }
    if database_url:
        report["url"] = connection.display_url(database_url)
    else:
        pgdata = local_server.embedded_pgdata(data_dir or paths.default_data_dir())
        info = local_server.pgserver().utils.PostmasterInfo.read_from_pgdata(pgdata) if pgdata.is_dir() else None
        running = info if info is not None and info.is_running() else None
        report["embedded"] = {
            "running": running is not None,
            "dataDirectory": str(pgdata),
            "pid": running.pid if running is not None else None,
            "socketDirectory": str(running.socket_dir) if running is not None else None,
            "startProblem": None if running is not None else local_server.embedded_start_problem(pgdata),
        }
        if running is None:
            return report
        database_url = report["url"] = local_server.embedded_uri(running, local_server.EMBEDDED_DATABASE)
    try:
        with connection.connect(database_url, autocommit=True) as conn:
            postgresql, pgvector = connection.one_row(
                conn.execute(
                    """select pg_catalog.current_setting('server_version'),
                          (select extversion from pg_catalog.pg_extension where extname = 'vector')"""
                )
            )
            report["server"] = {"postgresql": postgresql, "pgvector": pgvector}
            report |= deploy.schema_state(conn)
            report["writableSearchPathSchemas"] = search_path_writers(conn)
            report["registry"] = stored.counts(conn)
    except psycopg.Error as error:
        report["error"] = reason(error)
    return report


def search_path_writers(conn: psycopg.Connection) -> list[dict] | None:
    """Each role (or PUBLIC) besides the owners that can create objects in payrail or pgvector's
    schema, with the statement that stops it: {"schema", "writer", "fix"}. None where this login
    may not ask (or the registry predates the question)."""
    allowed = connection.one_value(
        conn.execute("select pg_catalog.has_function_privilege(pg_catalog.to_regprocedure('payrail._search_path_writers()'), 'execute')")
    )
    if not allowed:
        return None
    rows = conn.execute("select schema_name, writer, fix from payrail._search_path_writers()").fetchall()
    return [{"schema": schema, "writer": writer, "fix": fix} for schema, writer, fix in rows]
