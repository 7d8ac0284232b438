"""What `model tune` will do and how long it expects to take, said before it trains.

The estimate is made of rates measured on this machine as tune starts, not of constants: a
training step (training.Training.timed_step: one batch of the pairs tokenized, forward and
backward, and the optimizer's step), a record embedded as evaluation embeds every record (a
sample of the registry's records, spread over it), and a query through the search path (the
validation queries, measured before training). Each phase's estimate is those rates times its
counts; what a training costs beside its steps (its ONNX export above all) is told in tokens of
the timed step, so it too follows the machine and its load. The phases' actual seconds are
reported beside their estimates (Phases), so the estimate can be checked on any machine
(docs/benchmarks.md, "Retrieval quality").
"""

from __future__ import annotations

import importlib
import time
from dataclasses import dataclass, field

import psycopg

from ..base.reports import duration
from ..embedders import LocalEmbedder, batched, record_text
from .tuning_data import Split, TuneData

# What a training costs beside its steps (the trainer set up, the model saved, its ONNX graph
# exported and checked), in tokens of a training step: the seconds it took over the seconds one
# token of the timed step took, on the 2-core development machine (docs/benchmarks.md,
# "Retrieval quality"). A rate and not seconds, so that it follows the machine and its load.
TRAINING_FIXED_TOKENS = 6_000
# Records embedded to time the evaluation's pass over every record, so many at a time.
TIMED_RECORDS = 64
TIMED_BATCH = 8

# TIMED_RECORDS of the enabled records, spread over them in id order.
SPREAD_RECORDS = """
select provider, method, guidance
from (select provider, method, guidance, pg_catalog.row_number() over (order by id) as n, pg_catalog.count(*) over () as total
      from payrail.provider_methods where enabled) as r
where r.n %% greatest(r.total / %(sample)s, 1) = 0
order by r.n
limit %(sample)s
"""


def warm_up_export() -> None:
    """Imports what an ONNX export uses, once a process, so that the time it takes falls in the
    phase that is measured before the plan rather than in one that is estimated."""
    for module in ("torch.onnx", "onnxruntime.transformers.optimizer"):
        importlib.import_module(module)


def seconds_per_record(conn: psycopg.Connection, embedder: LocalEmbedder) -> float:
    """What embedding one enabled record costs, as evaluation embeds every record: a sample spread
    over the registry, sorted by length and embedded TIMED_BATCH at a time. Evaluation sorts every
    record by length and embeds them in batches that are barely padded; one batch of the sample
    would be padded to its longest text (2.5 times the time on the benchmark's records)."""
    texts = sorted((record_text(*row) for row in conn.execute(SPREAD_RECORDS, {"sample": TIMED_RECORDS})), key=len)
    if not texts:
        return 0.0
    started = time.perf_counter()
    for batch in batched(texts, TIMED_BATCH):
        embedder.embed(list(batch))
    return (time.perf_counter() - started) / len(texts)


@dataclass
class Phases:
    """The seconds each phase of a tune took, measured lap by lap."""

    seconds: dict[str, float] = field(default_factory=dict)
    started: float = field(default_factory=time.perf_counter)
    last: float = 0.0

    def __post_init__(self) -> None:
        self.last = self.started

    def lap(self, phase: str) -> float:
        """Ends phase (adding to it if it ran before): its seconds so far."""
        now = time.perf_counter()
        self.seconds[phase] = self.seconds.get(phase, 0.0) + now - self.last
        self.last = now
        return self.seconds[phase]

    def total(self) -> float:
        return time.perf_counter() - self.started


