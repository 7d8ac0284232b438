"""What sign-in attempts and oversized uploads cost the backoffice. Not a test: it prints tables.

    ./scripts/benchmark backoffice_limits [--sizes 20,100] [--attempts 30] [--cli PATH]

What it does:
- starts its own throwaway embedded PostgreSQL 18 in a temporary directory with the embedded
  default's pg_hba.conf (every login but postgres gives its password), applies db/, makes ten
  operator logins as `payrail-embedder operator add` does, and deletes everything when it ends;
- runs `payrail-embedder backoffice` as a subprocess (--cli: another checkout's, to measure it
  before a change) and times failed sign-ins, alternating a known role with a wrong password and
  a role that does not exist, each at most 3 times per name (below the throttle's lock): both
  should take the same path through PostgreSQL, and so the same time;
- signs in and uploads, for each of --sizes, a one-line catalog of that many MB (sent in 1 MB
  chunks, so the client holds none of it) to the Import page, and reports the answer's status,
  the time until it came, and how much the backoffice's peak memory (VmHWM, reset before each
  upload through /proc/PID/clear_refs) grew.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import tempfile
import time
from pathlib import Path

from agent_latency import percentile
from backoffice_latency import CLI, OPERATOR_LOGIN, Browser, start_backoffice, token_of, with_operator_login
from payrail_embedder.postgres import connection, logins
from throwaway_postgres import throwaway_postgres

KNOWN_ROLES = [f"bench_role_{n}" for n in range(10)]
BOUNDARY = "payrailbenchboundary"


def failed_sign_in_ms(base_url: str, role: str) -> float:
    browser = Browser(base_url)
    _, page, _ = browser.request("GET", "/sign-in")
    started = time.perf_counter()
    status, text, _ = browser.request("POST", "/sign-in", {"csrf_token": token_of(page), "username": role, "password": "a wrong password"})
    elapsed = (time.perf_counter() - started) * 1000
    assert status == 403, (role, status, text)
    return elapsed


def peak_rss_mb(pid: int) -> float:
    return int(re.search(r"^VmHWM:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text(), flags=re.M).group(1)) / 1000


def upload(base_url: str, megabytes: int) -> tuple[int, float]:
    """Signs in and posts a one-line catalog of megabytes MB to /import; (status, seconds)."""
    browser = Browser(base_url)
    _, page, _ = browser.request("GET", "/sign-in")
    login, password = OPERATOR_LOGIN
    browser.request("POST", "/sign-in", {"csrf_token": token_of(page), "username": login, "password": password})
    _, import_page, _ = browser.request("GET", "/import")
    head = (
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="csrf_token"\r\n\r\n{token_of(import_page)}\r\n'
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="one-line.jsonl"\r\n'
        'Content-Type: application/x-ndjson\r\n\r\n{"provider": "Big", "method": "Line", "guidance": "'
    ).encode()
    tail = f'"}}\n\r\n--{BOUNDARY}--\r\n'.encode()
    chunk = b"x" * 1_000_000
    conn = browser.conn
    conn.putrequest("POST", "/import")
    conn.putheader("Content-Type", f"multipart/form-data; boundary={BOUNDARY}")
    conn.putheader("Content-Length", str(len(head) + megabytes * len(chunk) + len(tail)))
    conn.putheader("Origin", browser.origin)
    conn.putheader("Cookie", "; ".join(f"{k}={v}" for k, v in browser.cookies.items()))
    conn.endheaders()
    started = time.perf_counter()
    try:
        conn.send(head)
        for _ in range(megabytes):
            conn.send(chunk)
        conn.send(tail)
    except (BrokenPipeError, ConnectionResetError):
        pass  # closed early: the answer, if any, is what counts
    response = conn.getresponse()
    response.read()
    return response.status, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="20,100", help="upload sizes in MB, comma-separated")
    parser.add_argument("--attempts", type=int, default=30, help="failed sign-ins of each kind (at most 30)")
    parser.add_argument("--cli", type=Path, default=CLI, help="the payrail-embedder to run (another checkout's, to compare)")
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]

    with throwaway_postgres(18) as server, tempfile.TemporaryDirectory(prefix="payrail-bench-log-") as logs:
        url = server.registry("payrail_bench")
        with_operator_login(server, url)
        with connection.connect(url, autocommit=True) as conn:
            for role in KNOWN_ROLES:
                logins.add_operator(conn, role, "the right passphrase")
        process, base_url = start_backoffice(url, Path(logs) / "backoffice.log", cli=args.cli)
        try:
            failed_sign_in_ms(base_url, "warm_up")
            known, unknown = [], []
            for attempt in range(min(args.attempts, 3 * len(KNOWN_ROLES))):
                known.append(failed_sign_in_ms(base_url, KNOWN_ROLES[attempt % len(KNOWN_ROLES)]))
                unknown.append(failed_sign_in_ms(base_url, f"no_such_role_{attempt}"))
            uploads = []
            for megabytes in sizes:
                Path(f"/proc/{process.pid}/clear_refs").write_text("5")  # resets VmHWM to the current RSS
                before = peak_rss_mb(process.pid)
                status, seconds = upload(base_url, megabytes)
                uploads.append((megabytes, status, seconds, peak_rss_mb(process.pid) - before))
        finally:
            process.terminate()
            process.wait(30)

    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    print(f"backoffice {args.cli}; {os.cpu_count()} CPUs (load average {load}); embedded PostgreSQL 18, scram-sha-256")
    print(f"\n{'failed sign-in':<34} {'n':>4} {'p50 ms':>8} {'p90 ms':>8}")
    for name, samples in (("known role, wrong password", known), ("role that does not exist", unknown)):
        print(f"{name:<34} {len(samples):>4} {statistics.median(samples):>8.1f} {percentile(samples, 0.9):>8.1f}")
    print(f"\n{'one-line upload':<16} {'status':>6} {'seconds':>8} {'peak memory +MB':>16}")
    for megabytes, status, seconds, growth in uploads:
        print(f"{f'{megabytes} MB':<16} {status:>6} {seconds:>8.2f} {growth:>16.0f}")


if __name__ == "__main__":
    main()
