"""Tuning the local model on the benchmark's dev queries, side by side: the bundled model, tuned on
golden queries (the model that decides, and the final one trained on all of them), tuned on the
records alone, and on both; what each gains on queries no tuning saw, and what it costs.

    ./scripts/benchmark tune [--eval-dir benchmarks/data] [--outer-fraction 0.3] [--seed 0]
                             [--epochs 2] [--record-epochs 1] [--threads 1]
                             [--configs golden,records,both] [--sizes 300,1000,5000]

Starts a throwaway embedded PostgreSQL 18 and imports records.jsonl through the product's import
path with the bundled model, every record enabled (as benchmarks/quality.py does).

Quality: an OUTER split by provider (tuning.split_by_provider, --outer-fraction, --seed) holds the
test queries apart from everything: they name only providers no training query names, and no
tuning sees them. The outer training part plays the registry's golden queries. Each
configuration runs `model tune`'s own code (tuning.tune, forced so that every configuration gets
its final model): it splits its golden queries again by provider (the product's default fraction)
to decide, then trains the final model on all of them. Both models are measured on the test
queries (tune's measure hook, ranked in memory as `eval --compare` ranks), so the final model's
figure is honest too. Each row gives hit@3 and MRR@3 there and the paired difference from the
bundled model with its 95% interval (10,000 bootstrap resamples of the queries, seeded), whether
tune's own decision said the model is better, the training seconds, and the peak resident memory
of the whole tune call (VmHWM, reset before each configuration). Records: tuned with no golden
queries (--record-pairs auto), on the Purpose lines of all records (records are the registry's
content, not the test's answers). Record configurations train --record-epochs passes (records
give about eight times golden's pairs). The bundled model is measured through the SQL path, as the
registry answers (tests/quality/test_eval.py proves that ranked in memory gives the same answers). Then the final models of the tuned
configurations against each other: each pair's paired difference on the same test queries, with
its interval (whether records beside golden queries beat golden queries alone, say, is not read off
two rows each compared with the bundled model).

Cost (--sizes, none by default): `payrail-embedder model tune GOLDEN --json` in a new process per golden set, its peak
resident memory and its own report (pairs, steps, the time it expected, training and
total seconds). A golden set of N queries is the dev queries, then queries made from records:
each record's Purpose sentence, and "METHOD (CATEGORY API)", in a seeded order, each with its
record as the one relevant record. Those measure time and memory only: a record's own sentence
says nothing of quality. One thread by default: on this shared 2-core machine, torch's two threads
spin against the other work and train slower than one.
"""

from __future__ import annotations

import argparse
import itertools
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

from payrail_embedder.embedders import LocalEmbedder
from payrail_embedder.model import evaluation, tuning
from payrail_embedder.postgres.connection import connect
from payrail_test_support import CLI
from quality import DEFAULT_EVAL_DIR, benchmark_data, imported_registry, print_table
from throwaway_postgres import throwaway_postgres

SHOWN = ("hit@3", "mrr@3")
RESAMPLES = 10_000
COST_HEADERS = ("golden queries", "training pairs", "steps", "expected min", "training min", "command min", "command CPU min", "peak RSS MiB")


def paired_interval(before: np.ndarray, after: np.ndarray, seed: int) -> tuple[float, float, float]:
    """The mean of after - before over the queries and its 95% percentile bootstrap interval."""
    difference = after - before
    samples = np.random.default_rng(seed).integers(0, len(difference), size=(RESAMPLES, len(difference)))
    means = difference[samples].mean(axis=1)
    return float(difference.mean()), float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def per_query(report: evaluation.EvaluationReport, metric: str) -> np.ndarray:
    return np.array([query[metric] for query in report.per_query])


def versus_bundled(bundled: evaluation.EvaluationReport, model: evaluation.EvaluationReport, metric: str, seed: int) -> str:
    """A model's mean of metric on the test queries and its paired difference from bundled, 95% interval."""
    new = per_query(model, metric)
    return f"{new.mean():.3f} ({difference(bundled, model, metric, seed)})"


def difference(first: evaluation.EvaluationReport, second: evaluation.EvaluationReport, metric: str, seed: int) -> str:
    """second's mean of metric minus first's over the same queries, with its 95% paired interval."""
    change, low, high = paired_interval(per_query(first, metric), per_query(second, metric), seed)
    return f"{change:+.3f} [{low:+.3f}, {high:+.3f}]"


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


