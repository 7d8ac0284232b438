"""What an attacker holding half-open connections costs `mcp --http`'s agents and log. Not a test: it prints a table.

    ./scripts/benchmark http_door [--connections 1100] [--seconds 60] [--max-connections 1000] [--cli PATH]

What it does:
- starts its own throwaway embedded PostgreSQL 18 in a temporary directory with a small registry
  (records found by name, so no embedding service is involved), and deletes everything when it ends;
- runs `payrail-embedder mcp --http PORT --token-file FILE` as a subprocess (--cli: another
  checkout's, to measure it before a change) with a soft limit of 1,024 open files, a common
  default, and its log (standard error) written to a file;
- asks as an agent with a token (GET /search of an exact name, on a new connection each time,
  a 10 s deadline) once a second for 10 s: the baseline;
- then, for --seconds, holds --connections half-open connections as an attacker would: each
  sends a request line and a header, never the blank line that ends them, and is opened again as
  soon as the server closes it (it makes room for newer ones, or the head's deadline ends it);
  meanwhile the agent asks once a second, and the log's growth is measured;
- prints, for each phase, the agent's answers (how many were 200), their median and slowest
  time, the log's growth in bytes per minute, the most files the server held open, the CPU it
  used (% of one core), and how many connections the attacker had to open again.
"""

from __future__ import annotations

import argparse
import os
import resource
import secrets
import selectors
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import psycopg

from throwaway_postgres import throwaway_postgres

CLI = Path(sys.executable).parent / "payrail-embedder"
QUERY = "Acme"
MODEL = "door-benchmark"
DEFAULT_OPEN_FILES = 1024
AGENT_DEADLINE = 10.0


def seed(url: str) -> None:
    with psycopg.connect(url) as conn:
        conn.execute("select payrail.set_embedding_model(%(model)s, 3)", {"model": MODEL})
        conn.execute(
            """
            insert into payrail.provider_methods
              (provider, method, guidance, enabled, embedding, embedding_model, embedding_content_hash)
            select 'Acme', 'Method ' || n, 'Purpose: benchmark record.', true, '[1,0,0]', %(model)s,
                   payrail._content_hash('Acme', 'Method ' || n, 'Purpose: benchmark record.')
            from generate_series(1, 3) as n
            """,
            {"model": MODEL},
        )


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_server(cli: Path, url: str, token_file: Path, log: Path, port: int, max_connections: int | None) -> subprocess.Popen:
    def default_open_files() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (DEFAULT_OPEN_FILES, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))

    # An OpenAI model of the registry's name: never asked (exact names need no embedding), and the
    # server's warm-up searches nothing with a remote backend.
    env = {
        "PAYRAIL_DATABASE_URL": url,
        "PAYRAIL_EMBEDDER": "openai",
        "PAYRAIL_EMBEDDING_MODEL": MODEL,
        "OPENAI_API_KEY": "never-used",
        "PATH": os.environ["PATH"],
    }
    cap = ["--max-connections", str(max_connections)] if max_connections else []
    with log.open("w") as output:
        process = subprocess.Popen(
            [str(cli), "mcp", "--http", str(port), "--token-file", str(token_file), *cap],
            env=env,
            stdout=output,
            stderr=output,
            preexec_fn=default_open_files,
        )
    deadline = time.monotonic() + 90
    while "serving MCP" not in log.read_text():
        if process.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"mcp --http did not start: {log.read_text()}")
        time.sleep(0.1)
    return process


def ask(port: int, token: str) -> tuple[int | str, float]:
    """The agent's question: its status (or what failed) and the seconds it took."""
    request = urllib.request.Request(f"http://127.0.0.1:{port}/search?query={QUERY}", headers={"Authorization": f"Bearer {token}"})
    started = time.perf_counter()
    try:
        with urllib.request.urlopen(request, timeout=AGENT_DEADLINE) as response:
            response.read()
            status: int | str = response.status
    except urllib.error.HTTPError as error:
        status = error.code
    except OSError as error:
        status = type(error).__name__
    return status, time.perf_counter() - started


