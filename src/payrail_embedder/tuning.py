"""`payrail-embedder model tune`: the registry's local model, fine-tuned on an operator's labelled queries.

The labelled queries are `eval`'s golden file. Each query is paired with the record text of each
relevant record the registry holds enabled (record_text: exactly what the registry embeds), and the
model learns to place a query nearer its records than the other records of its training batch
(sentence-transformers' MultipleNegativesRankingLoss with in-batch negatives; no text twice in a
batch, so no record is its own query's negative). Part of the queries is kept aside by provider:
validation queries name only records of providers that no training query names, so validation
measures records the training never saw. eval's metrics on them, before (the registry's model,
through the search path) and after (the candidate, in memory: evaluation.evaluate_candidate),
decide whether the model is kept: it must raise MRR@3, unless forced.

Deterministic: the same registry, golden file, options and seed give the same weights, hence the
same name, on the same machine with the same number of threads (how a floating-point sum is split
between threads changes its last bits). Only local sentence-transformers models can be tuned:
OpenAI's embedding models are served, not shipped, so there are no weights to train here.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import psycopg

from .embedders import LOCAL_DEFAULT_MODEL, Embedder, LocalEmbedder, local_model, record_text, tuned_models
from .embedders.local_model import load_sentence_transformer
from .embedders.openai import OPENAI_MODEL_DIMENSIONS
from .errors import CodedError
from .evaluation import EvaluationReport, LabelledQuery, NormalizedNames, evaluate, evaluate_candidate, label_warnings, read_labelled_queries
from .registry_model import registry_model, require_embedder_model

# The metric a tuned model must raise on validation to be kept: it counts a hit and how high it ranks.
DECIDING_METRIC = "mrr@3"
# Added to the estimate for the ONNX export and its check (10-20 s on 2 cores).
EXPORT_SECONDS = 20.0
TRAINING_HINT = "pip install torch==2.13.0 'payrail-agent-search[local]'"
# A training step embeds its texts in passes of this many, sorted by length (embed_by_length).
TEXTS_PER_PASS = 8


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


def import_training():
    """torch and sentence-transformers' trainer (with datasets and accelerate), or CannotTune saying what to install."""
    try:
        import datasets  # noqa: F401 (the trainer's dataset type)
        import torch
        from sentence_transformers import SentenceTransformerTrainer  # noqa: F401
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
        self.model = load_sentence_transformer(str(source))
        self.steps = math.ceil(len(self.pairs) / options.batch_size) * options.epochs

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
class TunePlan:
    """What model tune will do, and how long it expects to take: said before it starts."""

    tuned_from: str
    golden_queries: int
    usable_queries: int
    split: Split
    pairs: int
    steps: int
    threads: int
    seconds_per_step: float
    records: int
    embedding_seconds: float

    @property
    def estimated_seconds(self) -> float:
        return self.steps * self.seconds_per_step + self.embedding_seconds + EXPORT_SECONDS


@dataclass
class TuneReport:
    plan: TunePlan
    options: TuneOptions
    label_warnings: list[dict]
    # eval on the validation queries: the registry's model (the search path), then the tuned one (in memory).
    before: EvaluationReport
    after: EvaluationReport | None = None
    model: str | None = None
    kept: bool = False
    path: Path | None = None
    training_seconds: float = 0.0
    seconds: float = 0.0

    @property
    def better(self) -> bool:
        return self.after.metrics[DECIDING_METRIC] > self.before.metrics[DECIDING_METRIC]

    def to_json(self) -> dict:
        plan, split = self.plan, self.plan.split
        return {
            "model": self.model,
            "kept": self.kept,
            "better": self.better,
            "path": str(self.path) if self.path else None,
            "tunedFrom": plan.tuned_from,
            "golden": {"queries": plan.golden_queries, "usable": plan.usable_queries, "labelWarnings": self.label_warnings},
            "split": {
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
            "estimatedSeconds": round(plan.estimated_seconds),
            "seconds": round(self.seconds, 1),
            "validation": {"queries": len(split.validation), "before": self.before.metrics, "after": self.after.metrics},
        }


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


def tune(
    conn: psycopg.Connection,
    embedder: Embedder,
    models_dir: Path,
    golden_path: Path,
    options: TuneOptions,
    *,
    announce: Callable[[TunePlan], None],
    progress: Callable[[int, int], None],
) -> TuneReport:
    """Tunes the registry's model on golden_path's queries, keeps the result in models_dir when it
    beats the registry's model on validation (or options.force), and reports both. The registry is
    read, never changed: `model switch NAME` makes the tuned model the registry's."""
    started = time.perf_counter()
    current, source = tunable_model(conn, embedder, models_dir)
    queries = read_labelled_queries(golden_path)
    golden, warnings = golden_queries(conn, queries)
    split = split_by_provider(golden, options.validation_fraction, options.seed)
    pairs = training_pairs(split.training)
    if not pairs or not split.validation:
        raise CannotTune(
            "invalid_input",
            f"{golden_path}: {len(golden)} of {len(queries)} queries name enabled records of this registry, over "
            f"{split.providers} providers; the split by provider (--validation-fraction {options.validation_fraction:g}, "
            f"--seed {options.seed}) left {len(split.training)} for training and {len(split.validation)} for validation. "
            "Both need queries: label more queries, over more providers",
        )
    before = evaluate(conn, lambda: current, [q.labelled for q in split.validation])

    training = Training(source, pairs, options)
    records = conn.execute("select count(*) from payrail.provider_methods where enabled").fetchone()[0]
    sample = [text for _, text in pairs[:32]]
    timed = time.perf_counter()
    # A text at a time: together they would be padded to the longest, 3x slower per text than the
    # registry's records, which are embedded sorted by length and so barely padded.
    for text in sample:
        current.embed([text])
    per_record = (time.perf_counter() - timed) / len(sample)
    plan = TunePlan(
        current.model_name, len(queries), len(golden), split, len(pairs), training.steps, training.threads,
        training.seconds_per_step(), records, per_record * (records + len(split.validation)),
    )  # fmt: skip
    announce(plan)

    report = TuneReport(plan, options, warnings, before)
    models_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".tuning-", dir=models_dir) as scratch:
        weights = Path(scratch) / "weights"
        report.training_seconds = training.run(weights, progress)
        report.model = tuned_models.tuned_name(tuned_models.base_model(current.model_name), weights)
        staged = weights.rename(Path(scratch) / report.model)
        local_model.export(staged, staged / tuned_models.GRAPH_DIR)
        candidate = LocalEmbedder(report.model, models_dir=Path(scratch))
        report.after = evaluate_candidate(conn, candidate, [q.labelled for q in split.validation])
        report.seconds = time.perf_counter() - started
        if report.better or options.force:
            (staged / tuned_models.MANIFEST).write_text(json.dumps(manifest(report, golden_path), indent=2) + "\n", encoding="utf-8")
            report.path = tuned_models.keep(staged, models_dir)
            report.kept = True
    return report


def manifest(report: TuneReport, golden_path: Path) -> dict:
    """tuning.json: how the model was made, with what, and what it measured."""
    from importlib.metadata import version

    made = {key: value for key, value in report.to_json().items() if key not in ("kept", "path")}
    return {
        **made,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "goldenFile": {"name": golden_path.name, "sha256": hashlib.sha256(golden_path.read_bytes()).hexdigest()},
        "libraries": {name: version(name) for name in ("torch", "sentence-transformers", "transformers")},
        "python": sys.version.split()[0],
    }
