"""Tuning the local model on the benchmark's dev queries, side by side: the bundled model and
`model tune`'s own code in several configurations (in-batch or mined negatives, epochs fixed or
decided on tune's own split, golden queries, records, or both); what each gains on queries no
tuning saw, paired with each other; and what a tune costs against what it expected.

    ./scripts/benchmark tune [--eval-dir benchmarks/data] [--folds 3] [--outer-fraction 0.3] [--seed 0]
                             [--epochs 2] [--record-epochs 1] [--max-epochs 4] [--threads 1]
                             [--configs golden,mined,epochs,both-mined] [--results FILE]
                             [--first-folds N] [--sizes 10,100,300,1000]

Starts a throwaway embedded PostgreSQL 18 and imports records.jsonl through the product's import
path with the bundled model, every record enabled (as benchmarks/quality.py does).

Quality: the dev queries are split by provider into --folds folds (seeded; with --folds 1, one
split by tuning_data.split_by_provider at --outer-fraction). Each fold's test queries name only
providers of that fold, and its tuning gets the queries naming none of them, as the registry's
golden queries (the others are left out): no tuning ever sees a query it is measured on, nor a
record of its providers as an answer. Each configuration runs `model tune`'s own code (tuning.tune,
forced so that every configuration gets its final model) once a fold: it splits its golden queries
again by provider (the product's default fraction) to decide, then trains the final model on all
of them. Both models are measured on the fold's test queries (tune's measure hook, ranked in memory
as `eval --compare` ranks), and the folds' test queries are pooled, each measured once. Each row
gives hit@3 and MRR@3 there and the paired difference from the bundled model with its 95% interval
(10,000 bootstrap resamples of the queries, seeded), how many folds tune's own decision said
better, the training seconds, and the peak resident memory of the tune calls (VmHWM, reset before
each configuration). Records alone (no golden queries: --record-pairs auto) tunes the same model
for every fold, so it is tuned once. The bundled model is measured through the SQL path, as the
registry answers (tests/quality/test_eval.py proves that ranked in memory gives the same answers). Then the
final models against each other: each pair's paired difference on the same test queries, with its
interval (whether one recipe beats another is not read off two rows each compared with the bundled
model). --results FILE keeps each configuration's per-query figures, each fold's as soon as it is
measured: a later run with the same setting resumes a configuration at the fold where a stopped run
left it, and compares its configurations with those already measured, without training them
again. --first-folds N tunes on the first N folds only (what a busy machine can afford); a row so
measured names its folds, and is compared with the bundled model and with the other
configurations on those folds' queries alone.

Cost (--sizes, none by default): `payrail-embedder model tune GOLDEN --json --force` in a new
process per golden set, with the product's default recipe: its report's estimate (made as it
starts, before training) against the seconds it took, phase by phase, the whole command's wall and
CPU time and its peak resident memory. A golden set of N queries is the dev queries, then queries
made from records: each record's Purpose sentence, and "METHOD (CATEGORY API)", in a seeded order,
each with its record as the one relevant record. Those measure time and memory only: a record's
own sentence says nothing of quality. One thread by default: on this shared 2-core machine,
torch's two threads spin against the other work and train slower than one.
"""

from __future__ import annotations

import argparse
import contextlib
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
from types import SimpleNamespace

import numpy as np

from payrail_embedder.embedders import LocalEmbedder
from payrail_embedder.postgres.connection import connect
from payrail_embedder.quality import evaluation, tuning, tuning_data, tuning_plan
from payrail_test_support import CLI
from quality import DEFAULT_EVAL_DIR, benchmark_data, imported_registry, print_table
from throwaway_postgres import throwaway_postgres

SHOWN = ("hit@3", "mrr@3")
RESAMPLES = 10_000
COST_HEADERS = (
    "golden queries",
    "training pairs",
    "steps",
    "expected min",
    "tune's min",
    "actual / expected",
    "command min",
    "command CPU min",
    "peak RSS MiB",
)


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
            with contextlib.suppress(OSError, AttributeError):  # exited between poll and read, or not yet readable
                peak, cpu = max(peak, peak_resident_mib(process.pid)), cpu_seconds(process.pid)
            time.sleep(0.2)
        seconds = time.perf_counter() - started
        output.seek(0)
        text = output.read()
    if process.returncode != 0:  # forced: every size keeps its model
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