class Attacker:
    """Connections that never finish their request's head, each opened again once the server closes it."""

    def __init__(self, port: int, connections: int) -> None:
        self.port = port
        self.selector = selectors.DefaultSelector()
        self.reopened = 0
        self.failed = 0
        for _ in range(connections):
            self.open()

    def open(self) -> None:
        try:
            sock = socket.create_connection(("127.0.0.1", self.port), timeout=5)
            sock.sendall(f"GET /search?query={QUERY} HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\n".encode())
        except OSError:
            self.failed += 1
            return
        sock.setblocking(False)
        self.selector.register(sock, selectors.EVENT_READ)

    def hold(self, seconds: float) -> None:
        """Opens again, for `seconds`, every connection the server closes."""
        until = time.monotonic() + seconds
        while (left := until - time.monotonic()) > 0:
            for key, _ in self.selector.select(timeout=min(left, 0.2)):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                try:
                    if sock.recv(4096):
                        continue  # an answer before the close (a 503)
                except OSError:
                    pass
                self.selector.unregister(sock)
                sock.close()
                self.reopened += 1
                self.open()

    def close(self) -> None:
        for key in list(self.selector.get_map().values()):
            sock = key.fileobj
            assert isinstance(sock, socket.socket)
            sock.close()
        self.selector.close()


def open_files(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def cpu_seconds(pid: int) -> float:
    """The CPU time the process has used, in user and system mode."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def phase(port: int, token: str, pid: int, log: Path, seconds: float, attacker: Attacker | None) -> dict:
    """The agent asks once a second for `seconds` while the attacker (if any) holds its connections."""
    answers, most_files = [], open_files(pid)
    log_before, cpu_before, started = log.stat().st_size, cpu_seconds(pid), time.monotonic()
    while time.monotonic() - started < seconds:
        answers.append(ask(port, token))
        most_files = max(most_files, open_files(pid))
        if attacker is not None:
            attacker.hold(max(0.0, 1.0 - answers[-1][1]))
        else:
            time.sleep(max(0.0, 1.0 - answers[-1][1]))
    elapsed = time.monotonic() - started
    times = [t * 1000 for _, t in answers]
    return {
        "answered": sum(status == 200 for status, _ in answers),
        "asked": len(answers),
        "p50": statistics.median(times),
        "max": max(times),
        "log_per_minute": (log.stat().st_size - log_before) * 60 / elapsed,
        "files": most_files,
        "cpu": (cpu_seconds(pid) - cpu_before) * 100 / elapsed,
        "other": sorted({str(status) for status, _ in answers if status != 200}),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--connections", type=int, default=1100, help="half-open connections the attacker holds")
    parser.add_argument("--seconds", type=float, default=60, help="how long the attacker holds them")
    parser.add_argument("--max-connections", type=int, default=None, help="the server's --max-connections (its default if not given)")
    parser.add_argument("--cli", type=Path, default=CLI, help="the payrail-embedder to run (another checkout's, to compare)")
    args = parser.parse_args()
    # The attacker's own sockets, beside this process's other files.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, args.connections + 256)), hard))

    with throwaway_postgres() as postgres, tempfile.TemporaryDirectory(prefix="payrail-door-") as root:
        url = postgres.registry("door")
        seed(url)
        token = secrets.token_hex(32)
        token_file = Path(root) / "agent-tokens"
        token_file.write_text(f"bench-agent {token}\n")
        token_file.chmod(0o600)
        log, port = Path(root) / "mcp.log", free_port()
        server = start_server(args.cli, url, token_file, log, port, args.max_connections)
        try:
            rows = [("no attacker", phase(port, token, server.pid, log, 10, None))]
            attacker = Attacker(port, args.connections)
            try:
                attacked = phase(port, token, server.pid, log, args.seconds, attacker)
            finally:
                attacker.close()
            rows.append((f"{args.connections:,} half-open", attacked))
            time.sleep(1)
            rows.append(("after", phase(port, token, server.pid, log, 10, None)))
            refusals = [line for line in log.read_text(errors="replace").splitlines() if "event=http_refused" in line]
        finally:
            server.terminate()
            server.wait(timeout=60)

    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    cap = f"--max-connections {args.max_connections}" if args.max_connections else "its default --max-connections"
    print(f"mcp --http {args.cli} with {cap}, started with a soft limit of {DEFAULT_OPEN_FILES:,} open files; {os.cpu_count()} CPUs (load average {load})")
    print(f"\n{'phase':<18} {'agent 200/asked':>15} {'p50 ms':>8} {'max ms':>8} {'log bytes/min':>14} {'open files':>11} {'server CPU %':>13}  other answers")
    for name, row in rows:
        print(
            f"{name:<18} {row['answered']:>7}/{row['asked']:<7} {row['p50']:>8.1f} {row['max']:>8.1f} {row['log_per_minute']:>14,.0f} {row['files']:>11,} {row['cpu']:>13.0f}  "
            f"{', '.join(row['other']) or '-'}"
        )
    print(f"\nthe attacker opened {attacker.reopened:,} connections again after the server closed them ({attacker.failed:,} could not connect)")
    print("the server's http_refused lines:")
    for line in refusals:
        print(f"  {line}")


if __name__ == "__main__":
    main()
