"""`model`: show, switch or tune the registry's embedding model; install and list tuned models."""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import click

from ..base import logs
from ..base.errors import EXIT_STATUS
from ..base.progress import progress
from ..base.reports import emit
from ..embedders import tuned_models
from ..model import switch
from ..quality import tuning, tuning_data
from ..settings import FiniteRange, Settings
from .common import BATCH_SIZE_OPTION, JSON_OPTION, embedding_run_fields, log_change, scratch_removed_on_signals


@click.group()
def model():
    """Show, switch or tune the registry's embedding model; install and list tuned models."""


@model.command("show")
@JSON_OPTION
@click.pass_obj
def model_show(settings: Settings, as_json):
    """Print the registry's embedding model and how many records carry a vector from it."""
    with settings.connect() as conn:
        info = switch.model_info(conn)
    emit(info, as_json)


@model.command("switch")
@click.argument("new_model")
@BATCH_SIZE_OPTION
@JSON_OPTION
@click.pass_obj
def model_switch_command(settings: Settings, new_model, batch_size, as_json):
    """Re-embed every record with NEW_MODEL, then make it the registry's model in one transaction.

    NEW_MODEL runs on the backend of --embedder. Until the switch, search keeps answering with
    the current model; staged vectors are kept batch by batch, so an interrupted run resumes.
    The golden queries are embedded with NEW_MODEL before the switch too. Exits 1 and lists the
    records left pending when the embedder fails.
    """
    started = time.monotonic()
    embedder = replace(settings, model=new_model).embedder()
    with settings.connect() as conn:
        with progress("model_switch", sum(1 for _ in switch.ids_to_stage(conn, new_model))) as advance:
            report = switch.switch_model(conn, embedder, batch_size=batch_size, progress=advance)
        log_change(
            "model_switch",
            conn,
            started,
            failed=report.error is not None,
            model=report.model,
            previous=report.previous.name if report.previous else None,
            switched=report.switched,
            staged=report.staged,
            moved=report.moved,
            drafts_cleared=report.drafts_cleared,
            **embedding_run_fields(report),
        )
    emit(report, as_json)
    if report.error is not None:
        sys.exit(EXIT_STATUS["unavailable"])


def choices(name: str, named: Sequence[str], default: str, help: str):
    """An option taking one of a few named values, its default shown."""
    return click.option(name, type=click.Choice(named), default=default, show_default=True, help=help)


