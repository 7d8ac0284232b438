"""`payrail-embedder model tune`: the registry's local model, fine-tuned on its golden queries.

The labelled queries are the registry's golden queries (golden.py), or an operator's file in
eval's format. What it learns from (each query against each of its records, and with mined
negatives a record of the registry near the query) is tuning_data.py's; one training, training.py's.

Two trainings, the same options and seed. The first decides: part of the queries is kept aside by
provider (validation queries name only records of providers that no training query names, so
validation measures records the training never saw), and eval's metrics on them, before (the
registry's model, through the search path) and after (the candidate, in memory:
evaluation.evaluate_candidate), decide whether tuning helps: it must raise MRR@3, unless forced.
With decided epochs, they also decide how many epochs: the first training is measured after each.
A split with fewer than MIN_VALIDATION_QUERIES validation queries cannot decide anything, so tune
refuses it unless forced (and then says so). The second training makes the model that is kept:
trained on every query, the validation queries and those naming both sides of the split included.
Its figures on those queries are reported too, but they are optimistic (it trained on them); the
first training's are the honest estimate.

Record pairs (tuning_data.record_queries) adapt a registry without golden queries, or one beside
them: each enabled record's Purpose line is a query whose answer is its own record. With no golden
queries, they are split by provider and decide as golden queries would, which says the model still
finds records by their own descriptions (a proxy: agents' questions are not descriptions).

Deterministic: the same registry, golden queries, options and seed give the same weights, hence
the same name, on the same machine with the same number of threads (how a floating-point sum is
split between threads changes its last bits). Only local sentence-transformers models can be
tuned: OpenAI's embedding models are served, not shipped, so there are no weights to train here.
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import psycopg

from ..base.output_files import writing_to
from ..base.reports import Report, duration
from ..base.safe_text import escape_controls
from ..embedders import LOCAL_DEFAULT_MODEL, Embedder, LocalEmbedder, local_model, tuned_models
from ..embedders.openai import OPENAI_MODEL_DIMENSIONS
from ..postgres.connection import one_value
from ..registry import golden as golden_module
from ..registry.embedding_model import registry_model, require_embedder_model
from ..registry.labelled_queries import LabelledQuery, read_labelled_queries
from .evaluation import EvaluationReport, evaluate, evaluate_candidate, side_by_side
from .training import Training
from .tuning_data import CannotTune, TuneData, TuneOptions, golden_queries, record_queries, split_by_provider, training_pairs
from .tuning_plan import Phases, TunePlan, seconds_per_record, warm_up_export

# The metric a tuned model must raise on validation to be kept: it counts a hit and how high it ranks.
DECIDING_METRIC = "mrr@3"
# The fewest validation queries that can decide anything (docs/embeddings.md, "Tuning the local
# model"). A 95% paired bootstrap interval of the change in hit@3 excludes zero only when fewer
# than 2.5% of its resamples show no gain. A model that gains PLAUSIBLE_GAIN on n queries and
# loses none leaves (1 - PLAUSIBLE_GAIN)^n of them with none: under 2.5% from 36 queries on. That is
# the best case, at a gain above any tuning measured here on held-out queries (+0.02 to +0.09):
# below it, no outcome of the first training can be told from chance.
INTERVAL_TAIL = 0.025
PLAUSIBLE_GAIN = 0.10
MIN_VALIDATION_QUERIES = math.ceil(math.log(INTERVAL_TAIL) / math.log(1 - PLAUSIBLE_GAIN))


@dataclass
class FinalModel:
    """The kept model, trained on every query, and its figures on them: optimistic, as it trained on them."""

    pairs: int
    steps: int
    training_seconds: float
    # eval on every query it trained on: the registry's model (the search path), then the final model (in memory).
    before: EvaluationReport
    after: EvaluationReport

    def to_json(self) -> dict:
        return {
            "pairs": self.pairs,
            "steps": self.steps,
            "seconds": round(self.training_seconds, 1),
            "trainedOn": {"queries": self.before.queries, "before": self.before.metrics, "after": self.after.metrics},
        }


@dataclass
class TuneReport(Report):
    plan: TunePlan
    options: TuneOptions
    label_warnings: list[dict]
    # eval on the validation queries: the registry's model (the search path), then the one trained without them (in memory).
    before: EvaluationReport
    after: EvaluationReport
    # The kept model's name, its directory and how it was made; None when tuning did not help.
    model: str | None = None
    path: Path | None = None
    final: FinalModel | None = None
    training_seconds: float = 0.0
    seconds: float = 0.0
    # With decided epochs: each epoch count the first training was measured at, and its validation metrics.
    epochs_tried: list[tuple[int, dict[str, float]]] = field(default_factory=list)
    # The epochs the deciding model trained, and so the kept one: decided, or options.epochs.
    epochs: int = 0
    # Each phase's seconds, as TunePlan.expected names them.
    phases: dict[str, float] = field(default_factory=dict)

    @property
    def kept(self) -> bool:
        return self.path is not None

    @property
    def decides(self) -> bool:
        """Whether the validation split is large enough to decide anything (MIN_VALIDATION_QUERIES)."""
        return len(self.plan.split.validation) >= MIN_VALIDATION_QUERIES

    @property
    def better(self) -> bool:
        return self.after.metrics[DECIDING_METRIC] > self.before.metrics[DECIDING_METRIC]

    def to_json(self) -> dict:
        plan, data, split = self.plan, self.plan.data, self.plan.split
        return {
            "model": self.model,
            "kept": self.kept,
            "better": self.better,
            "path": str(self.path) if self.path else None,
            "tunedFrom": plan.tuned_from,
            "golden": {"source": data.source, "queries": data.golden_queries, "usable": len(data.usable), "labelWarnings": self.label_warnings},
            "recordPairs": {"option": self.options.record_pairs, "queries": len(data.made), "pairs": len(training_pairs(data.made))},
            "split": {
                "on": "golden queries" if data.decides_on_golden else "record queries",
                "validationFraction": self.options.validation_fraction,
                "seed": self.options.seed,
                "providers": split.providers,
                "validationProviders": len(split.validation_providers),
                "training": len(split.training),
                "validation": len(split.validation),
                "leftOut": len(split.left_out),
            },
            "training": {
                "pairs": plan.pairs,
                "negatives": "mined" if data.deciding_negatives is not None else "in-batch",
                "epochs": self.epochs,
                "epochsDecided": {"upTo": self.options.epochs, "tried": [{"epochs": n, **metrics} for n, metrics in self.epochs_tried]}
                if self.options.decide_epochs
                else None,
                "batchSize": self.options.batch_size,
                "learningRate": self.options.learning_rate,
                "threads": plan.threads,
                "steps": plan.steps,
                "seconds": round(self.training_seconds, 1),
            },
            "validation": {
                "queries": len(split.validation),
                "minimum": MIN_VALIDATION_QUERIES,
                "decides": self.decides,
                "before": self.before.metrics,
                "after": self.after.metrics,
            },
            "final": self.final.to_json() if self.final else None,
            "estimatedSeconds": round(plan.estimated_seconds),
            "seconds": round(self.seconds, 1),
            "phases": {
                "expected": {name: round(seconds, 1) for name, seconds in plan.expected(self.kept).items()},
                "actual": {name: round(seconds, 1) for name, seconds in self.phases.items()},
                "rates": plan.rates(),
            },
        }

    def describe(self) -> list[str]:
        """The deciding figures, then the kept model's, and what to do with it."""
        data = self.plan.data
        lines = [f"validation: {len(self.plan.split.validation)} {'' if data.decides_on_golden else 'record '}queries on providers the training never saw"]
        if not self.decides:
            lines.append(undecided(len(self.plan.split.validation)))
        lines += side_by_side([self.plan.tuned_from, "tuned"], [self.before.metrics, self.after.metrics])
        if self.epochs_tried:
            tried = ", ".join(f"{n}: {metrics[DECIDING_METRIC]:.3f}" for n, metrics in self.epochs_tried)
            lines.append(f"epochs decided on validation: {self.epochs} (MRR@3 after each epoch {tried})")
        change = mrr_change(self.before, self.after)
        final = self.final  # the kept model's
        if final is None:
            return [*lines, f"not kept: {change} does not beat the registry's model {self.plan.tuned_from}; --force keeps it anyway"]
        forced = "" if self.better and self.decides else ", kept by --force"
        return [
            *lines,
            f"kept {self.model} in {self.path} (validation {change}{forced}), in {duration(self.seconds)}",
            f"it was then trained on all {final.before.queries} {'golden' if data.decides_on_golden else 'record'} queries "
            f"({final.pairs} pairs): {mrr_change(final.before, final.after)} on them, optimistic as it trained on them; "
            "the validation figures are the honest estimate",
            f"see it side by side: payrail-embedder eval{f' {data.path}' if data.path else ''} --compare {self.model}",
            f"make it the registry's model: payrail-embedder model switch {self.model}",
        ]