@dataclass
class TunePlan:
    """What model tune will do, and how long it expects to take: said before it starts."""

    tuned_from: str
    data: TuneData
    pairs: int
    steps: int
    final_pairs: int
    # The final training's steps; at most this many when the epochs are decided.
    final_steps: int
    threads: int
    # The rates measured as tune starts (the module's docstring).
    seconds_per_step: float
    seconds_per_token: float
    records: int
    seconds_per_record: float
    seconds_per_query: float
    # Seconds already spent before the plan: reading, mining, loading, timing.
    preparing_seconds: float
    # Epochs the deciding training measures on validation (decided epochs), or 0.
    checkpoints: int = 0

    @property
    def split(self) -> Split:
        return self.data.split

    @property
    def fixed(self) -> float:
        """What a training costs beside its steps (TRAINING_FIXED_TOKENS)."""
        return TRAINING_FIXED_TOKENS * self.seconds_per_token

    def evaluating(self, queries: int) -> float:
        """A trained model's evaluation: every record and the queries embedded."""
        return self.records * self.seconds_per_record + queries * self.seconds_per_query

    def expected(self, kept: bool = True) -> dict[str, float]:
        """Each phase's expected seconds, in order: preparing, training, then evaluating (or, with
        decided epochs, epochs: each epoch's model exported and measured), and when the model is
        kept final_training and final_evaluating. A training's phase has its steps and its model's
        ONNX export, an evaluation's its pass over the records and the queries."""
        validation, every = len(self.split.validation), len(self.data.all_queries)
        phases = {"preparing": self.preparing_seconds}
        if self.checkpoints:  # each epoch's model exported and measured in a phase of their own
            phases |= {"training": self.steps * self.seconds_per_step, "epochs": self.checkpoints * (self.fixed + self.evaluating(validation))}
        else:
            phases |= {"training": self.steps * self.seconds_per_step + self.fixed, "evaluating": self.evaluating(validation)}
        if kept:
            # The registry's model through the search path on every query, then the kept model in memory.
            phases |= {"final_training": self.final_steps * self.seconds_per_step + self.fixed, "final_evaluating": self.evaluating(2 * every)}
        return phases

    def rates(self) -> dict[str, float]:
        """The rates the estimate was made of, as measured."""
        return {
            "secondsPerStep": round(self.seconds_per_step, 3),
            "secondsPerToken": round(self.seconds_per_token, 6),
            "secondsPerRecord": round(self.seconds_per_record, 4),
            "secondsPerQuery": round(self.seconds_per_query, 4),
        }

    @property
    def estimated_seconds(self) -> float:
        """The whole tune, from its start, when the model is kept."""
        return sum(self.expected().values())

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
            "negatives": "mined" if self.data.deciding_negatives is not None else "in-batch",
            "steps": self.steps,
            "final_steps": self.final_steps,
            "expected_s": round(self.estimated_seconds),
            "expected_not_kept_s": round(sum(self.expected(kept=False).values())),
        }

    def describe(self) -> list[str]:
        """What tune is about to do and how long it expects it to take, for people (tune's JSON
        report carries the same figures once it is done)."""
        data, split = self.data, self.split
        queries = f"{len(data.usable)} of {data.golden_queries} golden queries name enabled records"
        made = f"{len(data.made)} queries made from the records' Purpose lines"
        negatives = "each with a negative mined from the registry" if data.deciding_negatives is not None else "against the batch's records"
        expected = self.expected()
        at_most = "at most " if self.checkpoints else ""
        return [
            f"tuning {self.tuned_from} on {data.source}: {queries}" + (f"; {made}" if data.made else ""),
            f"split by provider{'' if data.decides_on_golden else ' (the record queries: no golden query to decide on)'}: "
            f"{len(split.validation)} validation queries over {len(split.validation_providers)} of {split.providers} providers; "
            f"{len(split.training)} training queries; {len(split.left_out)} naming both sides left out",
            f"expected: about {duration(self.estimated_seconds)} if kept, {duration(sum(self.expected(kept=False).values()))} if not "
            f"(so far {duration(self.preparing_seconds)}; {self.steps} training steps to decide ({self.pairs} pairs, {negatives}), "
            f"{duration(expected['training'])}"
            + (f"; measuring each of {self.checkpoints} epochs on validation, {duration(expected['epochs'])}" if self.checkpoints else "")
            + f"; then {at_most}{self.final_steps} on every query ({self.final_pairs} pairs), {at_most}{duration(expected['final_training'])}; "
            f"each model's pass over {self.records} records, about {duration(self.evaluating(0))}; "
            f"timed here: {self.seconds_per_step:.1f} s a step on {self.threads} thread{'s' if self.threads > 1 else ''}, "
            f"{1000 * self.seconds_per_record:.0f} ms a record)",
        ]