# Each tuned configuration: its rows' label and tune's options; "epochs" picks its epochs option
# (golden: --epochs, records: --record-epochs, decided: --max-epochs). Golden queries are given to
# every configuration but records, which tunes a registry without any.
CONFIGS = {
    "golden": ("golden, in-batch", "golden", {"record_pairs": "off", "negatives": "in-batch"}),
    "mined": ("golden, mined", "golden", {"record_pairs": "off", "negatives": "mined"}),
    "epochs": ("golden, mined, epochs decided", "decided", {"record_pairs": "off", "negatives": "mined", "decide_epochs": True}),
    "records": ("records alone", "records", {"record_pairs": "auto", "negatives": "in-batch"}),
    "both": ("golden + records", "records", {"record_pairs": "on", "negatives": "in-batch"}),
    "both-mined": ("golden + records, mined", "records", {"record_pairs": "on", "negatives": "mined"}),
}
TABLE_HEADERS = ("model", "hit@3 (vs bundled, 95% CI)", "MRR@3 (vs bundled, 95% CI)", "tune's decision", "training s", "peak RSS MiB")
STAGES = {"tune": "split-decided", "tune_final": "final"}


def provider_folds(usable: list[tuning_data.GoldenQuery], folds: int, outer_fraction: float, seed: int) -> list[tuning_data.Split]:
    """The test/tuning splits: one by split_by_provider (folds 1), or one a fold of the providers,
    shuffled by seed and dealt in turn: a fold's test queries name only its providers, its tuning
    queries none of them."""
    if folds == 1:
        return [tuning_data.split_by_provider(usable, outer_fraction, seed)]
    providers = sorted({provider for query in usable for provider in query.providers})
    random.Random(seed).shuffle(providers)
    fold_of = {provider: n % folds for n, provider in enumerate(providers)}
    splits = []
    for fold in range(folds):
        mine = frozenset(provider for provider in providers if fold_of[provider] == fold)
        split = tuning_data.Split([], [], [], len(providers), mine)
        for query in usable:
            (split.validation if query.providers <= mine else split.left_out if query.providers & mine else split.training).append(query)
        splits.append(split)
    return splits


class Results:
    """Each configuration's per-query figures on the pooled test queries, its rows, kept in a JSON
    file (--results) for a later run with the same setting."""

    def __init__(self, path: Path | None, setting: dict) -> None:
        self.path, self.setting = path, setting
        self.configs: dict[str, dict] = {}
        if path and path.exists():
            kept = json.loads(path.read_text(encoding="utf-8"))
            if kept["setting"] != setting:
                sys.exit(f"{path} was measured with {kept['setting']}, not {setting}: give another --results file")
            self.configs = kept["configs"]

    def add(self, name: str, per_stage: dict[str, list[dict]], rows: list[tuple], folds: list[int]) -> None:
        self.configs[name] |= {"perQuery": per_stage, "rows": [list(row) for row in rows], "folds": folds}
        self.save()

    def save(self) -> None:
        if self.path:
            self.path.write_text(json.dumps({"setting": self.setting, "configs": self.configs}) + "\n", encoding="utf-8")

    def add_fold(self, name: str, fold: int, per_stage: dict[str, list[dict]], decision: str, seconds: float, peak: int) -> None:
        """One fold of a configuration, kept as soon as it is measured."""
        self.configs.setdefault(name, {}).setdefault("byFold", {})[str(fold)] = {"perQuery": per_stage, "decision": decision, "seconds": seconds, "peak": peak}
        self.save()

    def fold(self, name: str, fold: int) -> dict | None:
        return self.configs.get(name, {}).get("byFold", {}).get(str(fold))

    def folds(self, name: str, every: int) -> list[int]:
        """The folds a configuration was measured on (all of them when the file does not say)."""
        return self.configs[name].get("folds", list(range(every)))

    def final_on(self, name: str, folds: list[int], fold_sizes: list[int]) -> list[dict]:
        """A configuration's final model's per-query figures on some of the folds it was measured on."""
        measured, per_query = self.folds(name, len(fold_sizes)), self.configs[name]["perQuery"]["tune_final"]
        starts = dict(zip(measured, itertools.accumulate([fold_sizes[fold] for fold in measured[:-1]], initial=0), strict=True))
        return [metrics for fold in folds for metrics in per_query[starts[fold] : starts[fold] + fold_sizes[fold]]]