def undecided(validation: int) -> str:
    """What a split of `validation` queries (under MIN_VALIDATION_QUERIES) cannot decide, once forced."""
    return (
        f"--force: {validation} validation queries cannot decide: the figures below cannot tell a gain from chance (a 95% "
        f"interval needs {MIN_VALIDATION_QUERIES} queries, even for a gain of {PLAUSIBLE_GAIN:.2f} hit@3 with no query lost), "
        "so whether the model is better, and its epochs when they are decided, is not known"
    )


def too_few_to_decide(data: TuneData, options: TuneOptions) -> str:
    """Why a split under MIN_VALIDATION_QUERIES is refused, and what to do."""
    validation = len(data.split.validation)
    kind = "golden" if data.decides_on_golden else "record"
    return (
        f"{data.source}: the split by provider (--validation-fraction {options.validation_fraction:g}, --seed {options.seed}) leaves "
        f"{validation} {kind} queries to decide on, under the {MIN_VALIDATION_QUERIES} that can decide anything: a 95% paired "
        f"interval of the change in hit@3 can exclude zero from {MIN_VALIDATION_QUERIES} queries on, and then only for a gain of "
        f"{PLAUSIBLE_GAIN:.2f} with no query lost; below that, keeping the model (and its epochs) would be chance. Label more "
        f"golden queries, over more providers (about {math.ceil(MIN_VALIDATION_QUERIES / options.validation_fraction)} at this "
        "fraction), raise --validation-fraction, or give --force to tune anyway, undecided"
    )


