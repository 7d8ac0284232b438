"""model tune, tuned models and eval --compare on a small registry of the test's own making.

The catalog is 36 records, one provider each: six kinds of service (weather forecasts, currency
rates, ...) for six places (mountain regions, coastal towns, ...). Its labelled queries name the
kind by a made-up word the bundled model cannot know ("a glorp for desert areas" is the weather
forecast for desert areas), so before tuning only the place matches and the right kind is luck.
The queries of a quarter of the providers are held apart: never among the golden queries the
model is tuned on, they show whether what tuning learnt carries over to records it never saw. The
model is tuned once on the registry's golden queries (the module's fixture, through the command on
PostgreSQL 18: tuning reads the registry's records and golden queries, the same on every server);
every server then installs it as a copy from another machine, switches to it and is measured. Expected answers come from
payrail_test_support.ranking with the tuned model's own vectors, never from the code under test.
Training is tiny (a few seconds) and seeded, so every figure is the same on every run.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from html import unescape
from pathlib import Path
from urllib.parse import urlencode

import anyio
import pytest

from payrail_embedder.embedders import LocalEmbedder, record_text, tuned_models
from payrail_embedder.faces.api import Registry
from payrail_embedder.postgres import connection
from payrail_embedder.quality.training import Training, embed_by_length
from payrail_embedder.quality.tuning import MIN_VALIDATION_QUERIES
from payrail_embedder.quality.tuning_data import GoldenQuery, TuneOptions, split_by_provider
from payrail_embedder.registry import catalog
from payrail_embedder.registry.labelled_queries import LabelledQuery
from payrail_embedder.registry.records import read_lines
from payrail_embedder.registry.search import SearchUnavailable
from payrail_embedder.settings import Settings
from payrail_test_support import CLI
from payrail_test_support.agent_helpers import mcp_client
from payrail_test_support.backoffice import HttpClient, http_sign_in, running_backoffice
from payrail_test_support.cli import cli_json, run_cli, run_cli_subprocess, write_jsonl
from payrail_test_support.devices import small_device
from payrail_test_support.logs import events_among
from payrail_test_support.ranking import DECIDING_GAP, cosine_ranking, semantic_path
from payrail_test_support.waiting import wait_until

pytestmark = pytest.mark.local_model

KINDS = {
    "glorp": "Weather forecasts",
    "vantrix": "Currency exchange rates",
    "quimble": "Text messages to phones",
    "zarp": "Hotel room availability",
    "flendor": "Flight offers",
    "mobrik": "Parcel tracking",
}
PLACES = ["mountain regions", "coastal towns", "desert areas", "large cities", "small islands", "farming villages"]
PROVIDERS = [
    "Aurora",
    "Basalt",
    "Cobalt",
    "Dynamo",
    "Ember",
    "Fjord",
    "Garnet",
    "Helix",
    "Indigo",
    "Jasper",
    "Krypton",
    "Lumen",
    "Magnet",
    "Nectar",
    "Onyx",
    "Prism",
    "Quartz",
    "Raven",
    "Saffron",
    "Tundra",
    "Umber",
    "Vertex",
    "Willow",
    "Xenon",
    "Yarrow",
    "Zephyr",
    "Alder",
    "Birch",
    "Cedar",
    "Delta",
    "Egret",
    "Falcon",
    "Gecko",
    "Heron",
    "Ibis",
    "Juniper",
]
RECORDS = [
    {"provider": provider, "method": "Lookup", "urls": [], "docsUrl": None, "guidance": f"Purpose: {service} for {place}.", "enabled": True}
    for provider, (service, place) in zip(PROVIDERS, [(service, place) for service in KINDS.values() for place in PLACES], strict=True)
]
WORD_OF = {service: word for word, service in KINDS.items()}
HELD_APART = set(PROVIDERS[::4])


def labelled_queries(record: dict) -> list[dict]:
    service, place = record["guidance"].removeprefix("Purpose: ").removesuffix(".").split(" for ")
    word = WORD_OF[service]
    relevant = [[record["provider"], record["method"]]]
    return [{"query": phrasing.format(word=word, place=place), "relevant": relevant} for phrasing in PHRASINGS]


# Five questions a record: enough golden queries for a validation split that can decide (MIN_VALIDATION_QUERIES).
PHRASINGS = [
    "a {word} for {place}",
    "I need the {word} covering {place}",
    "where do I get a {word} in {place}?",
    "{word} service, {place}",
    "looking for {word} data about {place}",
]


GOLDEN = [query for record in RECORDS if record["provider"] not in HELD_APART for query in labelled_queries(record)]
HELD = [query for record in RECORDS if record["provider"] in HELD_APART for query in labelled_queries(record)]
# Tiny and seeded: a few seconds of training on one thread.
TUNE_OPTIONS = ["--epochs", "3", "--learning-rate", "1e-4", "--batch-size", "16", "--threads", "1", "--validation-fraction", "0.3", "--negatives", "mined"]
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def tune_process(env: dict[str, str], *args, timeout: float):
    """`model tune ARGS` in a process of its own: training sets torch's threads and every random
    generator's seed for the whole process, and holds gigabytes while it runs."""
    return run_cli_subprocess(env, "model", "tune", *args, timeout=timeout)