def only_folds(folds: list[int], every: int) -> str:
    """What a row measured on some of the folds says after its label: nothing when on all of them."""
    return "" if len(folds) == every else f" (fold{'s' if len(folds) > 1 else ''} {', '.join(str(fold + 1) for fold in folds)} only)"


def pooled(reports: list[evaluation.EvaluationReport]) -> list[dict]:
    return [metrics for report in reports for metrics in report.per_query]


def as_report(per_query: list[dict]) -> evaluation.EvaluationReport:
    report = evaluation.EvaluationReport(len(per_query), {m: float(np.mean([q[m] for q in per_query])) for m in SHOWN})
    report.results = [SimpleNamespace(metrics=metrics) for metrics in per_query]
    return report


def tune_config(
    conn, name: str, args, folds: list[int], golden_files: list[Path], tests: list[list], scratch: Path, results: Results
) -> tuple[dict[str, list[dict]], list[str], float, int]:
    """One configuration tuned once for each of folds (once for records alone), its models measured
    on each fold's test queries: per-query figures by stage (pooled over the folds), tune's
    decisions, the training seconds and the peak resident MiB. Each fold is kept in results as soon
    as it is measured, and a fold results already holds is not tuned again (a run killed midway
    resumes where it stopped)."""
    label, epochs_from, overrides = CONFIGS[name]
    epochs = {"golden": args.epochs, "records": args.record_epochs, "decided": args.max_epochs}[epochs_from]
    options = tuning_data.TuneOptions(seed=args.seed, epochs=epochs, threads=args.threads, force=True, **overrides)
    golden = name != "records"
    for fold in [fold for fold in (folds if golden else folds[:1]) if results.fold(name, fold) is None]:
        measured: dict[str, list[evaluation.EvaluationReport]] = {stage: [] for stage in STAGES}

        def measure(stage: str, candidate: LocalEmbedder, fold: int = fold, measured: dict = measured) -> None:
            embed_once(candidate)
            # Records alone is one model for every fold: measured on each fold's test queries.
            for measured_fold in folds if not golden else [fold]:
                measured[stage].append(evaluation.evaluate_candidate(conn, candidate, tests[measured_fold]))

        def announce(plan: tuning_plan.TunePlan, fold: int = fold) -> None:
            print(f"{label}, fold {fold + 1}: {plan.steps} + {plan.final_steps} steps, expected {plan.estimated_seconds / 60:.0f} min", flush=True)

        def show_progress(stage: str, step: int, steps: int) -> None:
            if step and (step % 20 == 0 or step == steps):
                print(f"  {stage} step {step}/{steps}", flush=True)

        reset_peak_resident()
        report = tuning.tune(
            conn,
            bundled_embedder(),
            scratch / f"{name}-{fold}",
            golden_files[fold] if golden else None,
            options,
            announce=announce,
            progress=show_progress,
            measure=measure,
        )
        chosen = f", {report.epochs} ep" if options.decide_epochs else ""
        decision = f"{'better' if report.better else 'not better'} {report.before.metrics['mrr@3']:.3f} -> {report.after.metrics['mrr@3']:.3f}{chosen}"
        print(f"  fold {fold + 1}: {decision}; phases {report.to_json()['phases']}", flush=True)
        for n, measured_fold in enumerate(folds if not golden else [fold]):
            results.add_fold(
                name,
                measured_fold,
                {stage: reports[n].per_query for stage, reports in measured.items()},
                decision,
                report.training_seconds + report.final.training_seconds if n == 0 else 0.0,
                round(peak_resident_mib(os.getpid())),
            )
    done = [results.fold(name, fold) for fold in (folds if golden else folds[:1])]
    per_stage = {stage: [metrics for fold in folds for metrics in results.fold(name, fold)["perQuery"][stage]] for stage in STAGES}
    return per_stage, [entry["decision"] for entry in done], sum(entry["seconds"] for entry in done), max(entry["peak"] for entry in done)