def mrr_change(before: EvaluationReport, after: EvaluationReport) -> str:
    return f"MRR@3 {before.metrics[DECIDING_METRIC]:.3f} -> {after.metrics[DECIDING_METRIC]:.3f}"


@dataclass(frozen=True)
class InstalledModel(Report):
    """`model install`: the tuned model installed, and where."""

    path: Path

    def to_json(self) -> dict:
        return {"model": self.path.name, "path": str(self.path)}

    def describe(self) -> list[str]:
        return [f"installed {self.path.name} in {self.path}"]


@dataclass(frozen=True)
class TunedModels(Report):
    """`model list`: the tuned models installed in directory (tuned_models.installed), with how each was tuned and what it measured."""

    directory: Path
    models: list[dict]

    def to_json(self) -> dict:
        return {"modelsDirectory": str(self.directory), "models": self.models}

    def describe(self) -> list[str]:
        """A line a model: its name, how it was tuned as far as its tuning.json says (a file from
        elsewhere: any field may be missing or of another type, and its text is escaped), its path."""
        lines = [] if self.models else [f"no tuned models in {self.directory}"]
        for item in self.models:
            if item["tuningProblem"]:
                origin = f" ({item['tuningProblem']})"
            elif item["tuning"] is not None:
                origin = f" ({tuning_summary(item['tuning'])})"
            else:
                origin = ""
            lines.append(escape_controls(f"{item['name']}{origin}: {item['path']}"))
        return lines


# The most characters of a text of tuning.json that `model list` shows (a model's name is under 80).
SHOWN_CHARACTERS = 200