def local_env(database_url: str, data_dir: Path) -> dict[str, str]:
    """A payrail-embedder process on the local backend with no model configured: it follows the registry."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PAYRAIL_", "OPENAI_"))}
    env.update(PAYRAIL_DATABASE_URL=database_url, PAYRAIL_DATA_DIR=str(data_dir), PAYRAIL_EMBEDDER="local", **OFFLINE)
    return env


def import_catalog(database_url: str, directory: Path) -> None:
    """RECORDS, embedded by the bundled model, through the import path."""
    with connection.connect(database_url, autocommit=True) as conn:
        report = catalog.import_records(conn, LocalEmbedder, read_lines(write_jsonl(directory / "catalog.jsonl", RECORDS)))
    assert report.saved and report.created == len(RECORDS)


def eval_json(env: dict[str, str], path: Path, *args: str) -> dict:
    code, report, stderr = cli_json(env, "eval", "--json", path, *args)
    assert code == 0, (report, stderr)
    return report


@pytest.fixture(scope="module")
def tuned(servers, tmp_path_factory) -> dict:
    """`model tune` with no file on a registry of RECORDS whose golden queries are GOLDEN: its
    report, standard error and models directory."""
    server = servers("pg18")
    database_url = server.create_database()
    directory = tmp_path_factory.mktemp("tuned")
    import_catalog(database_url, directory)
    env = local_env(database_url, directory / "data")
    golden = write_jsonl(directory / "golden.jsonl", GOLDEN)
    code, imported, stderr = cli_json(env, "golden", "import", "--json", golden)
    assert code == 0 and imported["added"] == len(GOLDEN), (imported, stderr)

    result = tune_process({**env, "PAYRAIL_PROGRESS_INTERVAL": "0"}, "--json", *TUNE_OPTIONS, timeout=900)

    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    report = json.loads(result.stdout)
    yield {"report": report, "stderr": result.stderr, "models_dir": directory / "data" / "models", "env": env, "golden": golden}
    server.drop_database(database_url)


def test_tune_says_what_it_will_do_and_how_long_first_then_shows_progress_and_keeps_a_better_model(tuned):
    report, stderr = tuned["report"], tuned["stderr"]
    name = report["model"]

    assert re.fullmatch(r"all-MiniLM-L6-v2-tuned-[0-9a-f]{12}", name)
    assert report["kept"] and report["better"] and report["tunedFrom"] == "all-MiniLM-L6-v2"
    assert report["golden"]["source"] == "the registry's golden queries" and report["golden"]["queries"] == len(GOLDEN)
    assert report["recordPairs"] == {"option": "auto", "queries": 0, "pairs": 0}  # golden queries: auto leaves them out
    split = report["split"]
    assert split["on"] == "golden queries"
    assert split["training"] + split["validation"] + split["leftOut"] == len(GOLDEN) == report["golden"]["usable"]
    assert split["validation"] >= 0.3 * len(GOLDEN) and split["leftOut"] == 0  # one provider per query here
    assert report["training"]["pairs"] == split["training"] and report["training"]["threads"] == 1
    before, after = report["validation"]["before"], report["validation"]["after"]
    assert after["mrr@3"] > before["mrr@3"] and after["hit@1"] > before["hit@1"]
    # The kept model learnt from every golden query, the validation ones included; its figures are on them.
    final = report["final"]
    assert final["pairs"] == len(GOLDEN) and final["steps"] == 3 * -(-len(GOLDEN) // 16)
    assert final["trainedOn"]["queries"] == len(GOLDEN)
    assert final["trainedOn"]["after"]["mrr@3"] > final["trainedOn"]["before"]["mrr@3"]

    # Before it starts, what and how long: off a terminal (here) the tune_plan event, then progress
    # events (one a step here), the deciding training's and then the kept model's.
    logged = events_among(stderr)
    (plan,) = [event for event in logged if event["event"] == "tune_plan"]
    assert (plan["tuned_from"], plan["golden_queries"], plan["usable"]) == ("all-MiniLM-L6-v2", str(len(GOLDEN)), str(len(GOLDEN))), plan
    assert plan["split_on"] == "golden queries", plan
    assert (plan["validation"], plan["training"], plan["left_out"]) == (str(split["validation"]), str(split["training"]), "0"), plan
    assert int(plan["expected_s"]) > 0 and plan["steps"] == str(report["training"]["steps"]) and plan["final_steps"] == str(final["steps"])
    assert int(plan["expected_not_kept_s"]) < int(plan["expected_s"])
    # Each pair against a record mined from the registry (--negatives mined); a split that decides.
    assert plan["negatives"] == report["training"]["negatives"] == "mined" and report["training"]["epochsDecided"] is None
    assert report["validation"]["decides"] and report["validation"]["queries"] >= report["validation"]["minimum"] == MIN_VALIDATION_QUERIES
    # Each phase's estimate, made as it started, beside what it took (benchmarks/tune.py compares them).
    phases = report["phases"]
    assert list(phases["actual"]) == list(phases["expected"]) == ["preparing", "training", "evaluating", "final_training", "final_evaluating"]
    # The whole estimate is the phases' (each rounded to 0.1 s in the report, the whole to 1 s).
    assert phases["actual"]["preparing"] == phases["expected"]["preparing"] and abs(report["estimatedSeconds"] - sum(phases["expected"].values())) < 1
    steps = [i for i, event in enumerate(logged) if event["event"] == "progress" and event["task"] == "tune"]
    final_steps = [i for i, event in enumerate(logged) if event["event"] == "progress" and event["task"] == "tune_final"]
    assert steps and final_steps and logged.index(plan) < steps[0] and steps[-1] < final_steps[0]
    total = str(report["training"]["steps"])
    assert (logged[steps[0]]["done"], logged[steps[0]]["total"]) == ("1", total)
    assert (logged[steps[-1]]["done"], logged[steps[-1]]["total"]) == (total, total)
    assert logged[final_steps[-1]]["done"] == logged[final_steps[-1]]["total"] == str(final["steps"])
    assert "\r" not in stderr and "Traceback" not in stderr

    model_dir = tuned["models_dir"] / name
    assert Path(report["path"]) == model_dir
    assert tuned_models.content_digest(model_dir).startswith(name.rsplit("-", 1)[1])
    manifest = json.loads((model_dir / "tuning.json").read_text())
    assert manifest["validation"] == report["validation"] and manifest["final"] == final
    exported = run_cli(tuned["env"], "golden", "export")
    assert manifest["goldenQueries"] == {"file": None, "sha256": hashlib.sha256(exported.stdout.encode()).hexdigest()}
    assert not list(tuned["models_dir"].glob(".tuning-*")), "the scratch directory is left behind"

    listed = run_cli(tuned["env"], "model", "list")
    assert listed.returncode == 0, listed.stderr
    assert f"{name} (tuned from all-MiniLM-L6-v2" in listed.stdout and f"validation MRR@3 {before['mrr@3']:.3f} -> {after['mrr@3']:.3f}" in listed.stdout
    trained_on = final["trainedOn"]
    assert (
        f"on its {len(GOLDEN)} training queries (optimistic) MRR@3 {trained_on['before']['mrr@3']:.3f} -> {trained_on['after']['mrr@3']:.3f}" in listed.stdout
    )


def text_of(record: dict) -> str:
    return record_text(record["provider"], record["method"], record["guidance"])


def nearest_other_record(query: dict, query_vector, vector_of) -> dict:
    """The record nearest the query (the bundled model's vectors, payrail_test_support.ranking's
    order) that it does not name: the negative mined for its one pair."""
    ranked = [(distance, record) for distance, record in cosine_ranking(RECORDS, query_vector, vector_of) if record["provider"] != query["relevant"][0][0]]
    (nearest, record), (next_one, _) = ranked[:2]
    assert next_one == nearest or next_one - nearest > DECIDING_GAP, "float32 rounding, not the rule, would pick the negative"
    return record


def test_the_kept_model_is_the_one_trained_on_every_golden_query_each_against_its_nearest_other_record(tuned, tmp_path):
    """The same training on every golden query, in the order they were added, each pair with the
    record the bundled model ranks nearest its query of those it does not name (mined from the
    registry's vectors), made here from the oracle's ranking: the same weights, hence the same name
    (the one trained without the validation queries has other weights, and so would one with any
    other negative). Made in this process, without the command's HF_HUB_OFFLINE: the name does not depend on it."""
    import torch

    from payrail_embedder.embedders.local_model import bundled_model_dir

    by_provider = {record["provider"]: record for record in RECORDS}
    bundled = LocalEmbedder()
    vector_of = record_vectors(bundled)
    pairs = [
        (q["query"], text_of(by_provider[q["relevant"][0][0]]), text_of(nearest_other_record(q, vector, vector_of)))
        for q, vector in zip(GOLDEN, bundled.embed([q["query"] for q in GOLDEN]), strict=True)
    ]
    options = TuneOptions(seed=0, epochs=3, batch_size=16, learning_rate=1e-4, threads=1, negatives="mined")  # TUNE_OPTIONS
    threads = torch.get_num_threads()
    try:
        Training(bundled_model_dir(), pairs, options).run(tmp_path / "every-query", lambda step, total: None)
    finally:
        torch.set_num_threads(threads)

    assert tuned["report"]["model"] == tuned_models.tuned_name("all-MiniLM-L6-v2", tmp_path / "every-query")


def test_the_split_keeps_every_validation_provider_out_of_training():
    def golden(query: str, *providers: str) -> GoldenQuery:
        relevant = tuple((provider, "m") for provider in providers)
        return GoldenQuery(LabelledQuery(1, query, relevant), tuple((p, "m", "g") for p in providers), frozenset(providers))

    # Queries over one provider and over several; a, b and c share queries, so they travel together or split a query.
    queries = [golden(f"q{i}", f"p{i}") for i in range(20)] + [golden("ab", "a", "b"), golden("bc", "b", "c"), golden("a", "a")]

    for seed in range(10):
        split = split_by_provider(queries, 0.25, seed)
        drawn = split.validation_providers
        assert all(q.providers <= drawn for q in split.validation)
        assert not any(q.providers & drawn for q in split.training)
        assert all(q.providers & drawn and q.providers - drawn for q in split.left_out)
        assert len(split.training) + len(split.validation) + len(split.left_out) == len(queries)
        assert len(split.validation) >= 0.25 * len(queries)
        assert split == split_by_provider(queries, 0.25, seed)  # seeded
    splits = [split_by_provider(queries, 0.25, seed) for seed in range(10)]
    assert len({tuple(q.labelled.query for q in split.validation) for split in splits}) > 1
    assert any(split.left_out for split in splits)  # the case is exercised


def test_training_embeds_texts_by_length_as_one_padded_pass_would():
    """A step's texts are embedded in passes of similar lengths, cut to each pass's longest text:
    the embeddings, and the gradients training follows, are one padded pass's."""
    import torch

    from payrail_embedder.embedders.local_model import bundled_model_dir, load_sentence_transformer

    model = load_sentence_transformer(str(bundled_model_dir())).eval()  # no dropout: both ways compute the same thing
    # Lengths in no order, one cut at the model's 256 tokens: passes of 3 regroup and reorder them.
    texts = [record_text(record["provider"], record["method"], record["guidance"]) for record in RECORDS[:6]]
    texts[2:2] = ["Purpose: send an SMS to a customer. " * 60, "", "a"]
    features = model.preprocess(texts)
    assert features["input_ids"].shape[1] == 256

    def gradients(embeddings):
        model.zero_grad()
        (embeddings @ embeddings[0]).sum().backward()
        return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])

    padded = model(features)["sentence_embedding"]
    by_length = embed_by_length(model, features, texts_per_pass=3)

    assert torch.allclose(by_length, padded, atol=1e-5)
    assert torch.allclose(gradients(by_length), gradients(padded), atol=1e-5)


