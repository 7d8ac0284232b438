"""`db status`: what an operator needs to know of the registry's database, read without changing it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import psycopg

from ..base import paths
from ..base.errors import reason
from ..base.reports import Report
from ..postgres import connection, deploy, local_server
from ..registry import stored


@dataclass(frozen=True)
class Status(Report):
    """`db status`'s report: its facts under the keys --json prints (status() says which)."""

    facts: dict

    @property
    def error(self) -> str | None:
        """Why the configured database could not be read, or None."""
        return self.facts["error"]

    def to_json(self) -> dict:
        return self.facts

    def describe(self) -> list[str]:
        report = self.facts
        lines = [f"payrail-agent-search {report['productVersion']}"]
        embedded = report["embedded"]
        if embedded is None:
            lines.append(f"configured database: {report['url']}")
        elif embedded["running"]:
            lines.append(f"embedded PostgreSQL {local_server.EMBEDDED_POSTGRES_VERSION}: running (pid {embedded['pid']}), data in {embedded['dataDirectory']}")
            lines.append(f"url: {report['url']}")
        else:
            lines.append(f"embedded PostgreSQL {local_server.EMBEDDED_POSTGRES_VERSION}: not running (data directory {embedded['dataDirectory']})")
            if embedded["startProblem"]:
                lines.append(f"it cannot start: {embedded['startProblem']}")
            else:
                lines.append(f"`{local_server.START_COMMAND}` starts it")
        if report["error"]:
            lines.append(f"cannot read the registry: {report['error']}")
        server = report["server"]
        if server is not None:
            lines.append(f"PostgreSQL {server['postgresql']}, pgvector {server['pgvector'] or 'not installed'}")
        version = report["schemaVersion"]
        if version is not None:
            by = f"payrail-agent-search {version['productVersion']}" if version["productVersion"] else "psql"
            lines.append(
                f"schema: applied {version['appliedAt']} by {version['appliedBy']} with {by}"
                + (f" (db/ {version['dbDigest'][:12]})" if version["dbDigest"] else "")
            )
        if report["applyDue"] is not None:
            due = report["applyDue"]
            lines.append(f"db apply: due ({'; '.join(report['applyDueReasons'])})" if due else "db apply: not due, the registry is current")
        writers = report["writableSearchPathSchemas"]
        if writers == []:
            lines.append("search path: no role but the owners can create objects in the registry's schemas")
        for writer in writers or ():
            lines.append(
                f"search path: {writer['writer']} can create objects in schema {writer['schema']}, which the registry's "
                f"functions search; db apply refuses until you run `{writer['fix']}`"
            )
        registry = report["registry"]
        if registry is not None and not registry["schemaApplied"]:
            lines.append("no registry in this database yet: run `payrail-embedder db apply`")
        elif registry is not None:
            model = registry["model"]
            lines.append(f"model: {model['name']} ({model['dimensions']} dimensions)" if model else "model: none yet")
            needing = registry["draftsNeedingEmbedding"]
            without_vector = (
                f"{needing} of them without a current vector" if needing is not None else "which of them lack a current vector is known after `db apply`"
            )
            lines.append(f"{registry['records']} records: {registry['enabled']} enabled, {registry['drafts']} drafts, {without_vector}")
        return lines


def status(database_url: str | None, data_dir: Path | None) -> Status:
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
            return Status(report)
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
    return Status(report)


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