def tuning_summary(manifest: dict) -> str:
    """What tuning.json says of how a model was tuned, in words: the model it was tuned from, when,
    and MRR@3 before and after on validation and on its training queries; what is missing or not of
    the type model tune writes is left out."""

    def text(value: object) -> str | None:
        return value if isinstance(value, str) and value else None

    def field(value: object, *keys: str) -> object:
        for key in keys:
            value = value.get(key) if isinstance(value, dict) else None
        return value

    def mrr_change(figures: object) -> str | None:
        before, after = field(figures, "before", DECIDING_METRIC), field(figures, "after", DECIDING_METRIC)
        if not all(isinstance(v, int | float) and not isinstance(v, bool) and 0 <= v <= 1 for v in (before, after)):
            return None  # a metric is a fraction
        return f"MRR@3 {before:.3f} -> {after:.3f}"

    trained_on = field(manifest, "final", "trainedOn")
    queries = field(trained_on, "queries")
    scores = [
        f"{label} {change}"
        for label, figures in (
            ("validation", field(manifest, "validation")),
            (f"on its {queries if isinstance(queries, int) else '?'} training queries (optimistic)", trained_on),
        )
        if (change := mrr_change(figures)) is not None
    ]
    made = " ".join(part[:SHOWN_CHARACTERS] for part in (text(manifest.get("tunedFrom")), text(manifest.get("created"))) if part)
    return ", ".join(["tuned from " + (made or "an unknown model"), *scores])


def tunable_model(conn: psycopg.Connection, embedder: Embedder, models_dir: Path) -> tuple[LocalEmbedder, Path]:
    """The registry's model's embedder and its sentence-transformers directory, or CannotTune saying why."""
    model = registry_model(conn)
    # The configured backend's model, or a registry's model OpenAI serves (the local backend would be refused it anyway).
    served = embedder.model_name if not isinstance(embedder, LocalEmbedder) else model.name if model and model.name in OPENAI_MODEL_DIMENSIONS else None
    if served:
        raise CannotTune(
            "misconfigured",
            f"{served} is an OpenAI embedding model: its weights are OpenAI's, so it cannot be tuned here. model tune "
            f"fine-tunes the local backend's model (PAYRAIL_EMBEDDER=local: {LOCAL_DEFAULT_MODEL} or a model tuned from it)",
        )
    if model is None:
        raise CannotTune("invalid_input", "the registry has no embedding model yet: import records first, then tune its model on their labelled queries")
    current = require_embedder_model(conn, embedder)
    assert isinstance(current, LocalEmbedder)
    if current.model_name == LOCAL_DEFAULT_MODEL:
        return current, local_model.bundled_model_dir()
    if current.tuned:
        return current, tuned_models.locate(current.model_name, models_dir)
    raise CannotTune(
        "misconfigured",
        f"the registry's model {current.model_name} is not {LOCAL_DEFAULT_MODEL} or a model tuned from it; only those can be tuned",
    )


def tune_data(conn: psycopg.Connection, golden_file: tuple[Path, list[LabelledQuery]] | None, options: TuneOptions) -> tuple[TuneData, list[dict], str]:
    """What tune trains on (golden_file: a file and its queries; None: the registry's golden
    queries), the label warnings eval gives, and the SHA-256 of the golden queries as `golden
    export` writes them (for the manifest); CannotTune when it cannot train or decide."""
    if golden_file is None:
        golden_path, queries, source = None, golden_module.labelled_queries(conn), "the registry's golden queries"
    else:
        golden_path, queries = golden_file
        source = golden_path.name
    digest = hashlib.sha256("".join(query.file_line() + "\n" for query in queries).encode("utf-8")).hexdigest()
    usable, warnings = golden_queries(conn, queries)
    if not usable and not options.uses_record_pairs(len(queries)):
        raise CannotTune("invalid_input", nothing_to_tune_on(source, len(queries), options))
    made = record_queries(conn) if options.uses_record_pairs(len(queries)) else []
    split = split_by_provider(usable or made, options.validation_fraction, options.seed)
    data = TuneData(source, len(queries), usable, made, split, golden_path)
    if not data.deciding_pairs() or not split.validation:
        what = (
            f"{len(usable)} of {len(queries)} queries name enabled records of this registry"
            if usable
            else f"no golden query names an enabled record, and {len(made)} queries were made from the records' Purpose lines"
        )
        raise CannotTune(
            "invalid_input",
            f"{source}: {what}, over {split.providers} providers; the split by provider (--validation-fraction "
            f"{options.validation_fraction:g}, --seed {options.seed}) left {len(split.training)} for training and "
            f"{len(split.validation)} for validation. Both need queries: label more queries, over more providers",
        )
    return data, warnings, digest