@pytest.mark.slow
def test_training_is_deterministic_for_a_seed(tmp_path):
    import torch

    from payrail_embedder.embedders.local_model import bundled_model_dir

    pairs = [
        (query["query"], record_text(record["provider"], record["method"], record["guidance"])) for record in RECORDS[:8] for query in labelled_queries(record)
    ]

    def name_of(seed: int, target: str) -> str:
        Training(bundled_model_dir(), pairs, TuneOptions(seed=seed, epochs=1, batch_size=8, learning_rate=1e-4, threads=1)).run(
            tmp_path / target, lambda step, total: None
        )
        return tuned_models.tuned_name("all-MiniLM-L6-v2", tmp_path / target)

    threads = torch.get_num_threads()
    try:
        first, again, other_seed = name_of(0, "first"), name_of(0, "again"), name_of(1, "other")
    finally:
        torch.set_num_threads(threads)

    assert first == again
    assert other_seed != first


def record_vectors(embedder: LocalEmbedder):
    """vector_of for payrail_test_support.ranking: each record's vector by the embedder."""
    vectors = dict(zip(map(id, RECORDS), embedder.embed([record_text(r["provider"], r["method"], r["guidance"]) for r in RECORDS]), strict=True))
    return lambda record: vectors[id(record)]


def ranked_answers(embedder: LocalEmbedder, queries: list[str]) -> list[list[tuple[str, str]]]:
    """Each query's 3 nearest RECORDS by the embedder's own vectors, near ties or not."""
    vector_of = record_vectors(embedder)
    return [[(r["provider"], r["method"]) for _, r in cosine_ranking(RECORDS, query_vector, vector_of)[:3]] for query_vector in embedder.embed(queries)]


