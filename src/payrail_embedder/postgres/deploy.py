"""`db apply`, the deploy: applies db/ without ever failing or stalling agents' searches.

- A registry that is current (the db/ digest recorded by its last apply, its catalog unchanged
  since, that apply's follow-up done) is left alone: a read of the catalog, with the ACCESS SHARE
  locks a search takes and no other.
- Otherwise db/ runs in one transaction that takes its locks up front, in the order searches take
  them (provider_methods, embedding_model, search's derived table, then the rest), waits at most
  `lock_timeout` for each and starts again a bounded number of times, saying what it waited for
  and who held it. First in SHARE ROW EXCLUSIVE mode, which searches never wait for; a change that
  needs more (a new or changed constraint, an upgrade step that alters a table) raises PYD01 and
  the transaction starts again holding ACCESS EXCLUSIVE locks, for as short a time as it takes.
- What reads every row runs afterwards, in short transactions that block neither searches nor
  edits: constraints added NOT VALID are validated, the derived tables' rows (search's half
  vectors, the records list's entries) repaired range by range.

db/CONVENTIONS.md, "Deploys", has the rules the SQL follows; docs/operations.md what to expect.
"""

from __future__ import annotations

import hashlib
import random
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import TypeVar

import psycopg

from ..base import errcodes
from ..base.errors import CodedError
from ..base.reports import Report
from . import connection
from .connection import display_url, one_row, one_value

# The tables a change may lock, in the order a search takes them (payrail._search: its login's
# bounds, read when a session's first search plans the check, the name path's provider_methods,
# the model, the derived table), then those searches never read, the list
# entries first (a save's triggers, which fire in name order, write them after the half vectors),
# the golden queries (a record's delete reads them after locking the record), then the bulk
# actions' (payrail.begin_bulk_action locks the records first).
LOCK_ORDER = (
    "payrail.agent_logins",
    "payrail.provider_methods",
    "payrail.embedding_model",
    "payrail.provider_method_half_vectors",
    "payrail.provider_method_list_entries",
    "payrail.embedding_staging",
    "payrail.provider_method_history",
    "payrail.golden_queries",
    "payrail.golden_query_records",
    "payrail.golden_query_embeddings",
    "payrail.bulk_actions",
    "payrail.bulk_action_records",
)
# Serializes applies: a lock on a table no role but the deployer (its owner) may lock.
DEPLOY_LOCK_TABLE = "payrail.deployments"
# A registry that predates payrail.deployments (or none yet) has only this to serialize its first apply.
FIRST_APPLY_LOCK_KEY = 0x7061797261696C  # "payrail"
LOCK_TIMEOUT_SECONDS = 0.5
LOCK_ATTEMPTS = 10
# Records per transaction of a derived table's repair.
REPAIR_BATCH_IDS = 5000
# The tables derived from provider_methods by trigger (search's half vectors, the records list's
# entries), each with the function that repairs a range of its rows.
DERIVED_TABLES = (
    ("payrail.provider_method_half_vectors", "payrail._repair_half_vectors"),
    ("payrail.provider_method_list_entries", "payrail._repair_list_entries"),
)
# What the derived rows are computed by: when an apply changes it, the follow-up checks every row
# (with --force too); otherwise it cannot have made one differ, and the check would read every vector.
DERIVATION = """
select pg_catalog.md5(pg_catalog.concat_ws(',',
  pg_catalog.pg_get_functiondef(pg_catalog.to_regprocedure('payrail.tg_provider_methods__keep_half_vector()')),
  pg_catalog.pg_get_functiondef(pg_catalog.to_regprocedure('payrail._repair_half_vectors(bigint, bigint)')),
  (select e.extversion from pg_catalog.pg_extension as e where e.extname operator(pg_catalog.=) 'vector'),
  pg_catalog.pg_get_functiondef(pg_catalog.to_regprocedure('payrail.tg_provider_methods__keep_list_entry()')),
  pg_catalog.pg_get_functiondef(pg_catalog.to_regprocedure('payrail._repair_list_entries(bigint, bigint)')),
  -- By name: its argument's type does not exist before the first apply.
  pg_catalog.pg_get_functiondef(pg_catalog.to_regproc('payrail._list_entry'))))
"""

T = TypeVar("T")


def product_version() -> str:
    return metadata.version("payrail-agent-search")


