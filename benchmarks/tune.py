"""Tuning the local model on the benchmark's dev queries: what it gains on providers the tuning never
saw, with paired bootstrap intervals, and what it costs at 300, 1,000 and 5,000 golden queries.

    ./scripts/benchmark tune [--eval-dir benchmarks/data] [--validation-fraction 0.3] [--seed 0]
                             [--epochs 2] [--threads 1] [--sizes 300,1000,5000]

Starts a throwaway embedded PostgreSQL 18 and imports records.jsonl through the product's import
path with the bundled model, every record enabled (as benchmarks/quality.py does).

Quality: `model tune`'s own code (tuning.tune) on queries-dev.jsonl, split by provider: the
validation queries name only providers no training query names. eval's metrics on them before
(the bundled model, through the SQL search path) and after (the tuned model, ranked in memory as
`eval --compare` ranks it), on all of them and on those that name no relevant provider, with the
paired difference's 95% interval (10,000 bootstrap resamples of the queries, seeded). A check
first: ranked in memory, the bundled model gives exactly the SQL path's answers.

Cost: `payrail-embedder model tune GOLDEN --json` in a new process per golden set, its peak
resident memory (wait4) and its own report (pairs, steps, the time it expected, training and
total seconds). A golden set of N queries is the dev queries, then queries made from records:
each record's Purpose sentence, and "METHOD (CATEGORY API)", in a seeded order, each with its
record as the one relevant record. Those measure time and memory only: a record's own sentence
says nothing of quality. One thread by default: on this shared 2-core machine, torch's two threads
spin against the other work and train slower than one.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from payrail_embedder import evaluation, tuning
from payrail_embedder.database import connect
from payrail_embedder.embedders import LocalEmbedder
from payrail_test_support import CLI
from quality import DEFAULT_EVAL_DIR, benchmark_data, imported_registry, names_a_relevant_provider, print_table
from throwaway_postgres import throwaway_postgres

SHOWN = ("hit@1", "hit@3", "mrr@3")
RESAMPLES = 10_000
COST_HEADERS = ("golden queries", "training pairs", "steps", "expected min", "training min", "command min", "command CPU min", "peak RSS MiB")


def paired_interval(before: np.ndarray, after: np.ndarray, seed: int) -> tuple[float, float, float]:
    """The mean of after - before over the queries and its 95% percentile bootstrap interval."""
    difference = after - before
    samples = np.random.default_rng(seed).integers(0, len(difference), size=(RESAMPLES, len(difference)))
    means = difference[samples].mean(axis=1)
    return float(difference.mean()), float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def comparison_rows(before: evaluation.EvaluationReport, after: evaluation.EvaluationReport, indexes: list[int], seed: int) -> list[tuple]:
    rows = []
    for metric in SHOWN:
        old = np.array([before.per_query[i][metric] for i in indexes])
        new = np.array([after.per_query[i][metric] for i in indexes])
        change, low, high = paired_interval(old, new, seed)
        rows.append((metric, float(old.mean()), float(new.mean()), f"{change:+.3f}", f"[{low:+.3f}, {high:+.3f}]"))
    return rows


def synthesized_queries(records: list[dict], seed: int) -> list[dict]:
    """Queries made from records (their Purpose sentence; "METHOD (CATEGORY API)"), seeded order."""
    made = []
    for record in records:
        relevant = [[record["provider"], record["method"]]]
        purpose = re.search(r"^Purpose: (.+)$", record["guidance"], flags=re.M)
        category = re.search(r"Category: ([^.]+)\.", record["guidance"])
        if purpose:
            made.append({"query": purpose.group(1)[:2000], "relevant": relevant})
        made.append({"query": f"{record['method']} ({category.group(1) if category else 'any'} API)", "relevant": relevant})
    random.Random(seed).shuffle(made)
    return made


def golden_set(size: int, dev: list[dict], made: list[dict]) -> list[dict]:
    return (dev + made)[:size]


def peak_resident_mib(pid: int) -> float:
    """The process's peak resident memory so far (VmHWM). Not wait4's ru_maxrss: that keeps the
    peak of the forking parent's memory across exec, which here would be the benchmark's own."""
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"^VmHWM:\s+(\d+) kB", status, flags=re.M).group(1)) / 1024


def cpu_seconds(pid: int) -> float:
    """The process's user and system CPU time so far (/proc/PID/stat): on a shared machine, what the
    command costs whatever else runs."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_tune_process(env: dict, golden: Path, options: list[str]) -> tuple[dict, float, float, float]:
    """`model tune GOLDEN --json` in a new process: its report, wall seconds, CPU seconds and peak
    resident MiB (read every 0.2 s until it exits: both only grow, so the last reading is within
    its last 0.2 s)."""
    started = time.perf_counter()
    peak = cpu = 0.0
    with tempfile.TemporaryFile("w+") as output:
        process = subprocess.Popen([str(CLI), "model", "tune", str(golden), "--json", *options], env=env, stdout=output, stderr=subprocess.DEVNULL)
        while process.poll() is None:
            try:
                peak, cpu = max(peak, peak_resident_mib(process.pid)), cpu_seconds(process.pid)
            except (OSError, AttributeError):  # exited between poll and read, or not yet readable
                pass
            time.sleep(0.2)
        seconds = time.perf_counter() - started
        output.seek(0)
        text = output.read()
    if process.returncode not in (0, 2):  # 2: a model that does not beat the bundled one, not kept
        sys.exit(f"model tune failed (exit {process.returncode}): {text}")
    return json.loads(text), seconds, cpu, peak