def backoffice_answer(env: dict[str, str], tmp_path: Path, query: str) -> tuple[list[tuple[str, str]], str | None]:
    """What the backoffice's Try a query shows agents get: the answer, or the problem it states."""
    with running_backoffice(env, tmp_path) as backoffice:
        session = http_sign_in(HttpClient(backoffice.url))
        page = session.client.get("/records", cookies=session.cookies).body
        record_id = re.search(r'href="/records/(\d+)"', page).group(1)
        body = session.client.get(f"/records/{record_id}?{urlencode({'query': query})}", cookies=session.cookies).body
    agents = body.split('id="agents-title"', 1)[1].split('id="counted-title"', 1)[0]
    problem = re.search(r'<p class="message error" role="alert">(.*?)</p>', agents, flags=re.S)
    names = re.findall(r'<p class="match-name">(.+?) / (.+?)(?: <strong>|</p>)', agents)
    return [(unescape(p), unescape(m)) for p, m in names], unescape(problem.group(1)) if problem else None


def mcp_answer(env: dict[str, str], query: str, errlog_path: Path) -> dict:
    async def main():
        with errlog_path.open("w") as errlog:
            async with mcp_client(env, errlog) as client:
                return await client.call_tool("search_provider_methods", {"query": query})

    result = anyio.run(main)
    return json.loads(result.content[0].text) if result.is_error else result.structured_content


def api_answer(registry: Registry, query: str):
    try:
        return [(m.provider, m.method) for m in registry.search_provider_methods(query)["matches"]]
    except SearchUnavailable as error:
        return error.to_json()


def local_registry(database_url: str, data_dir: Path) -> Registry:
    """The Python API as an agent's long-running process holds it, configured with no model."""
    return Registry(settings=Settings(database_url=database_url, data_dir=data_dir, backend="local"))


