"""`payrail-embedder model tune`: the registry's local model, fine-tuned on its golden queries.

The labelled queries are the registry's golden queries (golden.py), or an operator's file in
eval's format. Each query is paired with the record text of each relevant record the registry
holds enabled (record_text: exactly what the registry embeds), and the model learns to place a
query nearer its records than the other records of its training batch (sentence-transformers'
MultipleNegativesRankingLoss with in-batch negatives; no text twice in a batch, so no record is
its own query's negative).

Two trainings, the same options and seed. The first decides: part of the queries is kept aside by
provider (validation queries name only records of providers that no training query names, so
validation measures records the training never saw), and eval's metrics on them, before (the
registry's model, through the search path) and after (the candidate, in memory:
evaluation.evaluate_candidate), decide whether tuning helps: it must raise MRR@3, unless forced.
The second makes the model that is kept: trained on every query, the validation queries and those
naming both sides of the split included. Its figures on those queries are reported too, but they
are optimistic (it trained on them); the first training's are the honest estimate.

Record pairs (record_queries) adapt a registry without golden queries, or one beside them: each
enabled record's Purpose line is a query whose answer is its own record. With no golden queries,
they are split by provider and decide as golden queries would, which says the model still finds
records by their own descriptions (a proxy: agents' questions are not descriptions).

Deterministic: the same registry, golden queries, options and seed give the same weights, hence
the same name, on the same machine with the same number of threads (how a floating-point sum is
split between threads changes its last bits). Only local sentence-transformers models can be
tuned: OpenAI's embedding models are served, not shipped, so there are no weights to train here.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import math
import random
import re
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import psycopg

from ..base.errors import CodedError
from ..base.output_files import writing_to
from ..base.reports import Report, duration
from ..base.safe_text import escape_controls
from ..embedders import LOCAL_DEFAULT_MODEL, Embedder, LocalEmbedder, local_model, record_text, tuned_models
from ..embedders.local_model import load_sentence_transformer
from ..embedders.openai import OPENAI_MODEL_DIMENSIONS
from ..postgres.connection import one_value
from ..registry import golden as golden_module
from ..registry.embedding_model import registry_model, require_embedder_model
from ..registry.labelled_queries import LabelledQuery, NormalizedNames, label_warnings, read_labelled_queries
from ..registry.search import QUERY_MAX_CHARACTERS, InvalidQuery, Query, check_query
from .evaluation import EvaluationReport, evaluate, evaluate_candidate, side_by_side

# The metric a tuned model must raise on validation to be kept: it counts a hit and how high it ranks.
DECIDING_METRIC = "mrr@3"
# Added to the estimate for the ONNX export and its check (10-20 s on 2 cores).
EXPORT_SECONDS = 20.0
TRAINING_HINT = "pip install torch==2.13.0 'payrail-agent-search[local]'"
# A training step embeds its texts in passes of this many, sorted by length (embed_by_length).
TEXTS_PER_PASS = 8
# --record-pairs: auto (only when there are no golden queries), on (beside them too), off.
RECORD_PAIRS = ("auto", "on", "off")
# A record's Purpose line: the guidance template's (DESIGN.md), its text after the label.
PURPOSE_LINE = re.compile(r"^Purpose:[^\S\n]*(.*?)\s*$", re.MULTILINE)


class CannotTune(CodedError):
    """model tune cannot run as asked, with the code its caller branches on."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(detail)
        self.code = code


@dataclass(frozen=True)
class TuneOptions:
    validation_fraction: float = 0.2
    seed: int = 0
    epochs: int = 2
    batch_size: int = 32
    learning_rate: float = 2e-5
    # CPU threads for torch; None: torch's default (one per core).
    threads: int | None = None
    force: bool = False
    # Train on queries made from the records too (record_queries): RECORD_PAIRS' choices.
    record_pairs: str = "auto"

    def uses_record_pairs(self, golden_queries: int) -> bool:
        """Whether record pairs are trained on, given this many golden queries (usable or not):
        "auto" uses them only where there are none (docs/benchmarks.md, Retrieval quality)."""
        return self.record_pairs == "on" or (self.record_pairs == "auto" and not golden_queries)