def db_digest(files: list[Path] | None = None) -> str:
    """SHA-256 of the db/ files `db apply` runs, names and contents, in their order."""
    digest = hashlib.sha256()
    root = sql_dir()
    for path in files if files is not None else sql_files():
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def schema_state(conn: psycopg.Connection, digest: str | None = None) -> dict:
    """The schema version the registry holds and whether `db apply` is due, with the reasons.

    {"schemaVersion": {...} | None, "applyDue": bool, "applyDueReasons": [...]}; reads the
    catalog and payrail.get_schema_version(), with ACCESS SHARE locks alone (printing a
    constraint's or an index's definition takes one on its table).
    """
    digest = digest or db_digest()
    recorded = one_value(conn.execute("select pg_catalog.to_regprocedure('payrail.get_schema_version()') is not null"))
    if not recorded:
        registry = one_value(conn.execute("select pg_catalog.to_regclass('payrail.provider_methods') is not null"))
        reason = "the registry predates schema versions" if registry else "no registry in this database yet"
        return {"schemaVersion": None, "applyDue": True, "applyDueReasons": [reason]}
    row = conn.execute(
        """select v.product_version, v.db_digest, v.applied_at, v.applied_by, v.applied_with, v.postgres_version,
                  v.pgvector_version, v.completed_at, v.definitions_changed, v.constraints_not_validated,
                  pg_catalog.current_setting('server_version'),
                  (select e.extversion from pg_catalog.pg_extension as e where e.extname operator(pg_catalog.=) 'vector')
           from payrail.get_schema_version() as v"""
    ).fetchone()
    if row is None:
        return {"schemaVersion": None, "applyDue": True, "applyDueReasons": ["no apply recorded yet"]}
    (version, applied_digest, applied_at, applied_by, applied_with, postgres, pgvector, completed_at, changed, not_validated, postgres_now, pgvector_now) = row
    reasons = []
    if applied_digest != digest:
        reasons.append("db/ differs from the one applied" if applied_digest else "applied with psql, which records no db/ digest")
    if changed:
        # The catalog prints differently: say why, where the versions tell.
        if postgres.split(".")[0] != postgres_now.split(".")[0]:
            reasons.append(f"PostgreSQL was upgraded since the last apply ({postgres} to {postgres_now})")
        elif pgvector != pgvector_now:
            reasons.append(f"pgvector was updated since the last apply ({pgvector} to {pgvector_now})")
        else:
            reasons.append("definitions changed by hand since the last apply")
    if completed_at is None:
        reasons.append("the last apply's follow-up (validating constraints, checking derived rows) did not finish")
    if not_validated:
        reasons.append(f"constraints not validated: {', '.join(not_validated)}")
    return {
        "schemaVersion": {
            "productVersion": version,
            "dbDigest": applied_digest,
            "appliedAt": applied_at.isoformat(),
            "appliedBy": applied_by,
            "appliedWith": applied_with,
            "completedAt": completed_at.isoformat() if completed_at else None,
            "postgresVersion": postgres,
            "pgvectorVersion": pgvector,
        },
        "applyDue": bool(reasons),
        "applyDueReasons": reasons,
    }


@dataclass
class Blocker:
    """A session holding a lock the apply waits for, as pg_stat_activity shows it to the deployer."""

    pid: int
    role: str | None
    application: str | None
    state: str | None
    seconds: float | None

    def describe(self) -> str:
        parts = [f"role {self.role or '?'}"]
        if self.application:
            parts.append(f"application {self.application}")
        if self.state:
            parts.append(self.state + (f" for {self.seconds:.0f} s" if self.seconds is not None else ""))
        return f"pid {self.pid} ({', '.join(parts)})"


@dataclass
class Wait:
    lock: str
    blockers: list[Blocker]

    def describe(self) -> str:
        held = "; ".join(blocker.describe() for blocker in self.blockers)
        return f"{self.lock}, held by {held}"


# Every name and operator qualified: the watcher's session keeps the login's own search path.
WAITS = """
select pg_catalog.format('%%s on %%s', l.mode, case when l.relation is not null
                                                  then l.relation::pg_catalog.regclass::pg_catalog.text else l.locktype end),
       b.pid, b.usename::pg_catalog.text, b.application_name, b.state,
       extract(epoch from pg_catalog.now() operator(pg_catalog.-) coalesce(b.state_change, b.backend_start))::pg_catalog.float8
from pg_catalog.pg_locks as l
cross join lateral pg_catalog.unnest(pg_catalog.pg_blocking_pids(l.pid)) as blocking(pid)
left join pg_catalog.pg_stat_activity as b on b.pid operator(pg_catalog.=) blocking.pid
where l.pid operator(pg_catalog.=) %s and not l.granted
"""