@model.command("tune")
@click.argument("golden_file", metavar="[GOLDEN.jsonl]", required=False, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--validation-fraction",
    type=FiniteRange(0, 1, min_open=True, max_open=True),
    default=tuning_data.TuneOptions.validation_fraction,
    show_default=True,
    help="Keep about this share of the queries aside to decide, split by provider: no training query names a validation query's providers.",
)
@click.option(
    "--seed",
    type=int,
    default=tuning_data.TuneOptions.seed,
    show_default=True,
    help="Seeds the split and the training: the same inputs and seed give the same model.",
)
@click.option("--epochs", type=click.IntRange(1, 100), default=tuning_data.TuneOptions.epochs, show_default=True, help="Passes over the training pairs.")
@click.option(
    "--decide-epochs",
    is_flag=True,
    help="Let validation decide the passes too: the deciding model is measured after each of --epochs passes, and the kept one trains the best count.",
)
@click.option(
    "--batch-size",
    type=click.IntRange(2, 1024),
    default=tuning_data.TuneOptions.batch_size,
    show_default=True,
    help="Pairs per training step; each query's negatives are the other records of its step (and their mined negatives).",
)
@choices(
    "--negatives",
    tuning_data.NEGATIVES,
    tuning_data.TuneOptions.negatives,
    "mined: each pair also against a record the registry's model ranks near its query but the query does not name "
    "(its nearest five, in turn); in-batch: against the other records of its step only.",
)
@click.option(
    "--learning-rate",
    type=FiniteRange(0, 1, min_open=True),
    default=tuning_data.TuneOptions.learning_rate,
    show_default=True,
    help="Peak learning rate (AdamW, linear decay after a 10% warm-up).",
)
@choices(
    "--record-pairs",
    tuning_data.RECORD_PAIRS,
    tuning_data.TuneOptions.record_pairs,
    "Also train on queries made from the records: each enabled record's Purpose line against its record. "
    "auto: only when there are no golden queries; on: beside them too; off: never.",
)
@click.option("--threads", type=click.IntRange(1, 1024), help="CPU threads to train on (default: torch's, one per core). The same count gives the same model.")
@click.option(
    "--force",
    is_flag=True,
    help=f"Keep a model even when the one trained to decide does not beat the registry's model on validation, and tune "
    f"on a validation split too small to decide anything (under {tuning.MIN_VALIDATION_QUERIES} queries).",
)
@JSON_OPTION
@click.pass_obj
def model_tune(
    settings: Settings,
    golden_file,
    validation_fraction,
    seed,
    epochs,
    decide_epochs,
    batch_size,
    negatives,
    learning_rate,
    record_pairs,
    threads,
    force,
    as_json,
):
    """Fine-tune the registry's local model on its golden queries (or GOLDEN.jsonl, eval's format).

    Each query is paired with the record text of each relevant record, as the registry embeds it,
    and trained against the other records of its batch and, with --negatives mined, against a
    record the registry's model ranks near the query that the query does not name. Queries on a
    seeded share of the providers are kept aside, and a first model trained without them decides:
    eval's metrics on them are printed before and after (fewer than 36 of them cannot decide
    anything: refused, exit 2, unless --force). If it raises MRR@3 there, a second model is
    trained the same way on every query and kept as BASE-tuned-<content hash> in the models
    directory under the data directory, with its figures on the queries it trained on
    (optimistic: the validation figures are the honest ones); otherwise nothing is kept and the
    command exits 2 (--force keeps it).
    With no golden queries, --record-pairs auto tunes on the records alone and decides on their
    Purpose lines. The registry is not changed: `model switch NAME` makes it the registry's model.
    Says how long it expects to take before it starts, and shows progress on standard error. The
    local backend only: OpenAI's models cannot be tuned.
    """
    options = tuning_data.TuneOptions(validation_fraction, seed, epochs, batch_size, learning_rate, threads, force, record_pairs, negatives, decide_epochs)
    with scratch_removed_on_signals(), settings.connect() as conn, contextlib.ExitStack() as training:
        advance: Callable[[int], None] | None = None
        done = 0

        def training_progress(stage: str, step: int, steps: int) -> None:
            nonlocal advance, done
            if step == 0:  # a training starts, and its progress lines' clock with it
                training.close()
                advance, done = training.enter_context(progress(stage, steps)), 0
            if advance is not None and step > done:
                advance(step - done)
                done = step
            if step >= steps:
                training.close()

        report = tuning.tune(
            conn,
            settings.embedder(),
            settings.models_dir,
            golden_file,
            options,
            announce=lambda plan: logs.tell("\n".join(plan.describe()), "tune_plan", plan.log_fields()),
            progress=training_progress,
        )
    emit(report, as_json)
    if not report.kept:
        sys.exit(EXIT_STATUS["invalid_input"])


@model.command("install")
@click.argument("source", metavar="DIRECTORY", type=click.Path(exists=True, file_okay=False, path_type=Path))
@JSON_OPTION
@click.pass_obj
def model_install(settings: Settings, source, as_json):
    """Install a tuned model copied from another machine (its directory, named as the model).

    Checks that it holds directories and regular files only, within a model's size, and that its
    files hash to its name (nothing is copied otherwise), copies it into this installation's
    models directory and exports its ONNX graph here; a model already installed stays as it is.
    Install it on every machine that searches or saves (replicas, every backoffice host) before
    `model switch`.
    """
    with scratch_removed_on_signals():
        installed = tuned_models.install(source, settings.models_dir)
    emit(tuning.InstalledModel(installed), as_json)


@model.command("list")
@JSON_OPTION
@click.pass_obj
def model_list(settings: Settings, as_json):
    """List the tuned models installed on this machine, with how each was tuned and what it measured."""
    emit(tuning.TunedModels(settings.models_dir, tuned_models.installed(settings.models_dir)), as_json)