@dataclass(frozen=True)
class GoldenQuery:
    labelled: LabelledQuery
    # (provider, method, guidance) of each relevant record the registry holds enabled.
    records: tuple[tuple[str, str, str], ...]
    # Their providers, normalized as the registry compares names.
    providers: frozenset[str]


@dataclass
class Split:
    training: list[GoldenQuery]
    validation: list[GoldenQuery]
    # Queries naming records of both sides: in neither, so no validation record is trained on.
    left_out: list[GoldenQuery]
    providers: int
    # The providers drawn for validation: no training query names one.
    validation_providers: frozenset[str]


def golden_queries(conn: psycopg.Connection, queries: Sequence[LabelledQuery]) -> tuple[list[GoldenQuery], list[dict]]:
    """Each labelled query with the enabled records its labels name; queries naming none are left
    out. Also the label warnings eval gives (labels the registry lacks, or holds as drafts)."""
    names = NormalizedNames(conn, [pair for q in queries for pair in q.relevant])
    labels = {names.pair(*pair) for q in queries for pair in q.relevant}
    rows = conn.execute(
        """
        select pm.provider, pm.method, pm.guidance, payrail._normalize_name(pm.provider), payrail._normalize_name(pm.method)
        from payrail.provider_methods as pm
        where pm.enabled
          and (payrail._normalize_name(pm.provider), payrail._normalize_name(pm.method)) in (select * from unnest(%s::text[], %s::text[]))
        """,
        ([p for p, _ in labels], [m for _, m in labels]),
    ).fetchall()
    records = {(key_provider, key_method): (provider, method, guidance) for provider, method, guidance, key_provider, key_method in rows}
    golden = []
    for labelled in queries:
        keys = [key for key in dict.fromkeys(names.pair(*pair) for pair in labelled.relevant) if key in records]
        if keys:
            golden.append(GoldenQuery(labelled, tuple(records[key] for key in keys), frozenset(provider for provider, _ in keys)))
    return golden, label_warnings(queries, names)


def split_by_provider(golden: Sequence[GoldenQuery], fraction: float, seed: int) -> Split:
    """Providers in a seeded random order go to validation until the queries naming only them reach
    `fraction` of all; training gets the queries naming none of them."""
    providers = sorted({provider for query in golden for provider in query.providers})
    random.Random(seed).shuffle(providers)
    queries_of = defaultdict(list)
    for index, query in enumerate(golden):
        for provider in query.providers:
            queries_of[provider].append(index)
    outside = [len(query.providers) for query in golden]  # each query's providers not in validation yet
    chosen: set[str] = set()
    inside = 0
    for provider in providers:
        if inside >= fraction * len(golden):
            break
        chosen.add(provider)
        for index in queries_of[provider]:
            outside[index] -= 1
            inside += outside[index] == 0
    split = Split([], [], [], len(providers), frozenset(chosen))
    for query, left in zip(golden, outside):
        if left == 0:
            split.validation.append(query)
        elif query.providers & chosen:
            split.left_out.append(query)
        else:
            split.training.append(query)
    return split


def training_pairs(queries: Sequence[GoldenQuery]) -> list[tuple[str, str]]:
    """(query, record text) for each relevant record of each query."""
    return [(query.labelled.query, record_text(*record)) for query in queries for record in query.records]