def nothing_to_tune_on(source: str, queries: int, options: TuneOptions) -> str:
    """Why tune has nothing to train on, and what to do: golden queries naming no enabled record, or none with record pairs off."""
    if queries:
        return (
            f"{source}: none of {queries} golden queries names an enabled record of this registry (`eval` warns of each "
            "label it cannot find); label them anew, or tune on the records alone with --record-pairs on"
        )
    return (
        f"{source}: there are no golden queries, and --record-pairs is {options.record_pairs}: add golden queries "
        "(`payrail-embedder golden add` or `golden import FILE`), give a GOLDEN.jsonl file, or tune on the records alone "
        "with --record-pairs auto"
    )


def tune(
    conn: psycopg.Connection,
    embedder: Embedder,
    models_dir: Path,
    golden_path: Path | None,
    options: TuneOptions,
    *,
    announce: Callable[[TunePlan], None],
    progress: Callable[[str, int, int], None],
    measure: Callable[[str, LocalEmbedder], None] = lambda stage, candidate: None,
) -> TuneReport:
    """Tunes the registry's model on golden_path's queries (None: the registry's golden queries)
    and, by options.record_pairs, on queries made from its records. A first training without the
    validation queries decides: when its model beats the registry's on them (or options.force), a
    second one on every query makes the model kept in models_dir. Reports both.

    progress(stage, step, steps) is called as each training starts (step 0) and after every step,
    stage "tune" for the first and "tune_final" for the second; measure(stage, candidate) with the
    same stages once each model can embed, before its scratch directory goes (benchmarks measure it
    on queries tune never saw). The registry is read, never changed: `model switch NAME` makes the
    tuned model the registry's."""
    clock = Phases()
    # A file is read first: one it refuses is refused before the model is loaded.
    golden_file = (golden_path, read_labelled_queries(golden_path)) if golden_path is not None else None
    current, source = tunable_model(conn, embedder, models_dir)
    data, warnings, golden_digest = tune_data(conn, golden_file, options)
    if len(data.split.validation) < MIN_VALIDATION_QUERIES and not options.force:
        raise CannotTune("invalid_input", too_few_to_decide(data, options))
    current.embed([data.validation[0].query])  # loads the model before anything is timed
    timed = time.perf_counter()
    before = evaluate(conn, lambda: current, data.validation)
    seconds_per_query = (time.perf_counter() - timed) / len(data.validation)
    if options.negatives == "mined":
        data.mine_negatives(conn, current)

    pairs, final_pairs = data.deciding_pairs(), data.final_pairs()
    training = Training(source, pairs, options)
    warm_up_export()
    seconds_per_step, step_tokens = training.timed_step()
    plan = TunePlan(
        current.model_name,
        data,
        len(pairs),
        training.steps,
        len(final_pairs),
        Training.steps_for(final_pairs, options),
        training.threads,
        seconds_per_step,
        seconds_per_step / step_tokens,
        one_value(conn.execute("select count(*) from payrail.provider_methods where enabled")),
        seconds_per_record(conn, current),
        seconds_per_query,
        preparing_seconds=0.0,
        checkpoints=options.epochs if options.decide_epochs else 0,
    )
    plan.preparing_seconds = clock.lap("preparing")
    announce(plan)

    with writing_to(models_dir, tuned_models.FULL_HINT), tuned_models.scratch_directory(models_dir, tuned_models.TUNING_PREFIX) as scratch:
        decided = first_training(conn, training, current, scratch, data, lambda step, steps: progress("tune", step, steps), clock, measure)
        report = TuneReport(plan, options, warnings, before, decided.after, training_seconds=decided.seconds, epochs_tried=decided.tried, epochs=decided.epochs)
        if report.better or options.force:
            final = Training(source, final_pairs, options, epochs=decided.epochs)
            seconds, kept = train_candidate(final, current, scratch / "final", lambda step, steps: progress("tune_final", step, steps))
            clock.lap("final_training")
            measure("tune_final", kept)
            trained_on = [query.labelled for query in data.all_queries]
            report.final = FinalModel(
                len(final_pairs), final.steps, seconds, evaluate(conn, lambda: current, trained_on), evaluate_candidate(conn, kept, trained_on)
            )
            clock.lap("final_evaluating")
            report.model = kept.model_name
            report.seconds, report.phases = clock.total(), clock.seconds
            staged = kept.models_dir / kept.model_name
            (staged / tuned_models.MANIFEST).write_text(json.dumps(manifest(report, golden_path, golden_digest), indent=2) + "\n", encoding="utf-8")
            report.path = tuned_models.keep(staged, models_dir)
    report.seconds, report.phases = clock.total(), clock.seconds
    return report