def bundled_embedder() -> LocalEmbedder:
    return LocalEmbedder()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--eval-dir", type=Path, default=DEFAULT_EVAL_DIR, help="holds records.jsonl, queries-dev.jsonl")
    parser.add_argument("--folds", type=int, default=3, help="provider folds whose test queries are pooled; 1: one split at --outer-fraction")
    parser.add_argument("--outer-fraction", type=float, default=0.3, help="with --folds 1: share of the dev queries held out from all tuning, by provider")
    parser.add_argument("--seed", type=int, default=0, help="seeds the splits, the training and the bootstrap")
    parser.add_argument("--epochs", type=int, default=2, help="passes over golden queries alone")
    parser.add_argument("--record-epochs", type=int, default=1, help="passes in configurations that train on records")
    parser.add_argument("--max-epochs", type=int, default=4, help="the most passes when tune decides them")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads to train on")
    parser.add_argument("--configs", default="golden,mined,epochs,both-mined", help=f"tuned configurations, in order, of {','.join(CONFIGS)}")
    parser.add_argument("--results", type=Path, help="JSON file keeping each configuration's per-query figures across runs")
    parser.add_argument("--first-folds", type=int, help="tune on the first N folds only (a costly configuration), compared on those")
    parser.add_argument("--sizes", default="", help="golden set sizes whose command cost is measured, e.g. 10,100,300,1000")
    args = parser.parse_args()
    configs = [name for name in args.configs.split(",") if name]
    if unknown := set(configs) - set(CONFIGS):
        parser.error(f"--configs: unknown {sorted(unknown)}")
    lines, queries = benchmark_data(args.eval_dir)
    sizes = [int(size) for size in args.sizes.split(",") if size]
    setting = {key: getattr(args, key) for key in ("folds", "outer_fraction", "seed", "epochs", "record_epochs", "max_epochs")}
    results = Results(args.results, setting)

    with throwaway_postgres() as server, tempfile.TemporaryDirectory(prefix="payrail-tune-") as scratch:
        url, _ = imported_registry(server, "tune", bundled_embedder(), lines)
        with connect(url, autocommit=True) as conn:
            usable, _ = tuning_data.golden_queries(conn, queries)
            splits = provider_folds(usable, args.folds, args.outer_fraction, args.seed)
            tests = [[query.labelled for query in split.validation] for split in splits]
            golden_files = []
            for fold, split in enumerate(splits):
                golden_files.append(Path(scratch) / f"fold-{fold}.jsonl")
                golden_files[-1].write_text("".join(query.labelled.file_line() + "\n" for query in split.training), encoding="utf-8")
            # The bundled model through the SQL path, as the registry answers (ranked in memory it gives
            # the same answers: tests/quality/test_eval.py; not redone here, as it embeds every record again).
            bundled_folds = [evaluation.evaluate(conn, bundled_embedder, test) for test in tests]
            bundled = as_report(pooled(bundled_folds))
            fold_sizes = [len(test) for test in tests]
            folds = list(range(min(args.first_folds or len(splits), len(splits))))
            print(f"records: {len(lines)}; dev queries: {len(queries)} ({args.eval_dir}); {os.cpu_count()} CPUs, {args.threads} training thread(s)")
            for fold, split in enumerate(splits):
                print(
                    f"fold {fold + 1} of {len(splits)} (seed {args.seed}): {len(split.training)} golden queries to tune on; "
                    f"{len(split.validation)} test queries over {len(split.validation_providers)} of {split.providers} providers no tuning of it sees; "
                    f"{len(split.left_out)} naming both left out",
                    flush=True,
                )
            for name in configs:
                per_stage, decisions, seconds, peak = tune_config(conn, name, args, folds, golden_files, tests, Path(scratch), results)
                label = CONFIGS[name][0] + only_folds(folds, len(splits))
                better = sum(decision.startswith("better") for decision in decisions)
                bundled_on_folds = as_report(pooled([bundled_folds[fold] for fold in folds]))
                rows = [
                    (
                        f"{label}, {STAGES[stage]}",
                        *(versus_bundled(bundled_on_folds, as_report(per_stage[stage]), m, args.seed) for m in SHOWN),
                        f"better in {better} of {len(decisions)}: {'; '.join(decisions)}" if stage == "tune" else "kept (forced)",
                        round(seconds) if stage == "tune_final" else "",
                        peak,
                    )
                    for stage in STAGES
                ]
                results.add(name, per_stage, rows, folds)
                # Each configuration as soon as it is measured: a long run interrupted still leaves its figures.
                for row in rows:
                    print("  " + " | ".join(str(cell) for cell in row), flush=True)
            measured = [name for name in CONFIGS if "rows" in results.configs.get(name, {})]
            print(
                f"\non the {bundled.queries} held-out test queries of {len(splits)} fold(s), or those of the folds a row names "
                f"(paired bootstrap vs bundled on the same queries, {RESAMPLES:,} resamples; batch 32, lr 2e-5, {args.threads} thread(s))"
            )
            # The bundled model on every fold, and on each set of folds a row was measured on alone.
            fold_sets = sorted({tuple(results.folds(name, len(splits))) for name in measured} | {tuple(range(len(splits)))}, key=len, reverse=True)
            bundled_rows = [
                (f"bundled all-MiniLM-L6-v2{only_folds(list(some), len(splits))}", *(f"{report.metrics[m]:.3f}" for m in SHOWN), "", "", "")
                for some in fold_sets
                for report in [as_report(pooled([bundled_folds[fold] for fold in some]))]
            ]
            print_table(TABLE_HEADERS, [*bundled_rows, *(tuple(row) for name in measured for row in results.configs[name]["rows"])])
            if len(measured) > 1:
                # Each tuned row above is compared with the bundled model only; whether one tuning beats
                # another needs their own paired difference, over the same held-out queries.
                print(f"final models against each other on the held-out queries of the folds both were measured on (paired bootstrap, {RESAMPLES:,} resamples)")
                comparisons = []
                for first, second in itertools.combinations(measured, 2):
                    common = sorted(set(results.folds(first, len(fold_sizes))) & set(results.folds(second, len(fold_sizes))))
                    pair = [as_report(results.final_on(name, common, fold_sizes)) for name in (first, second)]
                    comparisons.append(
                        (f"{CONFIGS[second][0]} - {CONFIGS[first][0]}", pair[0].queries, *(difference(pair[0], pair[1], m, args.seed) for m in SHOWN))
                    )
                print_table(("comparison", "queries", "hit@3 difference (95% CI)", "MRR@3 difference (95% CI)"), comparisons)
            records = [
                {"provider": p, "method": m, "guidance": g}
                for p, m, g in conn.execute("select provider, method, guidance from payrail.provider_methods order by id").fetchall()
            ]

        if sizes:
            measure_cost(args, url, Path(scratch), records, sizes)