def record_queries(conn: psycopg.Connection) -> list[GoldenQuery]:
    """Queries made from the registry's records alone: each enabled record's Purpose line (its
    guidance's first line starting "Purpose:", without the label, cut at a query's 2,000
    characters) with that record as its answer. Records with the same line make one query naming
    them all; a record without one, or whose line search would refuse, makes none."""
    rows = conn.execute(
        "select provider, method, guidance, payrail._normalize_name(provider) from payrail.provider_methods where enabled order by id"
    ).fetchall()
    answers: dict[Query, list[tuple[tuple[str, str, str], str]]] = {}
    for provider, method, guidance, provider_key in rows:
        purpose = PURPOSE_LINE.search(guidance)
        try:
            query = check_query(purpose.group(1)[:QUERY_MAX_CHARACTERS] if purpose else "")
        except InvalidQuery:
            continue
        answers.setdefault(query, []).append(((provider, method, guidance), provider_key))
    return [
        GoldenQuery(
            LabelledQuery(None, query, tuple((provider, method) for (provider, method, _), _ in records)),
            tuple(record for record, _ in records),
            frozenset(provider_key for _, provider_key in records),
        )
        for query, records in answers.items()
    ]


def import_training():
    """torch and sentence-transformers' trainer (with datasets and accelerate), or CannotTune saying what to install."""
    try:
        # Imported here to say what is missing before anything starts; the trainer imports them again.
        for module in ("datasets", "sentence_transformers.sentence_transformer.trainer"):
            importlib.import_module(module)
        import torch
    except ImportError as error:
        raise CannotTune("misconfigured", f"model tune trains with torch and sentence-transformers: {TRAINING_HINT} ({error})") from error
    return torch


def embed_by_length(model, features: dict, texts_per_pass: int = TEXTS_PER_PASS):
    """model(features)'s sentence embeddings, computed in passes over texts of similar length, each
    pass cut to its own longest text: the same embeddings as one pass over the whole batch (padding
    is on the right and masked out), without computing the padding. The trainer pads a step's texts
    to its longest, and record texts are short with a long tail (the benchmark's: median 60 tokens,
    one in twenty cut at 256), so nearly every step would pay for 256 tokens per text."""
    import torch

    lengths = features["attention_mask"].sum(dim=1)
    order = torch.argsort(lengths, stable=True)
    passes = []
    for start in range(0, len(order), texts_per_pass):
        rows = order[start : start + texts_per_pass]
        width = int(lengths[rows].max())
        part = {key: value[rows, :width] if isinstance(value, torch.Tensor) else value for key, value in features.items()}
        passes.append(model(part)["sentence_embedding"])
    return torch.cat(passes)[torch.argsort(order)]


def ranking_loss(model):
    """sentence-transformers' MultipleNegativesRankingLoss, each column embedded by embed_by_length."""
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

    class LengthSortedRankingLoss(MultipleNegativesRankingLoss):
        def forward(self, sentence_features, labels):
            return self.compute_loss_from_embeddings([embed_by_length(self.model, features) for features in sentence_features], labels)

    return LengthSortedRankingLoss(model)