@pytest.mark.slow
def test_a_tuned_model_improves_held_apart_queries_and_every_interface_uses_it_after_the_switch(tuned, operator_logins, database_url, tmp_path):
    name = tuned["report"]["model"]
    import_catalog(database_url, tmp_path)
    held = write_jsonl(tmp_path / "held-apart.jsonl", HELD)
    env = local_env(database_url, tmp_path / "data")

    code, installed, stderr = cli_json(env, "model", "install", tuned["models_dir"] / name, "--json")
    assert code == 0, (installed, stderr)
    models_dir = tmp_path / "data" / "models"
    assert installed == {"model": name, "path": str(models_dir / name)}
    assert (models_dir / name / "onnx" / "model.onnx").is_file()

    # A held-apart question the two models answer differently.
    tuned_model = LocalEmbedder(name, models_dir=models_dir)
    questions = [q["query"] for q in HELD]
    differing = [q for q, a, b in zip(questions, ranked_answers(tuned_model, questions), ranked_answers(LocalEmbedder(), questions), strict=True) if a != b]
    assert differing
    query = differing[0]
    expected = [(r["provider"], r["method"]) for r in semantic_path(RECORDS, tuned_model.embed([query])[0], record_vectors(tuned_model))]
    running = local_registry(database_url, tmp_path / "data")  # an agent's process, started before the switch
    assert api_answer(running, query) == ranked_answers(LocalEmbedder(), [query])[0]

    before = eval_json(env, held)
    compared = eval_json(env, held, "--compare", name)
    assert compared["metrics"] == before["metrics"]  # the registry's own figures, unchanged beside the candidate
    code, switch, stderr = cli_json(env, "model", "switch", name, "--json")
    assert code == 0 and switch["switched"], (switch, stderr)
    after = eval_json(env, held)

    # Held-apart queries: providers the tuning never saw, the same made-up words.
    # (Measured here: hit@3 0.50 -> 1.00, MRR@3 0.41 -> 0.79; training is seeded, the margins leave room
    # only for another CPU's last bits.)
    assert after["metrics"]["hit@3"] >= before["metrics"]["hit@3"] + 0.3, (before["metrics"], after["metrics"])
    assert after["metrics"]["mrr@3"] >= before["metrics"]["mrr@3"] + 0.25, (before["metrics"], after["metrics"])
    # eval --compare told beforehand exactly what the switch brought.
    assert compared["compare"] == {
        "model": name,
        "metrics": after["metrics"],
        "ranks": after["ranks"],
        "misses": after["misses"],
        "bySource": after["bySource"],
    }

    # Every interface answers as the tuned model, the process started before the switch included.
    code, searched, stderr = cli_json(env, "search", "--json", query)
    assert code == 0, (searched, stderr)
    assert [(m["provider"], m["method"]) for m in searched["matches"]] == expected
    with running:
        assert api_answer(running, query) == expected
    assert [(m["provider"], m["method"]) for m in mcp_answer(env, query, tmp_path / "mcp.log")["matches"]] == expected
    assert backoffice_answer(env, tmp_path, query) == (expected, None)

    # A machine without the model: search_unavailable naming it, on every interface; never other vectors.
    bare = local_env(database_url, tmp_path / "bare")
    code, failure, _ = cli_json(bare, "search", "--json", query)
    assert code == 1 and failure["error"] == "search_unavailable"
    cause = f"the tuned model {name} is not installed on this machine (no {tmp_path / 'bare' / 'models' / name})"
    assert cause in failure["detail"] and "model install" in failure["detail"]
    waiting = local_registry(database_url, tmp_path / "bare")
    assert api_answer(waiting, query) == failure
    assert mcp_answer(bare, query, tmp_path / "mcp-bare.log") == failure
    assert backoffice_answer(bare, tmp_path, query) == ([], f"search_unavailable: {failure['detail']}")
    code, refused, _ = cli_json(bare, "import", "--json", write_jsonl(tmp_path / "other.jsonl", [{**RECORDS[0], "provider": "Osprey"}]))
    assert code == 1 and refused["error"] == "unavailable" and cause in refused["detail"]
    # Exact names need no model, there as everywhere.
    code, by_name, _ = cli_json(bare, "search", "--json", RECORDS[0]["provider"])
    assert code == 0 and by_name["matches"][0]["provider"] == RECORDS[0]["provider"]

    # docs/operations.md's copy, verbatim but for the paths; the waiting process needs no restart.
    subprocess.run(["tar", "-C", models_dir, "-czf", tmp_path / "tuned-model.tgz", name], check=True)
    (tmp_path / "unpacked").mkdir()
    subprocess.run(["tar", "-xzf", tmp_path / "tuned-model.tgz", "-C", tmp_path / "unpacked"], check=True)
    code, installed, stderr = cli_json(bare, "model", "install", tmp_path / "unpacked" / name, "--json")
    assert code == 0, (installed, stderr)
    with waiting:
        assert api_answer(waiting, query) == expected

    # The write path embeds with it too.
    code, imported, stderr = cli_json(env, "import", "--json", write_jsonl(tmp_path / "new.jsonl", [{**RECORDS[0], "provider": "Kestrel"}]))
    assert code == 0, (imported, stderr)
    with connection.connect(database_url) as conn:
        assert conn.execute("select embedding_model from payrail.provider_methods where provider = 'Kestrel'").fetchone() == (name,)