def show_progress(step: int, steps: int) -> None:
    if step and (step % 10 == 0 or step == steps):
        print(f"step {step}/{steps}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--eval-dir", type=Path, default=DEFAULT_EVAL_DIR, help="holds records.jsonl, queries-dev.jsonl")
    parser.add_argument("--validation-fraction", type=float, default=0.3, help="share of the dev queries kept aside, by provider")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1, help="CPU threads to train on")
    parser.add_argument("--sizes", default="300,1000,5000", help="golden set sizes whose cost is measured ('' for none)")
    args = parser.parse_args()
    lines, queries = benchmark_data(args.eval_dir)
    options = tuning.TuneOptions(args.validation_fraction, args.seed, args.epochs, threads=args.threads, force=True)
    sizes = [int(size) for size in args.sizes.split(",") if size]
    bundled = LocalEmbedder()

    with throwaway_postgres() as server, tempfile.TemporaryDirectory(prefix="payrail-tune-") as scratch:
        url, _ = imported_registry(server, "tune", bundled, lines)
        models_dir = Path(scratch) / "models"
        with connect(url, autocommit=True) as conn:
            report = tuning.tune(
                conn,
                bundled,
                models_dir,
                args.eval_dir / "queries-dev.jsonl",
                options,
                announce=lambda plan: print(f"expected: {plan.estimated_seconds:.0f} s ({plan.steps} steps at {plan.seconds_per_step:.2f} s)", flush=True),
                progress=show_progress,
            )
            validation = [q.labelled for q in report.plan.split.validation]
            in_memory = evaluation.evaluate_candidate(conn, bundled, validation)
            records = [
                {"provider": p, "method": m, "guidance": g}
                for p, m, g in conn.execute("select provider, method, guidance from payrail.provider_methods order by id").fetchall()
            ]

        split, plan = report.plan.split, report.plan
        same = in_memory.per_query == report.before.per_query
        print(f"\nrecords: {len(lines)}; dev queries: {len(queries)} ({args.eval_dir}); {os.cpu_count()} CPUs, {plan.threads} training thread(s)")
        print(f"check: the bundled model ranked in memory {'gives exactly' if same else 'DIFFERS FROM'} the SQL path's answers on the validation queries")
        print(
            f"split by provider (validation fraction {args.validation_fraction}, seed {args.seed}): {len(split.training)} training queries "
            f"({plan.pairs} pairs) over {split.providers - len(split.validation_providers)} providers; {len(split.validation)} validation "
            f"queries over {len(split.validation_providers)} providers the training never saw; {len(split.left_out)} naming both left out"
        )
        print(
            f"tuned {report.model}: {args.epochs} epochs, {plan.steps} steps of {options.batch_size}, learning rate {options.learning_rate:g}; "
            f"training {report.training_seconds / 60:.1f} min, the whole command {report.seconds / 60:.1f} min "
            f"(it expected {plan.estimated_seconds / 60:.1f})\n"
        )
        unnamed = [i for i, labelled in enumerate(validation) if not names_a_relevant_provider(labelled)]
        headers = ["metric", "all-MiniLM-L6-v2", "tuned", "change", "95% interval"]
        print(f"validation, all {len(validation)} queries (paired bootstrap, {RESAMPLES:,} resamples)")
        print_table(headers, comparison_rows(report.before, report.after, list(range(len(validation))), args.seed))
        print(f"validation, the {len(unnamed)} queries that name no relevant provider")
        print_table(headers, comparison_rows(report.before, report.after, unnamed, args.seed))

        if sizes:
            dev = [json.loads(line) for line in (args.eval_dir / "queries-dev.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()]
            made = synthesized_queries(records, args.seed)
            env = {k: v for k, v in os.environ.items() if not k.startswith(("PAYRAIL_", "OPENAI_"))}
            env.update(PAYRAIL_DATABASE_URL=url, PAYRAIL_DATA_DIR=scratch, PAYRAIL_EMBEDDER="local", HF_HUB_OFFLINE="1")
            command = ["--epochs", str(args.epochs), "--threads", str(args.threads), "--seed", str(args.seed)]
            rows = []
            for size in sizes:
                golden = Path(scratch) / f"golden-{size}.jsonl"
                golden.write_text("".join(json.dumps(q) + "\n" for q in golden_set(size, dev, made)), encoding="utf-8")
                tuned, seconds, cpu, peak = run_tune_process(env, golden, command)
                training = tuned["training"]
                rows.append(
                    (size, training["pairs"], training["steps"], round(tuned["estimatedSeconds"] / 60, 1), round(training["seconds"] / 60, 1), round(seconds / 60, 1), round(cpu / 60, 1), round(peak))
                )
                # Each size as soon as it is measured: a long run interrupted still leaves its figures.
                print(f"cost at {size} golden queries: {dict(zip(COST_HEADERS, rows[-1]))}", flush=True)
            print(f"\ncost of `model tune` ({args.epochs} epochs, batch {options.batch_size}, {args.threads} thread(s), default validation fraction), a new process each")
            print_table(COST_HEADERS, rows)


if __name__ == "__main__":
    main()
