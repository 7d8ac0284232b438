"""One fine-tuning run of the local model for `model tune`: sentence-transformers' trainer on
(query, record text) pairs, each with a mined negative or not (tuning_data.py).

The loss is sentence-transformers' MultipleNegativesRankingLoss: a query must be nearer its record
than every other record of its training batch, and than every batch's mined negative; no text
twice in a batch (its batch sampler), so no record is its own query's negative. Seeded: the same
pairs, options and seed give the same weights on a machine with the same number of threads.
"""

from __future__ import annotations

import importlib
import math
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from ..embedders.local_model import load_sentence_transformer
from .tuning_data import CannotTune, TuneOptions

TRAINING_HINT = "pip install torch==2.13.0 'payrail-agent-search[local]'"
# A training step embeds its texts in passes of this many, sorted by length (embed_by_length).
TEXTS_PER_PASS = 8
# The columns of a training's dataset, in the order of a pair's texts.
COLUMNS = ("anchor", "positive", "negative")


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
    """One fine-tuning run of a sentence-transformers model directory on pairs: (query, record
    text), or (query, record text, negative record text). Its learning rate follows a schedule of
    options.epochs passes; `epochs` (at most that) stops it after so many of them, as a training
    whose epochs were decided on validation stops where its deciding training scored best."""

    def __init__(self, source: Path, pairs: Sequence[tuple[str, ...]], options: TuneOptions, epochs: int | None = None) -> None:
        torch = import_training()
        if options.threads:
            torch.set_num_threads(options.threads)
        self.threads = torch.get_num_threads()
        self.pairs = list(pairs)
        self.options = options
        self.epochs = epochs or options.epochs
        # Local files only: the hub is never asked, and the tokenizer saves the same setting (its
        # tokenizer_config.json keeps local_files_only), so HF_HUB_OFFLINE cannot change the name.
        self.model = load_sentence_transformer(str(source), local_files_only=True)
        self.steps = self.steps_for(self.pairs, options, self.epochs)

    @staticmethod
    def steps_for(pairs: Sequence, options: TuneOptions, epochs: int | None = None) -> int:
        return math.ceil(len(pairs) / options.batch_size) * (epochs or options.epochs)

    def timed_step(self) -> tuple[float, int]:
        """One training step, timed on a batch of the pairs (evenly spread): its texts tokenized,
        the forward and backward pass and the optimizer's step, at a learning rate of 0 so that the
        weights stay as they are; the faster of two, as the first pays for allocations. Also the
        batch's tokens, which make a rate the costs of a training beside its steps are told in."""
        import torch

        size = min(self.options.batch_size, len(self.pairs))
        sample = [self.pairs[i * len(self.pairs) // size] for i in range(size)]
        loss = ranking_loss(self.model)
        optimizer = torch.optim.AdamW(self.model.parameters(), lr=0.0)
        self.model.train()
        timings, tokens = [], 0
        for _ in range(2):
            started = time.perf_counter()
            features = [self.model.preprocess(list(texts)) for texts in zip(*sample, strict=True)]
            loss(features, None).backward()
            optimizer.step()
            timings.append(time.perf_counter() - started)
            self.model.zero_grad(set_to_none=True)
            tokens = sum(int(column["attention_mask"].sum()) for column in features)
        return min(timings), tokens

    def save(self, target: Path) -> None:
        """The model as it stands: its sentence-transformers files, into target."""
        self.model.save(str(target), create_model_card=False)

    def run(self, target: Path, progress: Callable[[int, int], None], at_epoch_end: Callable[[int], None] | None = None) -> float:
        """Trains, seeded, and saves the model's sentence-transformers files into target; the seconds
        it took. progress(step, steps) is called as training starts (step 0) and after every step;
        at_epoch_end(epoch) after each epoch (the model as it stands then: save)."""
        import transformers
        from datasets import Dataset
        from sentence_transformers import SentenceTransformerTrainer
        from sentence_transformers.sentence_transformer.training_args import BatchSamplers, SentenceTransformerTrainingArguments

        class QuietTrainer(SentenceTransformerTrainer):
            def add_model_card_callback(self, default_args_dict) -> None:
                """No model card: it would print its own progress, and a tuned model carries tuning.json instead."""

        training = self

        class Progress(transformers.TrainerCallback):
            def on_train_begin(self, args, state, control, **kwargs) -> None:
                progress(0, training.steps)

            def on_step_end(self, args, state, control, **kwargs) -> None:
                progress(state.global_step, training.steps)

            def on_epoch_end(self, args, state, control, **kwargs) -> None:
                epoch = round(state.epoch)
                if at_epoch_end is not None:
                    at_epoch_end(epoch)
                control.should_training_stop = control.should_training_stop or epoch >= training.epochs

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
            # A pair holds an anchor and a positive, and a negative when one was mined: as many columns.
            columns = COLUMNS[: len(self.pairs[0])]
            dataset = Dataset.from_dict({column: list(texts) for column, texts in zip(columns, zip(*self.pairs, strict=True), strict=True)})
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
        self.save(target)
        return seconds