@pytest.mark.slow
def test_a_model_that_does_not_beat_the_registrys_is_not_kept_unless_forced(tuned, tmp_path):
    env = {**tuned["env"], "PAYRAIL_DATA_DIR": str(tmp_path / "data")}
    # A learning rate that leaves the weights as they were: nothing to gain, so nothing is kept.
    unchanged = [*TUNE_OPTIONS, "--epochs", "1", "--learning-rate", "1e-12"]

    # A file's queries still work in place of the registry's.
    result = tune_process(env, tuned["golden"], "--json", *unchanged, timeout=900)

    assert result.returncode == 2, result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert report["golden"]["source"] == "golden.jsonl"
    assert not report["kept"] and not report["better"] and report["path"] is None and report["model"] is None
    assert report["validation"]["after"]["mrr@3"] <= report["validation"]["before"]["mrr@3"]
    assert report["final"] is None and "task=tune_final" not in result.stderr  # no second training
    assert list((tmp_path / "data" / "models").iterdir()) == []
    text = tune_process(env, tuned["golden"], *unchanged, "--force", timeout=900)
    assert text.returncode == 0, text.stderr[-3000:]
    kept = re.search(r"^kept (all-MiniLM-L6-v2-tuned-[0-9a-f]{12}) in (\S+) \(validation MRR@3 .*, kept by --force\)", text.stdout, flags=re.M)
    assert kept and Path(kept[2]) == tmp_path / "data" / "models" / kept[1], text.stdout
    assert f"it was then trained on all {len(GOLDEN)} golden queries ({len(GOLDEN)} pairs)" in text.stdout
    # The same queries as the registry's, hashed the same way: as `golden export` writes them.
    manifest = json.loads((Path(kept[2]) / "tuning.json").read_text())
    registry_digest = json.loads((tuned["models_dir"] / tuned["report"]["model"] / "tuning.json").read_text())["goldenQueries"]["sha256"]
    assert manifest["goldenQueries"] == {"file": "golden.jsonl", "sha256": registry_digest}


@pytest.fixture
def pg18_database_url(servers):
    """A fresh registry on PostgreSQL 18 alone, for a `model tune` process: tuning reads the
    registry the same on every server (as for the fixture tuned), and each process costs a minute."""
    server = servers("pg18")
    database_url = server.create_database()
    yield database_url
    server.drop_database(database_url)


def test_a_forced_tune_on_too_few_validation_queries_says_its_decision_cannot_tell_a_gain_from_chance(pg18_database_url, tmp_path):
    """Refused without --force (tests/quality/test_tuning_data.py); forced, it tunes and keeps the model,
    and says above the figures that they cannot decide, and in its log and JSON as well."""
    import_catalog(pg18_database_url, tmp_path)
    env = local_env(pg18_database_url, tmp_path / "data")
    golden = write_jsonl(tmp_path / "golden.jsonl", GOLDEN[:12])

    result = tune_process(env, golden, "--force", "--epochs", "1", "--batch-size", "4", "--threads", "1", "--validation-fraction", "0.3", timeout=900)

    assert result.returncode == 0, result.stderr[-3000:]
    validation = int(re.search(r"^validation: (\d+) queries on providers the training never saw$", result.stdout, flags=re.M)[1])
    assert 0 < validation < MIN_VALIDATION_QUERIES
    lines = result.stdout.splitlines()
    warning = lines.index(
        f"--force: {validation} validation queries cannot decide: the figures below cannot tell a gain from chance (a 95% interval "
        f"needs {MIN_VALIDATION_QUERIES} queries, even for a gain of 0.10 hit@3 with no query lost), so whether the model is better, "
        "and its epochs when they are decided, is not known"
    )
    assert lines[warning - 1].startswith("validation: ")  # above the figures it speaks of
    kept = re.search(r"^kept (all-MiniLM-L6-v2-tuned-[0-9a-f]{12}) in \S+ \(validation MRR@3 [0-9.]+ -> [0-9.]+, kept by --force\)", result.stdout, flags=re.M)
    assert kept and (tmp_path / "data" / "models" / kept[1] / "onnx" / "model.onnx").is_file(), result.stdout
    (plan,) = events_among(result.stderr, "tune_plan")
    # The default recipe: each pair against the other records of its batch alone.
    assert (plan["validation"], plan["negatives"]) == (str(validation), "in-batch"), plan


@pytest.mark.slow
def test_a_registry_without_golden_queries_is_tuned_on_its_records_purpose_lines(pg18_database_url, tmp_path):
    """Every record's Purpose line is a query its record answers (tests/quality/test_record_queries.py
    checks which); they decide on providers held apart, as golden queries would."""
    database_url = pg18_database_url
    import_catalog(database_url, tmp_path)
    env = local_env(database_url, tmp_path / "data")
    options = [*TUNE_OPTIONS, "--epochs", "1"]

    result = tune_process(env, "--json", *options, "--force", timeout=900)

    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert report["golden"]["usable"] == 0 and report["recordPairs"] == {"option": "auto", "queries": len(RECORDS), "pairs": len(RECORDS)}
    split = report["split"]
    assert split["on"] == "record queries" and split["training"] + split["validation"] == len(RECORDS)
    assert report["training"]["pairs"] == split["training"]
    assert report["validation"]["queries"] == split["validation"]
    assert report["final"]["pairs"] == len(RECORDS) and report["final"]["trainedOn"]["queries"] == len(RECORDS)
    assert (tmp_path / "data" / "models" / report["model"] / "onnx" / "model.onnx").is_file()
    (plan,) = events_among(result.stderr, "tune_plan")  # off a terminal, said in the log before it starts
    assert (plan["split_on"], plan["usable"], plan["record_queries"]) == ("record queries", "0", str(len(RECORDS))), plan

    # Off, with no golden query, there is nothing to train on: refused in words, nothing kept.
    code, failure, _ = cli_json({**env, "PAYRAIL_DATA_DIR": str(tmp_path / "other")}, "model", "tune", "--json", "--record-pairs", "off")
    assert code == 2 and failure["error"] == "invalid_input"
    assert failure["detail"].startswith("the registry's golden queries: there are no golden queries, and --record-pairs is off")
    assert "golden add" in failure["detail"] and not (tmp_path / "other" / "models").exists()


