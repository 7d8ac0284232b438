"""Soak: searches, edits and sync at the same time, with a checker that proves every answer right.

    ./scripts/benchmark soak [--seconds 300] [--records 200] [--json] [--database-url URL] [--postgres-version 18]

For --seconds (5 minutes by default), on one registry:
- 4 search clients ask name and semantic queries, each search in a REPEATABLE READ, read-only
  transaction: the search itself as payrail_agent, then, in the same snapshot, a check that
  every returned record is enabled, carries the vector of its current content (embedding hash
  equals content hash, by the registry's model, and the stored vector is the fake embedding of
  that content) and is returned with its stored fields; and that the answer is exactly the one
  the contract prescribes in that snapshot (the name path's order, or the exact cosine top 3
  computed with NumPy, equal distances aside: payrail_test_support.search_checker);
- 1 editor, one committed UPDATE at a time: toggles enabled, changes URLs, rewrites the guidance
  of drafts, runs disable -> edit guidance -> (sync) -> enable cycles, and checks that a content
  edit of an enabled record without a vector is refused; it logs every committed edit;
- a sync loop (`sync.sync`, as `payrail-embedder sync` runs it) every 0.2 s.
At the end, a final sync, then every record must carry the vector of its content, and
payrail.provider_method_history must hold, per record, exactly the versions the editor's log
says each committed edit replaced. Everything else is a violation.

The embedder is the tests' fake OpenAI server (payrail_test_support.openai_fake: real HTTP on
127.0.0.1), so the run measures the registry, not a model. The database is a throwaway embedded
PostgreSQL (unix socket) unless --database-url names a local one (unix socket or loopback) whose
registry is empty; db/ is applied to it. Clients are threads of this one process, each with its own
connection. Prints a table, or with --json a JSON summary; exits 1 on any violation or
unexpected error. Stops by itself: workers stop at the deadline, and a worker still busy 60 s
later counts as an unexpected error.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import threading
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import psycopg
from pgvector.psycopg import register_vector
from psycopg.rows import dict_row

from payrail_embedder.embedders import Embedder, OpenAIEmbedder, record_text
from payrail_embedder.postgres.deploy import apply_schema
from payrail_embedder.registry import catalog, sync
from payrail_embedder.registry.records import Line, ProviderMethod
from payrail_embedder.registry.search import embed_queries
from payrail_test_support.openai_fake import FAKE_MODEL, FakeOpenAI, fake_embedding
from payrail_test_support.search_checker import SEARCH_SQL, check_answer
from sync_throughput import WORDS

SEARCH_CLIENTS = 4
SYNC_INTERVAL = 0.2
# The fake answers at once; a real model takes a while, and edits land in that window.
SYNC_EMBEDDING_LATENCY = 0.05
EDIT_INTERVAL = 0.01
STOP_GRACE = 60.0
EXAMPLES_KEPT = 20

# Method names several providers share, so method-name queries meet the limit of 3.
SHARED_METHODS = ["Search", "Create a refund", "Get a quote"]

STATE_COLUMNS = "provider, method, urls, docs_url, guidance, enabled"


# --- the catalog ---------------------------------------------------------------------------------


def guidance_text(rng: random.Random, tag: str) -> str:
    return (
        f"Purpose: {' '.join(rng.choices(WORDS, k=4))} for agents.\n"
        f"Instructions: call the {rng.choice(WORDS)} endpoint with {' and '.join(rng.choices(WORDS, k=3))}.\n"
        f"Notes: {tag}; payment requirements go to the payment agent."
    )


def generated_catalog(count: int, rng: random.Random) -> list[ProviderMethod]:
    records = []
    for n in range(count):
        method = SHARED_METHODS[n % 3] if n % 10 == 0 else f"{rng.choice(WORDS).title()} method {n}"
        records.append(
            ProviderMethod(
                provider=f"Provider {n // 3:03d}",
                method=method,
                urls=[f"https://api.provider{n // 3:03d}.example/v1/{n}"],
                docs_url=f"https://docs.provider{n // 3:03d}.example/{n}",
                guidance=guidance_text(rng, f"record {n}"),
                enabled=n % 4 != 0,  # a quarter start as drafts
            )
        )
    return records


# --- shared tallies ------------------------------------------------------------------------------


@dataclass
class Tally:
    counts: Counter = field(default_factory=Counter)
    violations: list[str] = field(default_factory=list)
    violation_count: int = 0
    unexpected: list[str] = field(default_factory=list)
    unexpected_count: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, name: str, amount: int = 1) -> None:
        with self.lock:
            self.counts[name] += amount

    def violation(self, message: str) -> None:
        with self.lock:
            self.violation_count += 1
            if len(self.violations) < EXAMPLES_KEPT:
                self.violations.append(message)

    def error(self, worker: str, error: BaseException) -> None:
        with self.lock:
            self.unexpected_count += 1
            if len(self.unexpected) < EXAMPLES_KEPT:
                detail = "".join(traceback.format_exception_only(type(error), error)).strip()
                self.unexpected.append(f"{worker}: {detail}")


def connect(url: str, name: str, **kwargs) -> psycopg.Connection:
    # Bounded: no statement or lock wait can outlive the run by much.
    conn = psycopg.connect(url, application_name=f"payrail-soak-{name}", options="-c statement_timeout=20s -c lock_timeout=20s", **kwargs)
    register_vector(conn)
    return conn


def run_until(deadline: float, worker: str, tally: Tally, step) -> None:
    """Calls step() until the deadline; an exception is an unexpected error, counted, and the loop goes on."""
    while time.monotonic() < deadline:
        try:
            step()
        except Exception as error:
            tally.error(worker, error)
            time.sleep(0.1)


# --- search clients --------------------------------------------------------------


class SearchClient:
    def __init__(self, number: int, url: str, fake: FakeOpenAI, names: list[tuple[str, str]], tally: Tally, seed: int):
        self.name = f"search-{number}"
        self.conn = connect(url, self.name)
        self.conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        self.conn.read_only = True  # search is read-only: it would run on a hot standby too
        self.embedder = OpenAIEmbedder(FAKE_MODEL, api_key="soak", base_url=fake.base_url, timeout=10, max_retries=0)
        self.names = names
        self.tally = tally
        self.rng = random.Random(seed)

    def query(self) -> str:
        rng = self.rng
        if rng.random() < 0.5:
            return " ".join(rng.choices(WORDS, k=rng.randint(2, 5)))
        provider, method = rng.choice(self.names)
        text = rng.choice([provider, method, f"{provider} {method}", f"{provider} / {method}"])
        # Any case and spacing: the name path normalizes both.
        text = "".join(c.upper() if rng.random() < 0.3 else c for c in text).replace(" ", rng.choice([" ", "  ", "\t"]))
        return rng.choice(["", " "]) + text + rng.choice(["", "  "])

    def step(self) -> None:
        query = self.query()
        conn = self.conn
        vector = None
        with conn.transaction():
            # The agent's own role: it can call the search and nothing else.
            conn.execute("set local role payrail_agent")
            try:
                with conn.transaction():
                    rows = conn.execute(SEARCH_SQL, (query, None, None)).fetchall()
                path = "name"
            except psycopg.Error as error:
                if error.sqlstate != "PYE01":
                    raise
                vector = embed_queries(self.embedder, [query])[0]
                rows = conn.execute(SEARCH_SQL, (query, vector, FAKE_MODEL)).fetchall()
                path = "semantic"
            conn.execute("reset role")
            problems, near_tie = check_answer(conn, query, path, rows, vector)
        self.tally.add(f"searches_{path}")
        if near_tie:
            self.tally.add("near_ties")
        for problem in problems:
            self.tally.violation(f"{self.name} {path} {query!r}: {problem}")


# --- the editor ----------------------------------------------------------------------------------


class Editor:
    """One committed UPDATE at a time; logs the state each committed edit saved, per record."""

    def __init__(self, url: str, tally: Tally, seed: int):
        self.conn = connect(url, "editor", autocommit=True)
        self.tally = tally
        self.rng = random.Random(seed)
        self.counter = 0
        rows = self.conn.execute(f"select id, {STATE_COLUMNS} from payrail.provider_methods order by id").fetchall()
        # Per record: its state at the start, then after each committed edit.
        self.log: dict[int, list[tuple]] = {row[0]: [state(row[1:])] for row in rows}
        # Records in a disable -> edit guidance -> sync -> enable cycle, waiting for sync.
        self.awaiting_sync: set[int] = set()

    def current(self, record_id: int) -> tuple:
        return self.log[record_id][-1]

    def update(self, kind: str, sql: str, params: tuple) -> list[int]:
        rows = self.conn.execute(f"{sql} returning id, {STATE_COLUMNS}", params).fetchall()
        for row in rows:
            if state(row[1:]) == self.current(row[0]):
                # Nothing changed, so no version was replaced: history must not grow.
                self.tally.add("unchanged_updates")
                continue
            self.log[row[0]].append(state(row[1:]))
            self.tally.add("edits")
            self.tally.add(f"edits_{kind}")
        return [row[0] for row in rows]

    def pick(self, enabled: bool | None = None) -> int | None:
        candidates = [
            record_id for record_id, states in self.log.items() if record_id not in self.awaiting_sync and (enabled is None or states[-1][5] == enabled)
        ]
        return self.rng.choice(candidates) if candidates else None

    def step(self) -> None:
        self.counter += 1
        self.finish_cycles()
        roll = self.rng.random()
        if roll < 0.30:
            self.toggle()
        elif roll < 0.55:
            self.change_urls()
        elif roll < 0.75:
            self.rewrite_draft()
        elif roll < 0.90:
            self.start_cycle()
        else:
            self.probe_refused_edit()
        time.sleep(EDIT_INTERVAL)

    def toggle(self) -> None:
        record_id = self.pick()
        if record_id is None:
            return
        if self.current(record_id)[5]:
            self.update("disable", "update payrail.provider_methods set enabled = false where id = %s", (record_id,))
        elif not self.update(
            "enable",
            "update payrail.provider_methods set enabled = true where id = %s and embedding is not null",
            (record_id,),
        ):
            self.tally.add("enable_waits_for_sync")

    def change_urls(self) -> None:
        record_id = self.pick()
        if record_id is None:
            return
        urls = [f"https://api.example.com/{self.rng.choice(WORDS)}/{self.counter}/{n}" for n in range(self.rng.randint(0, 3))]
        docs_url = self.rng.choice([None, f"https://docs.example.com/{self.counter}"])
        self.update("urls", "update payrail.provider_methods set urls = %s, docs_url = %s where id = %s", (urls, docs_url, record_id))

    def rewrite_draft(self) -> None:
        record_id = self.pick(enabled=False)
        if record_id is None:
            return
        self.update(
            "draft_guidance",
            "update payrail.provider_methods set guidance = %s where id = %s and not enabled",
            (guidance_text(self.rng, f"draft edit {self.counter}"), record_id),
        )

    def start_cycle(self) -> None:
        record_id = self.pick(enabled=True)
        if record_id is None:
            return
        guidance = guidance_text(self.rng, f"cycle {self.counter}")
        if self.rng.random() < 0.5:  # disable and edit in one UPDATE, as the hint says
            self.update(
                "cycle_disable_and_edit",
                "update payrail.provider_methods set enabled = false, guidance = %s where id = %s",
                (guidance, record_id),
            )
        else:
            self.update("cycle_disable", "update payrail.provider_methods set enabled = false where id = %s", (record_id,))
            self.update("cycle_edit", "update payrail.provider_methods set guidance = %s where id = %s", (guidance, record_id))
        self.awaiting_sync.add(record_id)

    def finish_cycles(self) -> None:
        if not self.awaiting_sync:
            return
        # Enabled only once sync gave it a vector of its new content (the rules refuse it before).
        done = self.update(
            "cycle_enable",
            "update payrail.provider_methods set enabled = true where id = any(%s) and embedding is not null and embedding_content_hash = content_hash",
            (sorted(self.awaiting_sync),),
        )
        self.awaiting_sync -= set(done)
        self.tally.add("cycles_completed", len(done))

    def probe_refused_edit(self) -> None:
        """A content edit of an enabled record without a fresh vector must be refused."""
        record_id = self.pick(enabled=True)
        if record_id is None:
            return
        try:
            saved = self.update(
                "refused_probe_saved",
                "update payrail.provider_methods set guidance = guidance || ' (unsynced edit)' where id = %s",
                (record_id,),
            )
        except psycopg.errors.CheckViolation as error:
            if error.diag.constraint_name != "provider_methods_enabled_needs_embedding_check":
                raise
            self.tally.add("refused_as_expected")
            return
        if saved:
            self.tally.violation(f"editor: a guidance edit of enabled record {record_id} without a vector was saved")


def state(row) -> tuple:
    provider, method, urls, docs_url, guidance, enabled = row
    return (provider, method, tuple(urls), docs_url, guidance, enabled)


# --- sync loop -----------------------------------------------------------------------------------


class SlowEmbedder(Embedder):
    """The fake, as slow as a real model: the editor's edits land between sync's read and its write."""

    def __init__(self, embedder: OpenAIEmbedder):
        self.embedder = embedder
        self.model_name = embedder.model_name
        self.batch_size = embedder.batch_size

    def embed(self, texts):
        vectors = self.embedder.embed(texts)
        time.sleep(SYNC_EMBEDDING_LATENCY)
        return vectors


class SyncLoop:
    def __init__(self, url: str, fake: FakeOpenAI, tally: Tally):
        self.conn = connect(url, "sync", autocommit=True)
        self.embedder = SlowEmbedder(OpenAIEmbedder(FAKE_MODEL, api_key="soak", base_url=fake.base_url, timeout=10, max_retries=0))
        self.tally = tally

    def step(self) -> None:
        report = sync.sync(self.conn, self.embedder)
        self.tally.add("syncs")
        self.tally.add("sync_embedded", report.embedded)
        self.tally.add("sync_changed_meanwhile", report.changed_meanwhile)
        if report.error:
            raise RuntimeError(f"sync failed: {report.error}")
        time.sleep(SYNC_INTERVAL)


# --- the run -------------------------------------------------------------------------------------


def seed_registry(url: str, fake: FakeOpenAI, count: int, rng: random.Random) -> list[tuple[str, str]]:
    apply_schema(url)
    with psycopg.connect(url) as conn:
        existing = conn.execute("select count(*) from payrail.provider_methods").fetchone()[0]
    if existing:
        raise SystemExit(f"soak.py needs an empty registry; this one holds {existing} records")
    records = generated_catalog(count, rng)
    embedder = OpenAIEmbedder(FAKE_MODEL, api_key="soak", base_url=fake.base_url)
    with psycopg.connect(url, autocommit=True) as conn:
        register_vector(conn)
        report = catalog.import_records(conn, lambda: embedder, [Line("soak", n, r) for n, r in enumerate(records, 1)])
    assert report.saved and report.created == count, report.to_json()
    return [(r.provider, r.method) for r in records]


def final_checks(url: str, fake: FakeOpenAI, editor: Editor, tally: Tally) -> dict:
    """After the clients stopped: one more sync, then every vector and the whole history."""
    with connect(url, "final", autocommit=True) as conn:
        embedder = OpenAIEmbedder(FAKE_MODEL, api_key="soak", base_url=fake.base_url)
        report = sync.sync(conn, embedder)
        if report.error or report.pending:
            tally.violation(f"final sync did not converge: {report.to_json()}")
        cursor = conn.cursor(row_factory=dict_row)
        records = cursor.execute(
            f"""
            select pm.id, {STATE_COLUMNS}, pm.embedding, pm.embedding_model, m.name as registry_model,
                   pm.embedding_content_hash = pm.content_hash as hash_current
            from payrail.provider_methods as pm left join payrail.embedding_model as m on true
            order by pm.id
            """
        ).fetchall()
        for r in records:
            label = f"record {r['id']} ({r['provider']} / {r['method']})"
            if r["embedding"] is None or not r["hash_current"] or r["embedding_model"] != r["registry_model"]:
                tally.violation(f"final: {label} has no vector of its current content")
            elif not np.allclose(r["embedding"].to_numpy(), fake_embedding(record_text(r["provider"], r["method"], r["guidance"])), atol=1e-6):
                tally.violation(f"final: the vector of {label} was not made from its content")
        history: dict[int, list[tuple]] = {}
        for row in conn.execute(f"select provider_method_id, operation, {STATE_COLUMNS} from payrail.provider_method_history order by id").fetchall():
            if row[1] != "update":
                tally.violation(f"history: unexpected {row[1]} of record {row[0]}")
            history.setdefault(row[0], []).append(state(row[2:]))
    current = {r["id"]: state([r[c] for c in ("provider", "method", "urls", "docs_url", "guidance", "enabled")]) for r in records}
    for record_id, states in editor.log.items():
        # Each committed edit replaced the state before it: history holds exactly those, in order.
        if history.get(record_id, []) != states[:-1]:
            tally.violation(
                f"history of record {record_id}: {len(history.get(record_id, []))} entries for {len(states) - 1} "
                "committed edits, or other versions than the ones replaced"
            )
        if current.get(record_id) != states[-1]:
            tally.violation(f"record {record_id} is not in the state of its last committed edit")
    unknown = set(history) - set(editor.log)
    if unknown:
        tally.violation(f"history of records nobody edited: {sorted(unknown)}")
    return {"records": len(records), "history_entries": sum(len(v) for v in history.values())}


def soak(url: str, seconds: float, record_count: int, seed: int = 7) -> dict:
    tally = Tally()
    fake = FakeOpenAI().start()
    try:
        rng = random.Random(seed)
        names = seed_registry(url, fake, record_count, rng)
        with psycopg.connect(url) as conn:
            server_version = conn.execute("show server_version").fetchone()[0]
        clients = [SearchClient(n, url, fake, names, tally, seed + n) for n in range(SEARCH_CLIENTS)]
        editor = Editor(url, tally, seed + 100)
        syncer = SyncLoop(url, fake, tally)
        started = time.monotonic()
        deadline = started + seconds
        threads = [threading.Thread(target=run_until, args=(deadline, c.name, tally, c.step), daemon=True) for c in clients]
        threads.append(threading.Thread(target=run_until, args=(deadline, "editor", tally, editor.step), daemon=True))
        threads.append(threading.Thread(target=run_until, args=(deadline, "sync", tally, syncer.step), daemon=True))
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=max(0.0, deadline + STOP_GRACE - time.monotonic()))
        elapsed = time.monotonic() - started
        stuck = [t for t in threads if t.is_alive()]
        for _ in stuck:
            tally.error("run", TimeoutError(f"a worker was still busy {STOP_GRACE:g} s after the deadline"))
        final = final_checks(url, fake, editor, tally) if not stuck else {"records": None, "history_entries": None}
        if not stuck:
            for worker in [*clients, editor, syncer]:
                worker.conn.close()
    finally:
        fake.stop()
    counts = tally.counts
    searches = counts["searches_name"] + counts["searches_semantic"]
    return {
        "seconds": round(elapsed, 1),
        "postgres": server_version,
        "records": final["records"],
        "clients": {"search": SEARCH_CLIENTS, "edit": 1, "sync": 1},
        "searches": searches,
        "searches_per_second": round(searches / elapsed, 1),
        "name_path": counts["searches_name"],
        "semantic_path": counts["searches_semantic"],
        "near_ties": counts["near_ties"],
        "unchanged_updates": counts["unchanged_updates"],
        "edits": counts["edits"],
        "edits_by_kind": {k.removeprefix("edits_"): v for k, v in sorted(counts.items()) if k.startswith("edits_")},
        "cycles_completed": counts["cycles_completed"],
        "enable_waits_for_sync": counts["enable_waits_for_sync"],
        "refused_as_expected": counts["refused_as_expected"],
        "syncs": counts["syncs"],
        "sync_embedded": counts["sync_embedded"],
        "sync_changed_meanwhile": counts["sync_changed_meanwhile"],
        "history_entries": final["history_entries"],
        "violations": tally.violation_count,
        "violation_examples": tally.violations,
        "unexpected_errors": tally.unexpected_count,
        "unexpected_error_examples": tally.unexpected,
    }


def check_local(url: str) -> None:
    """Loopback and unix sockets only: this script writes thousands of edits."""
    hosts = (psycopg.conninfo.conninfo_to_dict(url).get("host") or "").split(",")
    if not all(h == "" or h.startswith("/") or h in ("localhost", "127.0.0.1", "::1") for h in hosts):
        raise SystemExit(f"soak.py runs against a local server only (unix socket or loopback), not {hosts}")


def print_table(summary: dict) -> None:
    print(
        f"soak: {summary['seconds']} s, PostgreSQL {summary['postgres']}, {summary['records']} records, "
        f"{SEARCH_CLIENTS} search clients, 1 editor, 1 sync loop; not analyzed by the benchmark (autovacuum on, as a server runs)\n"
    )
    print("| measure | value |")
    print("|---|---:|")
    rows = [
        ("searches (checked)", summary["searches"]),
        ("searches per second", summary["searches_per_second"]),
        ("  by name / semantic", f"{summary['name_path']} / {summary['semantic_path']}"),
        ("  equal distances (within float32 rounding) in another order", summary["near_ties"]),
        ("edits committed", summary["edits"]),
        *((f"  {kind}", count) for kind, count in summary["edits_by_kind"].items()),
        ("updates that changed nothing (no version)", summary["unchanged_updates"]),
        ("disable-edit-sync-enable cycles completed", summary["cycles_completed"]),
        ("unsynced edits of enabled records refused", summary["refused_as_expected"]),
        ("syncs", summary["syncs"]),
        ("  records embedded by sync", summary["sync_embedded"]),
        ("  records edited while sync embedded them (embedded again)", summary["sync_changed_meanwhile"]),
        ("history entries (all accounted for)", summary["history_entries"]),
        ("violations", summary["violations"]),
        ("unexpected errors", summary["unexpected_errors"]),
    ]
    for name, value in rows:
        print(f"| {name} | {value} |")
    for example in summary["violation_examples"] + summary["unexpected_error_examples"]:
        print(f"- {example}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=300.0, help="how long the clients run (default 300)")
    parser.add_argument("--records", type=int, default=200, help="records in the generated catalog (default 200)")
    parser.add_argument("--json", action="store_true", help="print a JSON summary instead of the table")
    parser.add_argument("--database-url", help="a local database with an empty registry (default: a throwaway one)")
    parser.add_argument("--postgres-version", type=int, choices=(16, 18), default=18, help="of the throwaway server")
    args = parser.parse_args()

    if args.database_url:
        check_local(args.database_url)
        summary = soak(args.database_url, args.seconds, args.records)
    else:
        from throwaway_postgres import throwaway_postgres

        with throwaway_postgres(args.postgres_version) as server:
            summary = soak(server.registry("soak"), args.seconds, args.records)
    if args.json:
        print(json.dumps(summary))
    else:
        print_table(summary)
    sys.exit(1 if summary["violations"] or summary["unexpected_errors"] else 0)


if __name__ == "__main__":
    main()