class LockWatcher:
    """Watches, from a connection of its own, what the apply's session waits for and who holds it,
    so a lock_timeout can be reported in words (PostgreSQL's error names neither)."""

    def __init__(self, database_url: str, pid: int, options: dict) -> None:
        self._conn = psycopg.connect(database_url, autocommit=True, application_name="payrail-embedder db apply watcher", **options)
        self._pid = pid
        self._latest: Wait | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> LockWatcher:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._conn.close()

    def _run(self) -> None:
        try:
            while not self._stop.wait(0.05):
                rows = self._conn.execute(WAITS, (self._pid,)).fetchall()
                if rows:
                    self._latest = Wait(rows[0][0], [Blocker(*row[1:]) for row in rows])
        except psycopg.Error:
            return  # the server went away: the apply's own connection reports it

    def last_wait(self) -> Wait | None:
        """What the apply last waited for, since the previous call."""
        wait, self._latest = self._latest, None
        return wait


@dataclass
class ApplyResult(Report):
    database: str
    changed: bool
    # "shared": SHARE ROW EXCLUSIVE locks, which searches never wait for; "exclusive": ACCESS
    # EXCLUSIVE ones, for a change that needed them; None: nothing applied.
    locks: str | None = None
    files: int = 0
    upgrades: list[str] = field(default_factory=list)
    validated: list[str] = field(default_factory=list)
    checked_derived_rows: bool = False
    repaired_rows: int = 0
    attempts: int = 0
    seconds: float = 0.0
    deployment_id: int | None = None

    def to_json(self) -> dict:
        return {
            "database": self.database,
            "changed": self.changed,
            "locks": self.locks,
            "files": self.files,
            "upgrades": self.upgrades,
            "validatedConstraints": self.validated,
            "derivedRowsChecked": self.checked_derived_rows,
            "repairedDerivedRows": self.repaired_rows,
            "attempts": self.attempts,
            "seconds": round(self.seconds, 3),
        }

    def describe(self) -> list[str]:
        if not self.changed:
            return [f"{self.database}: the registry is current, nothing applied ({self.seconds:.2f} s)"]
        locks = "tables held exclusively for the change" if self.locks == "exclusive" else "searches never waited"
        details = [f"{self.files} files", locks]
        if self.upgrades:
            details.append(f"upgrade steps {', '.join(self.upgrades)}")
        if self.validated:
            details.append(f"{len(self.validated)} constraints validated")
        if self.checked_derived_rows:
            details.append(f"derived rows checked, {self.repaired_rows} repaired")
        return [f"applied db/ to {self.database}: changed ({'; '.join(details)}) in {self.seconds:.2f} s"]


class ApplyFailed(CodedError):
    """db apply gave up: the locks it needs stayed held for every attempt."""

    code = "unavailable"


def _with_attempts(watcher: LockWatcher, attempts: int, say: Callable[[str], None], what: str, work: Callable[[], T]) -> tuple[T, int]:
    """Runs work, a whole transaction with lock_timeout set, up to `attempts` times while it
    fails on a lock (lock_timeout, or a deadlock it gave way in), saying each time what held it.
    Returns work's result and the attempts it took."""
    for attempt in range(1, attempts + 1):
        try:
            return work(), attempt
        except psycopg.Error as error:
            if error.sqlstate not in (errcodes.LOCK_NOT_AVAILABLE, errcodes.DEADLOCK_DETECTED):
                raise
            wait = watcher.last_wait()
            waited = wait.describe() if wait else "a lock"
            if attempt == attempts:
                raise ApplyFailed(
                    f"{what}: gave up after {attempts} attempts, each waiting at most lock_timeout for {waited}. "
                    "Nothing of this step was changed; end that session or wait for it, then run db apply again"
                ) from error
            pause = min(5.0, 0.25 * 2 ** (attempt - 1)) * random.uniform(0.5, 1.5)
            cause = "gave way in a deadlock over" if error.sqlstate == errcodes.DEADLOCK_DETECTED else "waited for"
            say(f"{what}, attempt {attempt} of {attempts}: {cause} {waited}; trying again in {pause:.1f} s")
            time.sleep(pause)
    raise AssertionError("attempts must be at least 1")


def refuse_writable_search_path(conn: psycopg.Connection) -> None:
    """Raises 55000 when a role other than its owner, the deployer or a superuser can create objects
    in a schema on the registry's search path (payrail._refuse_writable_search_path, in
    db/schema/010): on every apply, a current registry's too, since a grant may come at any time.
    A registry from before the check gets it from 010, which every apply of it runs."""
    if one_value(conn.execute("select pg_catalog.to_regprocedure('payrail._refuse_writable_search_path()') is not null")):
        conn.execute("select payrail._refuse_writable_search_path()")