@pytest.mark.slow
def test_record_pairs_on_train_beside_the_golden_queries(tuned, tmp_path):
    env = {**tuned["env"], "PAYRAIL_DATA_DIR": str(tmp_path / "data")}

    result = tune_process(env, "--json", *TUNE_OPTIONS, "--epochs", "1", "--record-pairs", "on", "--force", timeout=900)

    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    split = report["split"]
    assert report["recordPairs"] == {"option": "on", "queries": len(RECORDS), "pairs": len(RECORDS)}
    # Golden queries decide; every record's Purpose line is trained on in both trainings (no
    # validation query's label is in them); the figures are on the golden queries alone.
    assert split["on"] == "golden queries" and split["training"] + split["validation"] == len(GOLDEN)
    assert report["training"]["pairs"] == split["training"] + len(RECORDS)
    assert report["final"]["pairs"] == len(GOLDEN) + len(RECORDS) and report["final"]["trainedOn"]["queries"] == len(GOLDEN)


def test_openai_models_cannot_be_tuned(cli_env, tmp_path):
    golden = write_jsonl(tmp_path / "golden.jsonl", GOLDEN)

    code, failure, _ = cli_json(cli_env, "model", "tune", golden, "--json")

    assert code == 2 and failure["error"] == "misconfigured"
    assert "OpenAI embedding model" in failure["detail"] and "cannot be tuned" in failure["detail"]


def test_tune_refuses_golden_queries_that_leave_nothing_to_train_or_validate_on(database_url, tmp_path):
    env = local_env(database_url, tmp_path / "data")
    golden = write_jsonl(tmp_path / "golden.jsonl", GOLDEN)

    code, failure, _ = cli_json(env, "model", "tune", golden, "--json")
    assert code == 2 and failure["error"] == "invalid_input"
    assert failure["detail"].startswith("the registry has no embedding model yet")

    import_catalog(database_url, tmp_path)
    one_provider = write_jsonl(tmp_path / "one.jsonl", labelled_queries(RECORDS[1]) + [{"query": "x", "relevant": [["Nobody", "Nothing"]]}])
    code, failure, _ = cli_json(env, "model", "tune", one_provider, "--json")
    assert code == 2 and failure["error"] == "invalid_input"
    assert f"{len(PHRASINGS)} of {len(PHRASINGS) + 1} queries name enabled records of this registry, over 1 providers" in failure["detail"]
    # Golden queries naming no enabled record: refused, not tuned on the records behind the operator's back.
    unknown = write_jsonl(tmp_path / "unknown.jsonl", [{"query": "x", "relevant": [["Nobody", "Nothing"]]}])
    code, failure, _ = cli_json(env, "model", "tune", unknown, "--json")
    assert code == 2 and failure["error"] == "invalid_input"
    assert failure["detail"].startswith("unknown.jsonl: none of 1 golden queries names an enabled record of this registry")
    assert "--record-pairs on" in failure["detail"]
    assert not (tmp_path / "data" / "models").exists()


def alter_tokenizer(copy: Path) -> Path:
    tokenizer = copy / "tokenizer.json"
    tokenizer.write_text(tokenizer.read_text().replace("[UNK]", "[UNK2]"))
    return copy


def drop_weights(copy: Path) -> Path:
    (copy / "model.safetensors").unlink()
    return copy


def link_outside(copy: Path) -> Path:
    (copy / "extra.txt").symlink_to("/etc/passwd")
    return copy


def add_pickle(copy: Path) -> Path:
    (copy / "pytorch_model.bin").write_bytes(b"a pickle runs code when loaded")
    return copy


def renamed(name: str):
    return lambda copy: copy.rename(copy.with_name(name))


@pytest.mark.parametrize(
    ("tamper", "refusal"),
    [
        (alter_tokenizer, "not to the"),
        (drop_weights, "not to the"),
        (link_outside, "symbolic link"),
        (add_pickle, "pickled weights"),
        (renamed("all-MiniLM-L6-v2-tuned-000000000000"), "not to the 000000000000"),
        (renamed("my-model"), "is not a tuned model's name"),
    ],
    ids=["altered-tokenizer", "missing-weights", "symlink", "pickle", "renamed", "not-a-tuned-name"],
)
def test_install_refuses_a_copy_that_is_not_the_model_its_name_says(tuned, tamper, refusal, tmp_path):
    name = tuned["report"]["model"]
    copy = tamper(Path(shutil.copytree(tuned["models_dir"] / name, tmp_path / "copy" / name)))
    env = {**tuned["env"], "PAYRAIL_DATA_DIR": str(tmp_path / "data")}

    code, failure, _ = cli_json(env, "model", "install", copy, "--json")

    assert code == 2 and failure["error"] == "invalid_input", failure
    assert refusal in failure["detail"]
    assert not (tmp_path / "data" / "models").exists() or not any((tmp_path / "data" / "models").iterdir())