def measure_cost(args, url: str, scratch: Path, records: list[dict], sizes: list[int]) -> None:
    """`model tune GOLDEN --json --force` in a new process per size, with the product's default recipe: its estimate against the time it took."""
    dev = [json.loads(line) for line in (args.eval_dir / "queries-dev.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()]
    made = synthesized_queries(records, args.seed)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PAYRAIL_", "OPENAI_"))}
    env.update(PAYRAIL_DATABASE_URL=url, PAYRAIL_DATA_DIR=str(scratch), PAYRAIL_EMBEDDER="local", HF_HUB_OFFLINE="1")
    command = ["--threads", str(args.threads), "--seed", str(args.seed), "--record-pairs", "off", "--force"]
    cost, phases = [], []
    for size in sizes:
        golden = scratch / f"golden-{size}.jsonl"
        golden.write_text("".join(json.dumps(q) + "\n" for q in golden_set(size, dev, made)), encoding="utf-8")
        tuned, seconds, cpu, peak = run_tune_process(env, golden, command)
        training, expected, took = tuned["training"], tuned["estimatedSeconds"], tuned["seconds"]
        cost.append(
            (
                size,
                training["pairs"],
                training["steps"],
                round(expected / 60, 1),
                round(took / 60, 1),
                f"{took / expected:.2f}",
                round(seconds / 60, 1),
                round(cpu / 60, 1),
                round(peak),
            )
        )
        phases += [
            (
                size,
                phase,
                tuned["phases"]["expected"].get(phase, 0.0),
                actual,
                f"{actual / expected_phase:.2f}" if (expected_phase := tuned["phases"]["expected"].get(phase)) else "",
            )
            for phase, actual in tuned["phases"]["actual"].items()
        ]
        print(f"cost at {size} golden queries: {dict(zip(COST_HEADERS, cost[-1], strict=True))}; phases {tuned['phases']}", flush=True)
    print(f"\ncost of `model tune --force` (the default recipe, batch 32, {args.threads} thread(s), default validation fraction), a new process each")
    print_table(COST_HEADERS, cost)
    print("each phase, expected as tune starts and actual (seconds)")
    print_table(("golden queries", "phase", "expected s", "actual s", "actual / expected"), phases)


if __name__ == "__main__":
    main()