def _set_lock_timeout(conn: psycopg.Connection, seconds: float) -> None:
    conn.execute("select pg_catalog.set_config('lock_timeout', %s, true)", (f"{max(1, round(seconds * 1000))}ms",))


def _existing(conn: psycopg.Connection, tables: tuple[str, ...]) -> list[str]:
    return [t for t in tables if one_value(conn.execute("select pg_catalog.to_regclass(%s) is not null", (t,)))]


def apply_schema(
    database_url: str,
    *,
    force: bool = False,
    lock_timeout: float = LOCK_TIMEOUT_SECONDS,
    attempts: int = LOCK_ATTEMPTS,
    say: Callable[[str], None] = lambda message: None,
    prepared_statements: bool = True,
) -> ApplyResult:
    """Applies db/ to the database unless it is current (force: even then); see the module's doc.
    say receives, as it happens, what the apply waits for. prepared_statements: off behind a
    pooler that cannot carry them (the repair's batches repeat a statement, so does the watcher)."""
    started = time.perf_counter()
    files = sql_files()
    digest = db_digest(files)
    result = ApplyResult(display_url(database_url), changed=False, files=len(files))
    # Autocommit: every transaction below is a `with conn.transaction()` of its own.
    options = connection.psycopg_options(prepared_statements)
    with psycopg.connect(database_url, autocommit=True, application_name="payrail-embedder", **options) as conn:
        refuse_writable_search_path(conn)
        if force or schema_state(conn, digest)["applyDue"]:
            derivation = one_value(conn.execute(DERIVATION))
            with LockWatcher(database_url, conn.info.backend_pid, options) as watcher:
                applied, result.attempts = _with_attempts(
                    watcher, attempts, say, "applying db/", lambda: _run_files(conn, files, digest, force, lock_timeout, result, say)
                )
                if applied:
                    result.checked_derived_rows = force or one_value(conn.execute(DERIVATION)) != derivation
                    _follow_up(conn, watcher, result, lock_timeout, attempts, say)
    result.seconds = time.perf_counter() - started
    return result


def _run_files(conn, files: list[Path], digest: str, force: bool, lock_timeout: float, result: ApplyResult, say) -> bool:
    """db/ in one transaction, in shared mode first, then in exclusive mode when a change needs it
    (PYD01). False when another apply made the registry current meanwhile."""
    mode = "shared"
    while True:
        try:
            with conn.transaction():
                _set_lock_timeout(conn, lock_timeout)
                conn.execute("set local client_min_messages = warning")
                if _existing(conn, (DEPLOY_LOCK_TABLE,)):
                    conn.execute(f"lock table {DEPLOY_LOCK_TABLE} in exclusive mode")
                else:
                    conn.execute("select pg_catalog.pg_advisory_xact_lock(%s)", (FIRST_APPLY_LOCK_KEY,))
                if not force and not schema_state(conn, digest)["applyDue"]:
                    return False
                tables = ", ".join(_existing(conn, LOCK_ORDER))
                if tables:
                    # Shared first even for exclusive: it waits out writers and autovacuum while
                    # searches go on, so the exclusive lock then waits for running searches alone.
                    conn.execute(f"lock table only {tables} in share row exclusive mode")
                    if mode == "exclusive":
                        conn.execute(f"lock table only {tables} in access exclusive mode")
                for name, value in (("payrail.deploy_mode", mode), ("payrail.db_digest", digest), ("payrail.product_version", product_version())):
                    conn.execute("select pg_catalog.set_config(%s, %s, true)", (name, value))
                for path in files:
                    conn.execute(path.read_text(encoding="utf-8"))
                result.deployment_id, upgrades = one_row(conn.execute("select id, upgrades from payrail.deployments order by id desc limit 1"))
                result.upgrades = list(upgrades)
                # The files set the registry's search path (so psql can run one alone) and their
                # own notes (payrail.new_registry, ...) for the session; reset within this
                # transaction, so the server connection a pooler hands to its next client is as it
                # was. The statements before and after qualify every name.
                conn.execute("reset all")
            result.changed, result.locks = True, mode
            return True
        except psycopg.Error as error:
            if error.sqlstate != errcodes.EXCLUSIVE_LOCK_NEEDED or mode == "exclusive":
                raise
            say(f"{error.diag.message_primary}; applying again with exclusive locks")
            mode = "exclusive"