# --- a tune stopped: by a signal, by kill -9, by a full disk ------------------------------------------

# Long enough to be stopped while it trains (thousands of steps): a signal comes once its scratch directory exists.
LONG_TUNE = ["--epochs", "100", "--batch-size", "2", "--threads", "1", "--validation-fraction", "0.3"]
# Runs ARGV with the signals below as a process started from a terminal has them, whatever the test
# runner's are (a background job ignores SIGINT, nohup SIGHUP; ignored signals stay so across exec).
AS_FROM_A_TERMINAL = [
    sys.executable,
    "-c",
    "import os, signal, sys\nfor number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):\n    signal.signal(number, signal.SIG_DFL)\nos.execv(sys.argv[1], sys.argv[1:])",
]


@contextlib.contextmanager
def running_tune(env: dict[str, str], golden: Path, models: Path, logs: Path):
    """`model tune GOLDEN` in a process of its own, once it has made its scratch directory in
    models (the first thing it writes, as it starts to train): yields (the process, the directory).
    Stopped at the end if it still runs; its standard error is logs / tune-N.err."""
    before = set(models.glob(".tuning-*")) if models.exists() else set()
    stderr = logs / f"tune-{len(list(logs.glob('tune-*.err')))}.err"
    with open(stderr, "w") as errors:
        process = subprocess.Popen([*AS_FROM_A_TERMINAL, str(CLI), "model", "tune", str(golden), *LONG_TUNE], env=env, stdout=subprocess.DEVNULL, stderr=errors)
    try:

        def made() -> Path | None:
            assert process.poll() is None, stderr.read_text()[-3000:]
            return next((path for path in models.glob(".tuning-*") if path not in before), None)

        yield process, wait_until(made, "the tune's scratch directory", timeout=300)
    finally:
        if process.poll() is None:
            process.terminate()
            process.wait(timeout=60)


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=lambda stop: stop.name)
def test_a_tune_stopped_by_a_signal_leaves_no_scratch_behind(stop, database_url, tmp_path):
    """Before: SIGTERM (kill's default, a service manager's stop) ended the process where it stood,
    and its scratch directory (a model's weights and graph, 180 MB a training) stayed."""
    import_catalog(database_url, tmp_path)
    env = local_env(database_url, tmp_path / "data")
    models = tmp_path / "data" / "models"

    with running_tune(env, write_jsonl(tmp_path / "golden.jsonl", GOLDEN), models, tmp_path) as (process, scratch):
        process.send_signal(stop)
        assert process.wait(timeout=120) == -stop, "not ended by the signal"

    stderr = (tmp_path / "tune-0.err").read_text()
    assert "Traceback" not in stderr and stderr.endswith(f"\nAborted! (stopped by {stop.name}; removed {scratch})\n"), stderr
    assert list(models.iterdir()) == [], "scratch left behind, or a model kept"


def test_a_killed_tunes_scratch_goes_with_the_next_tune_and_two_tunes_keep_each_others(pg18_database_url, tmp_path):
    """kill -9 leaves a tune's scratch (nothing can clean up); the next tune removes it, and a tune
    started beside a running one leaves the running one's alone."""
    import_catalog(pg18_database_url, tmp_path)
    env = local_env(pg18_database_url, tmp_path / "data")
    golden = write_jsonl(tmp_path / "golden.jsonl", GOLDEN)
    models = tmp_path / "data" / "models"
    with running_tune(env, golden, models, tmp_path) as (killed, left):
        killed.kill()
        killed.wait()
    assert (left / "deciding").is_dir()

    with running_tune(env, golden, models, tmp_path) as (first, theirs):
        assert not left.exists()
        with running_tune(env, golden, models, tmp_path) as (second, ours):
            assert first.poll() is None and theirs.exists(), "the second tune removed the first's scratch"
            assert sorted(models.iterdir()) == sorted([theirs, ours])
            for process in (first, second):
                process.terminate()
                assert process.wait(timeout=120) == -signal.SIGTERM

    assert list(models.iterdir()) == []


@pytest.mark.parametrize("megabytes", [60, 150], ids=["weights", "graph"])
def test_a_tune_onto_a_full_disk_says_so_and_leaves_nothing(megabytes, pg18_database_url, tmp_path):
    """The models directory on a small device: full while the trained weights are written (60 MB:
    safetensors says so in words of its own), or while their ONNX graph is (150 MB)."""
    import_catalog(pg18_database_url, tmp_path)
    golden = write_jsonl(tmp_path / "golden.jsonl", GOLDEN[:12])
    with small_device(tmp_path / "disk", megabytes) as disk:
        env = local_env(pg18_database_url, disk / "data")

        # Forced: 12 golden queries are too few to decide, and the point is the disk.
        result = tune_process(
            env, "--json", golden, "--force", "--epochs", "1", "--batch-size", "2", "--threads", "1", "--validation-fraction", "0.3", timeout=600
        )

        models = disk / "data" / "models"
        assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-3000:]
        assert json.loads(result.stdout) == {
            "error": "unavailable",
            "detail": f"the disk is full: no space left on the device that holds {models}; "
            "free some space there, or set PAYRAIL_DATA_DIR to a directory on a disk with room",
        }
        assert list(models.iterdir()) == []