class Training:
    """One fine-tuning run of a sentence-transformers model directory on (query, record text) pairs."""

    def __init__(self, source: Path, pairs: Sequence[tuple[str, str]], options: TuneOptions) -> None:
        torch = import_training()
        if options.threads:
            torch.set_num_threads(options.threads)
        self.threads = torch.get_num_threads()
        self.pairs = list(pairs)
        self.options = options
        # Local files only: the hub is never asked, and the tokenizer saves the same setting (its
        # tokenizer_config.json keeps local_files_only), so HF_HUB_OFFLINE cannot change the name.
        self.model = load_sentence_transformer(str(source), local_files_only=True)
        self.steps = self.steps_for(self.pairs, options)

    @staticmethod
    def steps_for(pairs: Sequence, options: TuneOptions) -> int:
        return math.ceil(len(pairs) / options.batch_size) * options.epochs

    def seconds_per_step(self) -> float:
        """One training step's forward and backward pass, timed on a batch of the pairs (evenly
        spread), without changing the weights; the faster of two, as the first pays for allocations."""
        size = min(self.options.batch_size, len(self.pairs))
        sample = [self.pairs[i * len(self.pairs) // size] for i in range(size)]
        loss = ranking_loss(self.model)
        features = [self.model.preprocess([query for query, _ in sample]), self.model.preprocess([text for _, text in sample])]
        self.model.train()
        timings = []
        for _ in range(2):
            started = time.perf_counter()
            loss(features, None).backward()
            timings.append(time.perf_counter() - started)
            self.model.zero_grad(set_to_none=True)
        return min(timings)

    def run(self, target: Path, progress: Callable[[int, int], None]) -> float:
        """Trains, seeded, and saves the model's sentence-transformers files into target; the seconds
        it took. progress(step, steps) is called as training starts (step 0) and after every step."""
        import transformers
        from datasets import Dataset
        from sentence_transformers import SentenceTransformerTrainer
        from sentence_transformers.sentence_transformer.training_args import BatchSamplers, SentenceTransformerTrainingArguments

        class QuietTrainer(SentenceTransformerTrainer):
            def add_model_card_callback(self, default_args_dict) -> None:
                """No model card: it would print its own progress, and a tuned model carries tuning.json instead."""

        class Progress(transformers.TrainerCallback):
            def on_train_begin(self, args, state, control, **kwargs) -> None:
                progress(0, state.max_steps)

            def on_step_end(self, args, state, control, **kwargs) -> None:
                progress(state.global_step, state.max_steps)

        options = self.options
        transformers.logging.set_verbosity_error()
        transformers.set_seed(options.seed)
        with tempfile.TemporaryDirectory(prefix=".trainer-", dir=target.parent) as scratch:
            arguments = SentenceTransformerTrainingArguments(
                output_dir=scratch,
                num_train_epochs=options.epochs,
                per_device_train_batch_size=options.batch_size,
                learning_rate=options.learning_rate,
                warmup_steps=0.1,  # a tenth of the steps
                seed=options.seed,
                data_seed=options.seed,
                batch_sampler=BatchSamplers.NO_DUPLICATES,
                use_cpu=True,
                save_strategy="no",
                logging_strategy="no",
                report_to="none",
                disable_tqdm=True,
            )
            dataset = Dataset.from_dict({"anchor": [q for q, _ in self.pairs], "positive": [t for _, t in self.pairs]})
            trainer = QuietTrainer(
                model=self.model,
                args=arguments,
                train_dataset=dataset,
                loss=ranking_loss(self.model),
                callbacks=[Progress()],
            )
            trainer.remove_callback(transformers.trainer_callback.PrinterCallback)  # it prints the logs on standard output
            started = time.perf_counter()
            trainer.train()
            seconds = time.perf_counter() - started
        self.model.save(str(target), create_model_card=False)
        return seconds


@dataclass
class TuneData:
    """What model tune trains on: the usable golden queries and the queries made from the records
    (when record pairs are on), the split that decides, and the pairs of each training."""

    # Where the golden queries come from: "the registry's golden queries", or the file's name.
    source: str
    golden_queries: int
    usable: list[GoldenQuery]
    made: list[GoldenQuery]
    split: Split
    # The GOLDEN.jsonl file tune was given, as given; None for the registry's golden queries.
    path: Path | None = None

    @property
    def decides_on_golden(self) -> bool:
        """Validation is on golden queries; otherwise (no golden queries) on queries made from the records."""
        return bool(self.usable)

    @property
    def validation(self) -> list[LabelledQuery]:
        return [query.labelled for query in self.split.validation]

    @property
    def all_queries(self) -> list[GoldenQuery]:
        """Every query the final training learns from and its figures are measured on: the golden
        queries, or the made ones when there are none."""
        return self.usable or self.made

    def deciding_pairs(self) -> list[tuple[str, str]]:
        """The first training's: the split's training queries, and with golden queries every made
        query (made from records, not labels: nothing of the validation queries' answers)."""
        return training_pairs(self.split.training) + (training_pairs(self.made) if self.decides_on_golden else [])

    def final_pairs(self) -> list[tuple[str, str]]:
        """The kept model's: every query, validation and left-out ones included."""
        return training_pairs(self.usable) + training_pairs(self.made)


@dataclass
class TunePlan:
    """What model tune will do, and how long it expects to take: said before it starts."""

    tuned_from: str
    data: TuneData
    pairs: int
    steps: int
    final_pairs: int
    final_steps: int
    threads: int
    seconds_per_step: float
    records: int
    # Embedding every record once, and the validation queries.
    embedding_seconds: float

    @property
    def split(self) -> Split:
        return self.data.split

    @property
    def estimated_seconds(self) -> float:
        """Both trainings, each model's export and its pass over the records: when the model is kept."""
        return (self.steps + self.final_steps) * self.seconds_per_step + 2 * (self.embedding_seconds + EXPORT_SECONDS)

    def log_fields(self) -> dict[str, object]:
        """The plan as the tune_plan event says it off a terminal."""
        return {
            "tuned_from": self.tuned_from,
            "golden_queries": self.data.golden_queries,
            "usable": len(self.data.usable),
            "record_queries": len(self.data.made),
            "split_on": "golden queries" if self.data.decides_on_golden else "record queries",
            "validation": len(self.split.validation),
            "training": len(self.split.training),
            "left_out": len(self.split.left_out),
            "steps": self.steps,
            "final_steps": self.final_steps,
            "expected_s": round(self.estimated_seconds),
        }

    def describe(self) -> list[str]:
        """What tune is about to do and how long it expects it to take, for people (tune's JSON
        report carries the same figures once it is done)."""
        data, split = self.data, self.split
        queries = f"{len(data.usable)} of {data.golden_queries} golden queries name enabled records"
        made = f"{len(data.made)} queries made from the records' Purpose lines"
        return [
            f"tuning {self.tuned_from} on {data.source}: {queries}" + (f"; {made}" if data.made else ""),
            f"split by provider{'' if data.decides_on_golden else ' (the record queries: no golden query to decide on)'}: "
            f"{len(split.validation)} validation queries over {len(split.validation_providers)} of {split.providers} providers; "
            f"{len(split.training)} training queries; {len(split.left_out)} naming both sides left out",
            f"expected: about {duration(self.estimated_seconds)} if kept ({self.steps} training steps to decide ({self.pairs} pairs), then "
            f"{self.final_steps} on every query ({self.final_pairs} pairs), at {self.seconds_per_step:.1f} s a step, timed on one batch "
            f"on {self.threads} thread{'s' if self.threads > 1 else ''}; embedding {self.records} records for each model, "
            f"{duration(self.embedding_seconds)}; each ONNX export, about {duration(EXPORT_SECONDS)})",
        ]


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

    @property
    def kept(self) -> bool:
        return self.path is not None

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
                "epochs": self.options.epochs,
                "batchSize": self.options.batch_size,
                "learningRate": self.options.learning_rate,
                "threads": plan.threads,
                "steps": plan.steps,
                "seconds": round(self.training_seconds, 1),
            },
            "validation": {"queries": len(split.validation), "before": self.before.metrics, "after": self.after.metrics},
            "final": self.final.to_json() if self.final else None,
            "estimatedSeconds": round(plan.estimated_seconds),
            "seconds": round(self.seconds, 1),
        }

    def describe(self) -> list[str]:
        """The deciding figures, then the kept model's, and what to do with it."""
        data = self.plan.data
        lines = [f"validation: {len(self.plan.split.validation)} {'' if data.decides_on_golden else 'record '}queries on providers the training never saw"]
        lines += side_by_side([self.plan.tuned_from, "tuned"], [self.before.metrics, self.after.metrics])
        change = mrr_change(self.before, self.after)
        final = self.final  # the kept model's
        if final is None:
            return [*lines, f"not kept: {change} does not beat the registry's model {self.plan.tuned_from}; --force keeps it anyway"]
        return [
            *lines,
            f"kept {self.model} in {self.path} (validation {change}{'' if self.better else ', kept by --force'}), in {duration(self.seconds)}",
            f"it was then trained on all {final.before.queries} {'golden' if data.decides_on_golden else 'record'} queries "
            f"({final.pairs} pairs): {mrr_change(final.before, final.after)} on them, optimistic as it trained on them; "
            "the validation figures are the honest estimate",
            f"see it side by side: payrail-embedder eval{f' {data.path}' if data.path else ''} --compare {self.model}",
            f"make it the registry's model: payrail-embedder model switch {self.model}",
        ]


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
    started = time.perf_counter()
    # A file is read first: one it refuses is refused before the model is loaded.
    golden_file = (golden_path, read_labelled_queries(golden_path)) if golden_path is not None else None
    current, source = tunable_model(conn, embedder, models_dir)
    data, warnings, golden_digest = tune_data(conn, golden_file, options)
    before = evaluate(conn, lambda: current, data.validation)

    pairs, final_pairs = data.deciding_pairs(), data.final_pairs()
    training = Training(source, pairs, options)
    records = one_value(conn.execute("select count(*) from payrail.provider_methods where enabled"))
    sample = [text for _, text in pairs[:32]]
    timed = time.perf_counter()
    # A text at a time: together they would be padded to the longest, 3x slower per text than the
    # registry's records, which are embedded sorted by length and so barely padded.
    for text in sample:
        current.embed([text])
    per_record = (time.perf_counter() - timed) / len(sample)
    plan = TunePlan(
        current.model_name,
        data,
        len(pairs),
        training.steps,
        len(final_pairs),
        Training.steps_for(final_pairs, options),
        training.threads,
        training.seconds_per_step(),
        records,
        per_record * (records + len(data.validation)),
    )
    announce(plan)

    with writing_to(models_dir, tuned_models.FULL_HINT), tuned_models.scratch_directory(models_dir, tuned_models.TUNING_PREFIX) as scratch:
        training_seconds, candidate = train_candidate(training, current, scratch / "deciding", lambda step, steps: progress("tune", step, steps))
        measure("tune", candidate)
        report = TuneReport(plan, options, warnings, before, evaluate_candidate(conn, candidate, data.validation), training_seconds=training_seconds)
        if report.better or options.force:
            final = Training(source, final_pairs, options)
            seconds, kept = train_candidate(final, current, scratch / "final", lambda step, steps: progress("tune_final", step, steps))
            measure("tune_final", kept)
            trained_on = [query.labelled for query in data.all_queries]
            report.final = FinalModel(
                len(final_pairs), final.steps, seconds, evaluate(conn, lambda: current, trained_on), evaluate_candidate(conn, kept, trained_on)
            )
            report.model = kept.model_name
            report.seconds = time.perf_counter() - started
            staged = kept.models_dir / kept.model_name
            (staged / tuned_models.MANIFEST).write_text(json.dumps(manifest(report, golden_path, golden_digest), indent=2) + "\n", encoding="utf-8")
            report.path = tuned_models.keep(staged, models_dir)
    report.seconds = time.perf_counter() - started
    return report


def train_candidate(training: Training, current: LocalEmbedder, directory: Path, progress: Callable[[int, int], None]) -> tuple[float, LocalEmbedder]:
    """Runs training into directory, names the model by its content, exports its ONNX graph, and
    returns the training's seconds and the model's embedder (found in directory)."""
    directory.mkdir()
    weights = directory / "weights"
    seconds = training.run(weights, progress)
    name = tuned_models.tuned_name(tuned_models.base_model(current.model_name), weights)
    staged = weights.rename(directory / name)
    local_model.export(staged, staged / tuned_models.GRAPH_DIR, unwritable_hint=tuned_models.UNWRITABLE_HINT)
    return seconds, LocalEmbedder(name, models_dir=directory)


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