def reset_peak_resident() -> None:
    """Resets this process's VmHWM to its current resident memory (Linux 4.0+), so that the next
    reading is the peak of what ran since."""
    Path("/proc/self/clear_refs").write_text("5")


def embed_once(candidate: LocalEmbedder) -> None:
    """Makes candidate answer texts it has embedded once from memory: measured here on the test
    queries, the same model is then measured by tune on its own, every record embedded again
    otherwise (minutes each on 2 cores)."""
    embed, seen = candidate.embed, {}

    def remembered(texts: list[str]) -> list:
        key = tuple(texts)
        if key not in seen:
            seen[key] = embed(texts)
        return seen[key]

    candidate.embed = remembered


# Each tuned configuration: its rows' label, and tune's record-pairs option (golden queries are
# given to every configuration but records, which tunes a registry without any).
CONFIGS = {"golden": ("golden", "off"), "records": ("records alone", "auto"), "both": ("golden + records", "on")}
TABLE_HEADERS = ("model", "hit@3 (vs bundled, 95% CI)", "MRR@3 (vs bundled, 95% CI)", "tune's decision", "training s", "peak RSS MiB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--eval-dir", type=Path, default=DEFAULT_EVAL_DIR, help="holds records.jsonl, queries-dev.jsonl")
    parser.add_argument("--outer-fraction", type=float, default=0.3, help="share of the dev queries held out from all tuning, by provider")
    parser.add_argument("--seed", type=int, default=0, help="seeds both splits, the training and the bootstrap")
    parser.add_argument("--epochs", type=int, default=2, help="passes over golden queries alone")
    parser.add_argument("--record-epochs", type=int, default=1, help="passes in configurations that train on records")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads to train on")
    parser.add_argument("--configs", default=",".join(CONFIGS), help=f"tuned configurations, in order, of {','.join(CONFIGS)}")
    parser.add_argument("--sizes", default="", help="golden set sizes whose command cost is measured, e.g. 300,1000,5000")
    args = parser.parse_args()
    configs = [name for name in args.configs.split(",") if name]
    if unknown := set(configs) - set(CONFIGS):
        parser.error(f"--configs: unknown {sorted(unknown)}")
    lines, queries = benchmark_data(args.eval_dir)
    sizes = [int(size) for size in args.sizes.split(",") if size]
    bundled = LocalEmbedder()

    with throwaway_postgres() as server, tempfile.TemporaryDirectory(prefix="payrail-tune-") as scratch:
        url, _ = imported_registry(server, "tune", bundled, lines)
        with connect(url, autocommit=True) as conn:
            usable, _ = tuning.golden_queries(conn, queries)
            outer = tuning.split_by_provider(usable, args.outer_fraction, args.seed)
            test = [query.labelled for query in outer.validation]
            golden_file = Path(scratch) / "outer-training.jsonl"
            golden_file.write_text("".join(query.labelled.file_line() + "\n" for query in outer.training), encoding="utf-8")
            # The bundled model through the SQL path, as the registry answers (ranked in memory it gives
            # the same answers: tests/quality/test_eval.py; not redone here, as it embeds every record again).
            bundled_report = evaluation.evaluate(conn, lambda: bundled, test)
            print(f"records: {len(lines)}; dev queries: {len(queries)} ({args.eval_dir}); {os.cpu_count()} CPUs, {args.threads} training thread(s)")
            print(
                f"outer split by provider (fraction {args.outer_fraction}, seed {args.seed}): {len(outer.training)} golden queries to tune on "
                f"over {outer.providers - len(outer.validation_providers)} providers; {len(test)} test queries over "
                f"{len(outer.validation_providers)} providers no tuning sees; {len(outer.left_out)} naming both left out\n",
                flush=True,
            )
            finals: dict[str, evaluation.EvaluationReport] = {}
            rows = [("bundled all-MiniLM-L6-v2", f"{bundled_report.metrics['hit@3']:.3f}", f"{bundled_report.metrics['mrr@3']:.3f}", "", "", "")]
            for name in configs:
                label, record_pairs = CONFIGS[name]
                epochs = args.epochs if name == "golden" else args.record_epochs
                options = tuning.TuneOptions(seed=args.seed, epochs=epochs, threads=args.threads, force=True, record_pairs=record_pairs)
                measured = {}

                def measure(stage: str, candidate: LocalEmbedder) -> None:
                    embed_once(candidate)
                    measured[stage] = evaluation.evaluate_candidate(conn, candidate, test)

                def announce(plan: tuning.TunePlan) -> None:
                    print(f"{label}: {plan.steps} + {plan.final_steps} steps, expected {plan.estimated_seconds / 60:.0f} min", flush=True)

                def show_progress(stage: str, step: int, steps: int) -> None:
                    if step and (step % 20 == 0 or step == steps):
                        print(f"  {stage} step {step}/{steps}", flush=True)

                reset_peak_resident()
                report = tuning.tune(
                    conn,
                    bundled,
                    Path(scratch) / name,
                    golden_file if name != "records" else None,
                    options,
                    announce=announce,
                    progress=show_progress,
                    measure=measure,
                )
                peak = round(peak_resident_mib(os.getpid()))
                finals[name] = measured["tune_final"]
                decision = f"{'better' if report.better else 'not better'}: MRR@3 {report.before.metrics['mrr@3']:.3f} -> {report.after.metrics['mrr@3']:.3f}"
                deciding, final = report.plan, report.final
                rows.append(
                    (
                        f"{label}, split-decided ({deciding.pairs} pairs, {epochs} ep)",
                        *(versus_bundled(bundled_report, measured["tune"], m, args.seed) for m in SHOWN),
                        decision,
                        round(report.training_seconds),
                        peak,
                    )
                )
                rows.append(
                    (
                        f"{label}, final ({final.pairs} pairs, {epochs} ep)",
                        *(versus_bundled(bundled_report, measured["tune_final"], m, args.seed) for m in SHOWN),
                        "kept (forced)" if not report.better else "kept",
                        round(final.training_seconds),
                        peak,
                    )
                )
                # Each configuration as soon as it is measured: a long run interrupted still leaves its figures.
                print("  " + " | ".join(str(cell) for cell in rows[-2]), flush=True)
                print("  " + " | ".join(str(cell) for cell in rows[-1]), flush=True)
            print(
                f"\non the {len(test)} held-out test queries (paired bootstrap vs bundled, {RESAMPLES:,} resamples; batch 32, lr 2e-5, {args.threads} thread(s))"
            )
            print_table(TABLE_HEADERS, rows)
            if len(finals) > 1:
                # Each tuned row above is compared with the bundled model only; whether one tuning beats
                # another needs their own paired difference, over the same held-out queries.
                print(f"\nfinal models against each other on the same {len(test)} held-out queries (paired bootstrap, {RESAMPLES:,} resamples)")
                print_table(
                    ("comparison", "hit@3 difference (95% CI)", "MRR@3 difference (95% CI)"),
                    [
                        (f"{CONFIGS[second][0]} - {CONFIGS[first][0]}", *(difference(finals[first], finals[second], m, args.seed) for m in SHOWN))
                        for first, second in itertools.combinations(finals, 2)
                    ],
                )
            records = [
                {"provider": p, "method": m, "guidance": g}
                for p, m, g in conn.execute("select provider, method, guidance from payrail.provider_methods order by id").fetchall()
            ]

        if sizes:
            dev = [json.loads(line) for line in (args.eval_dir / "queries-dev.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()]
            made = synthesized_queries(records, args.seed)
            env = {k: v for k, v in os.environ.items() if not k.startswith(("PAYRAIL_", "OPENAI_"))}
            env.update(PAYRAIL_DATABASE_URL=url, PAYRAIL_DATA_DIR=scratch, PAYRAIL_EMBEDDER="local", HF_HUB_OFFLINE="1")
            command = ["--epochs", str(args.epochs), "--threads", str(args.threads), "--seed", str(args.seed), "--record-pairs", "off"]
            cost = []
            for size in sizes:
                golden = Path(scratch) / f"golden-{size}.jsonl"
                golden.write_text("".join(json.dumps(q) + "\n" for q in golden_set(size, dev, made)), encoding="utf-8")
                tuned, seconds, cpu, peak = run_tune_process(env, golden, command)
                training = tuned["training"]
                cost.append(
                    (
                        size,
                        training["pairs"],
                        training["steps"],
                        round(tuned["estimatedSeconds"] / 60, 1),
                        round(training["seconds"] / 60, 1),
                        round(seconds / 60, 1),
                        round(cpu / 60, 1),
                        round(peak),
                    )
                )
                print(f"cost at {size} golden queries: {dict(zip(COST_HEADERS, cost[-1]))}", flush=True)
            print(f"\ncost of `model tune` ({args.epochs} epochs, batch 32, {args.threads} thread(s), default validation fraction), a new process each")
            print_table(COST_HEADERS, cost)


if __name__ == "__main__":
    main()