def _follow_up(conn, watcher: LockWatcher, result: ApplyResult, lock_timeout: float, attempts: int, say) -> None:
    """What reads every row, after the schema's transaction: constraints added NOT VALID are
    validated (SHARE UPDATE EXCLUSIVE: searches and edits go on), and where result says so, search's
    derived rows are repaired range by range (only rows that differ, each record locked FOR
    SHARE); then the apply is recorded as complete."""

    def in_transaction(statement: str, params=()) -> list[tuple]:
        def work():
            with conn.transaction():
                _set_lock_timeout(conn, lock_timeout)
                cursor = conn.execute(statement, params)
                return cursor.fetchall() if cursor.description else []

        return _with_attempts(watcher, attempts, say, "follow-up", work)[0]

    # The session's path holds no registry schema now: the statement names the table's, the report does not.
    for table, constraint in conn.execute(
        """select pg_catalog.quote_ident(t.relname), pg_catalog.quote_ident(c.conname)
           from pg_catalog.pg_constraint as c join pg_catalog.pg_class as t on t.oid operator(pg_catalog.=) c.conrelid
           where c.connamespace operator(pg_catalog.=) 'payrail'::pg_catalog.regnamespace and not c.convalidated order by 1, 2"""
    ).fetchall():
        in_transaction(f"alter table payrail.{table} validate constraint {constraint}")
        result.validated.append(f"{table}.{constraint}")
    for table, repair in DERIVED_TABLES if result.checked_derived_rows else ():
        if not _existing(conn, (table,)):
            continue
        low, high = one_row(
            conn.execute(
                f"""select least((select pg_catalog.min(id) from payrail.provider_methods),
                             (select pg_catalog.min(provider_method_id) from {table})),
                       greatest((select pg_catalog.max(id) from payrail.provider_methods),
                                (select pg_catalog.max(provider_method_id) from {table}))"""
            )
        )
        for first in range(low or 0, (high or -1) + 1, REPAIR_BATCH_IDS):
            rows = in_transaction(f"select {repair}(%s, %s)", (first, first + REPAIR_BATCH_IDS - 1))
            result.repaired_rows += rows[0][0]
    in_transaction("update payrail.deployments set completed_at = pg_catalog.now() where id operator(pg_catalog.=) %s", (result.deployment_id,))


# The one-time upgrade steps (db/upgrades/) run right after the schema file that keeps their record.
UPGRADES_AFTER = "012-deployments.sql"


def sql_dir() -> Path:
    """db/ of a source checkout, else the copy packaged inside the wheel."""
    package = Path(__file__).resolve().parents[1]
    checkout = package.parents[1] / "db"
    if (checkout / "install.sql").is_file():
        return checkout
    return package / "db"


def sql_files() -> list[Path]:
    """The files `db apply` runs, in order: db/schema/ then db/functions/, each by file name, with
    db/upgrades/ right after schema/012-deployments.sql (UPGRADES_AFTER)."""
    root = sql_dir()
    schema = sorted(root.glob("schema/*.sql"))
    split = [path.name for path in schema].index(UPGRADES_AFTER) + 1
    return schema[:split] + sorted(root.glob("upgrades/*.sql")) + schema[split:] + sorted(root.glob("functions/*.sql"))


# The group roles' own file: `db apply` runs it with the rest, `db roles` alone.
ROLES_FILE = Path("schema") / "005-roles.sql"
# What that file says of each role (a NOTICE each): the one channel a DO block has to report.
ROLE_NOTICE = re.compile(r"created role (?P<created>\S+)|role (?P<existing>\S+) exists")


@dataclass(frozen=True)
class Roles(Report):
    """`db roles`: the group roles it created, and those that existed already."""

    created: list[str] = field(default_factory=list)
    existing: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"created": self.created, "existing": self.existing}

    def describe(self) -> list[str]:
        return [f"created {role}" for role in self.created] + [f"{role} exists already" for role in self.existing]


def create_roles(database_url: str) -> Roles:
    """Creates the registry's group roles where they are missing, as `db apply` does, and nothing
    else: roles belong to the server, so a dump holds none, and a restore needs them first."""
    report = Roles()

    def record(notice: psycopg.errors.Diagnostic) -> None:
        said = ROLE_NOTICE.fullmatch(notice.message_primary or "")
        if said:
            (report.created if said["created"] else report.existing).append(said["created"] or said["existing"])

    with psycopg.connect(database_url, application_name="payrail-embedder") as conn:
        conn.add_notice_handler(record)
        with conn.transaction():
            # A server or role may hide notices by default; they are this file's report.
            conn.execute("set local client_min_messages = notice")
            conn.execute((sql_dir() / ROLES_FILE).read_text(encoding="utf-8"))
    return report