@dataclass
class FirstTraining:
    """The deciding training's model, its figures on validation and the epochs it trained."""

    seconds: float
    candidate: LocalEmbedder
    after: EvaluationReport
    epochs: int
    # With decided epochs: each epoch count measured, and its metrics.
    tried: list[tuple[int, dict[str, float]]]


def first_training(
    conn: psycopg.Connection,
    training: Training,
    current: LocalEmbedder,
    scratch: Path,
    data: TuneData,
    progress: Callable[[int, int], None],
    clock: Phases,
    measure: Callable[[str, LocalEmbedder], None],
) -> FirstTraining:
    """The deciding training, measured on the validation queries (and by measure, tune's). With
    decided epochs (options.decide_epochs), its model is measured after each epoch, and the best
    is the candidate: the highest MRR@3, the fewer epochs on a tie."""
    if not training.options.decide_epochs:
        seconds, candidate = train_candidate(training, current, scratch / "deciding", progress)
        clock.lap("training")
        measure("tune", candidate)
        after = evaluate_candidate(conn, candidate, data.validation)
        clock.lap("evaluating")
        return FirstTraining(seconds, candidate, after, training.epochs, [])
    tried: list[tuple[int, dict[str, float]]] = []
    best: tuple[int, LocalEmbedder, EvaluationReport] | None = None

    def measured(epoch: int) -> None:
        nonlocal best
        clock.lap("training")
        directory = scratch / f"epoch-{epoch}"
        directory.mkdir()
        training.save(directory / "weights")
        candidate = named_and_exported(directory / "weights", current)
        after = evaluate_candidate(conn, candidate, data.validation)
        tried.append((epoch, after.metrics))
        if best is None or after.metrics[DECIDING_METRIC] > best[2].metrics[DECIDING_METRIC]:
            best = (epoch, candidate, after)
        clock.lap("epochs")

    seconds = training.run(scratch / "deciding", progress, at_epoch_end=measured) - clock.seconds["epochs"]
    clock.lap("training")
    assert best is not None  # every training has an epoch
    epochs, candidate, after = best
    measure("tune", candidate)
    clock.lap("epochs")
    return FirstTraining(seconds, candidate, after, epochs, tried)


def train_candidate(training: Training, current: LocalEmbedder, directory: Path, progress: Callable[[int, int], None]) -> tuple[float, LocalEmbedder]:
    """Runs training into directory, names the model by its content, exports its ONNX graph, and
    returns the training's seconds and the model's embedder (found in directory)."""
    directory.mkdir()
    seconds = training.run(directory / "weights", progress)
    return seconds, named_and_exported(directory / "weights", current)


def named_and_exported(weights: Path, current: LocalEmbedder) -> LocalEmbedder:
    """A model's sentence-transformers files, renamed by their content beside where they are, with
    their ONNX graph exported: its embedder."""
    name = tuned_models.tuned_name(tuned_models.base_model(current.model_name), weights)
    staged = weights.rename(weights.parent / name)
    local_model.export(staged, staged / tuned_models.GRAPH_DIR, unwritable_hint=tuned_models.UNWRITABLE_HINT)
    return LocalEmbedder(name, models_dir=weights.parent)


def manifest(report: TuneReport, golden_path: Path | None, golden_digest: str) -> dict:
    """tuning.json: how the model was made, with what, and what it measured."""
    from importlib.metadata import version

    made = {key: value for key, value in report.to_json().items() if key not in ("kept", "path")}
    return {
        **made,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        # The golden queries it learnt from: a file's (its name) or the registry's (None), hashed as `golden export` writes them.
        "goldenQueries": {"file": golden_path.name if golden_path else None, "sha256": golden_digest},
        "libraries": {name: version(name) for name in ("torch", "sentence-transformers", "transformers")},
        "python": sys.version.split()[0],
    }
