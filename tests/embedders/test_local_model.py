"""The bundled model on ONNX Runtime (payrail_embedder.embedders.local_model): the same vectors as
sentence-transformers, no torch in a searching process, an export that concurrent first uses
share, the model's configuration read rather than assumed, and every failure a clear
search_unavailable.

The torch reference and the real export come from the same installed packages; nothing is mocked.
A process that must lack a package runs in a subprocess whose sys.modules blocks it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from payrail_embedder.embedders import EmbeddingUnavailable, LocalEmbedder, record_text
from payrail_embedder.embedders.local_model import (
    GRAPH_FILE,
    SAME_MODEL_TOLERANCE,
    OnnxSentenceEncoder,
    bundled_graph_dir,
    bundled_model_dir,
    cosine_distances,
    load_bundled,
    load_sentence_transformer,
)
from payrail_embedder.postgres import connection
from payrail_embedder.registry import catalog
from payrail_embedder.registry.records import read_lines
from payrail_test_support import REPO

pytestmark = pytest.mark.local_model

SAMPLE_CATALOG = REPO / "catalog" / "sample.jsonl"
# Questions of the kind agents ask, written for this test: short, long, unusual characters, one far
# over the model's 256 tokens (truncated), an empty string.
QUESTIONS = [
    "send an SMS to a customer",
    "find live hotel availability through a paid API",
    "Which API converts 100 EUR to JPY at today's rate, and can it also give me last week's history?",
    "géocoder une adresse à Zürich — 東京の天気",
    "refund a card payment " * 120,
    "",
]
SEMANTIC_QUESTION = "geocode a street address"
HEAVY_MODULES = ("torch", "sentence_transformers", "transformers")
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


@pytest.fixture(scope="module")
def torch_embedder() -> LocalEmbedder:
    return LocalEmbedder(runtime="torch")


@pytest.fixture(scope="module")
def onnx_embedder() -> LocalEmbedder:
    return LocalEmbedder()


def sample_texts() -> list[str]:
    records = [json.loads(line) for line in SAMPLE_CATALOG.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [record_text(r["provider"], r["method"], r["guidance"]) for r in records]


def test_the_bundled_model_runs_on_onnx_by_default(onnx_embedder):
    assert onnx_embedder.runtime == "onnx"
    assert onnx_embedder.model_name == "all-MiniLM-L6-v2"
    assert LocalEmbedder("some/other-model").runtime == "torch"
    with pytest.raises(ValueError, match="only the bundled all-MiniLM-L6-v2"):
        LocalEmbedder("some/other-model", runtime="onnx")


@pytest.fixture(scope="module")
def torch_vectors(torch_embedder) -> np.ndarray:
    """sentence-transformers' vectors of sample_texts() + QUESTIONS: the reference, computed once for every batch size."""
    return np.array(torch_embedder.embed(sample_texts() + QUESTIONS))


@pytest.mark.parametrize("batch_size", [64, 1])
def test_onnx_vectors_are_the_torch_vectors(onnx_embedder, torch_vectors, batch_size):
    texts = sample_texts() + QUESTIONS
    onnx_embedder.batch_size = batch_size

    expected = torch_vectors
    got = np.array(onnx_embedder.embed(texts))

    assert got.shape == expected.shape == (len(texts), 384)
    assert got.dtype == np.float32
    distances = cosine_distances(got, expected)
    assert distances.max() <= SAME_MODEL_TOLERANCE, texts[int(distances.argmax())]
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-6)
    # A query alone gets the vector it gets inside a batch.
    alone = onnx_embedder.embed([QUESTIONS[1]])[0]
    assert cosine_distances(alone[None], expected[len(texts) - len(QUESTIONS) + 1][None])[0] <= SAME_MODEL_TOLERANCE


# --- the model directory's configuration, read as sentence-transformers reads it -------------------


def model_copy(tmp_path: Path, edit) -> Path:
    """A copy of the bundled model directory (weights linked, not copied) with edit(copy) applied."""
    source = bundled_model_dir()
    copy = tmp_path / "model"
    shutil.copytree(source, copy, ignore=shutil.ignore_patterns("model.safetensors"))
    (copy / "model.safetensors").symlink_to(source / "model.safetensors")
    edit(copy)
    return copy


def edit_json(path: Path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def use_cls_pooling(copy: Path) -> None:
    edit_json(copy / "1_Pooling" / "config.json", lambda c: c.update(pooling_mode_mean_tokens=False, pooling_mode_cls_token=True))


def drop_normalize(copy: Path) -> None:
    edit_json(copy / "modules.json", lambda modules: modules.pop())


def truncate_at_16_tokens(copy: Path) -> None:
    edit_json(copy / "sentence_bert_config.json", lambda c: c.update(max_seq_length=16))


@pytest.mark.parametrize("edit", [use_cls_pooling, drop_normalize, truncate_at_16_tokens])
def test_pooling_normalization_and_truncation_follow_the_model_configuration(edit, tmp_path, onnx_embedder):
    copy = model_copy(tmp_path, edit)
    texts = QUESTIONS[:5]

    expected = load_sentence_transformer(str(copy)).encode(texts, convert_to_numpy=True)
    got = OnnxSentenceEncoder(copy, load_bundled_graph_dir()).encode(texts, batch_size=8)

    assert cosine_distances(got, expected).max() <= SAME_MODEL_TOLERANCE
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), np.linalg.norm(expected, axis=1), rtol=1e-5)
    # The edit changed the vectors: the configuration was read, not assumed.
    bundled = OnnxSentenceEncoder(bundled_model_dir(), load_bundled_graph_dir()).encode(texts, batch_size=8)
    assert cosine_distances(got, bundled).max() > 1e-3 or not np.allclose(np.linalg.norm(got, axis=1), 1.0)


def load_bundled_graph_dir() -> Path:
    load_bundled()  # exports it first where this machine has none
    return bundled_graph_dir()


@pytest.mark.parametrize(
    ("edit", "named"),
    [
        (
            lambda c: edit_json(c / "1_Pooling" / "config.json", lambda p: p.update(pooling_mode_mean_tokens=False, pooling_mode_max_tokens=True)),
            "pooling 'max'",
        ),
        (lambda c: edit_json(c / "1_Pooling" / "config.json", lambda p: p.update(pooling_mode="weightedmean")), "pooling 'weightedmean'"),
        (
            lambda c: edit_json(
                c / "modules.json", lambda m: m.insert(2, {"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"})
            ),
            "Dense",
        ),
        (lambda c: edit_json(c / "sentence_bert_config.json", lambda s: s.update(do_lower_case=True)), "do_lower_case"),
        (lambda c: (c / "1_Pooling" / "config.json").write_text("{not json"), "1_Pooling/config.json"),
        (lambda c: (c / "tokenizer.json").unlink(), "tokenizer.json"),
    ],
    ids=["max-pooling", "weightedmean-pooling", "dense-module", "lower-case", "broken-json", "no-tokenizer"],
)
def test_a_configuration_the_onnx_runtime_does_not_implement_is_refused_by_name(edit, named, tmp_path):
    copy = model_copy(tmp_path, edit)

    with pytest.raises(EmbeddingUnavailable, match=re.escape(named)) as raised:
        OnnxSentenceEncoder(copy, load_bundled_graph_dir())
    assert str(copy) in str(raised.value)


# --- processes: what a searching process imports, first uses, failures ---------------------------


@pytest.fixture
def registry_url(database_url, onnx_embedder, tmp_path) -> str:
    """A registry holding the sample catalog's first records (Stripe's among them), embedded by the
    bundled model."""
    lines = SAMPLE_CATALOG.read_text(encoding="utf-8").splitlines(keepends=True)[:12]
    (tmp_path / "catalog.jsonl").write_text("".join(lines), encoding="utf-8")
    with connection.connect(database_url, autocommit=True) as conn:
        report = catalog.import_records(conn, lambda: onnx_embedder, read_lines(tmp_path / "catalog.jsonl"))
    assert report.saved and not report.refused
    return database_url


def python_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PAYRAIL_", "OPENAI_"))}
    env.update(PAYRAIL_DATA_DIR=str(tmp_path / "unused-embedded-data"), PAYRAIL_EMBEDDER="local", **OFFLINE, **extra)
    return env


def run_python(env: dict[str, str], code: str, *args: str, flags: tuple[str, ...] = (), timeout: float = 300):
    return subprocess.run([sys.executable, *flags, "-c", code, *args], env=env, capture_output=True, text=True, timeout=timeout, cwd=REPO)


def cli_code(blocked: tuple[str, ...] = ()) -> str:
    """payrail-embedder's entry point, in a process where importing each of `blocked` fails."""
    block = "".join(f"sys.modules[{name!r}] = None\n" for name in blocked)
    return f"import sys\n{block}from payrail_embedder.cli import cli\ncli(prog_name='payrail-embedder')"


def imported_modules(importtime_log: str) -> set[str]:
    """Top-level packages named by python -X importtime's report."""
    names = set()
    for line in importtime_log.splitlines():
        if line.startswith("import time:") and "|" in line:
            names.add(line.rsplit("|", 1)[1].strip().split(".")[0])
    return names


@pytest.mark.parametrize(
    ("args", "onnx_expected"),
    [
        (["search", "--json", SEMANTIC_QUESTION], True),
        (["search", "--json", "Stripe"], False),
        (["db", "url"], False),
        (["--help"], False),
    ],
    ids=["semantic-search", "name-search", "db-url", "help"],
)
def test_a_command_imports_no_torch_and_only_what_its_path_needs(args, onnx_expected, registry_url, tmp_path):
    result = run_python(python_env(tmp_path, PAYRAIL_DATABASE_URL=registry_url), cli_code(), *args, flags=("-X", "importtime"))

    assert result.returncode == 0, result.stderr[-2000:]
    modules = imported_modules(result.stderr)
    assert "payrail_embedder" in modules
    assert not modules & set(HEAVY_MODULES), sorted(modules & set(HEAVY_MODULES))
    assert ("onnxruntime" in modules) == onnx_expected
    if args[0] == "search":
        assert len(json.loads(result.stdout)["matches"]) >= 1


EMBED_ONE = (
    "import json, sys\n"
    "from payrail_embedder.embedders import LocalEmbedder\n"
    "vector = LocalEmbedder().embed([sys.argv[1]])[0]\n"
    "print(json.dumps([float(x) for x in vector]))"
)


def test_concurrent_first_uses_export_the_graph_once_and_agree(tmp_path, torch_embedder):
    """Two processes on a machine with no export yet: both export, one rename wins, both answer."""
    env = python_env(tmp_path, XDG_CACHE_HOME=str(tmp_path / "cache"))
    processes = [
        subprocess.Popen([sys.executable, "-c", EMBED_ONE, SEMANTIC_QUESTION], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
        for _ in range(2)
    ]
    outputs = [process.communicate(timeout=600) for process in processes]

    for process, (_, err) in zip(processes, outputs, strict=True):
        assert process.returncode == 0, err[-2000:]
    expected = torch_embedder.embed([SEMANTIC_QUESTION])[0]
    for out, _ in outputs:
        assert cosine_distances(np.array([json.loads(out)]), expected[None])[0] <= SAME_MODEL_TOLERANCE
    # One graph directory, complete; no private export directory left behind.
    cache = tmp_path / "cache" / "payrail-agent-search"
    (graph,) = cache.iterdir()
    assert sorted(p.name for p in graph.iterdir()) == [GRAPH_FILE, f"{GRAPH_FILE}.data"]

    # With the export in place, a process uses it without torch.
    check = run_python(env, EMBED_ONE + "\nassert 'torch' not in sys.modules, 'torch imported'", SEMANTIC_QUESTION)
    assert check.returncode == 0, check.stderr[-2000:]


def damaged_graph(graph: Path) -> None:
    (graph / GRAPH_FILE).write_bytes(b"not an onnx graph")


def truncated_weights(graph: Path) -> None:
    weights = graph / f"{GRAPH_FILE}.data"
    weights.write_bytes(weights.read_bytes()[: 1 << 20])


@pytest.mark.parametrize("damage", [damaged_graph, truncated_weights])
def test_a_damaged_export_makes_search_unavailable_naming_the_file(damage, registry_url, tmp_path, monkeypatch):
    intact = load_bundled_graph_dir()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    graph = bundled_graph_dir()
    shutil.copytree(intact, graph)
    damage(graph)
    env = python_env(tmp_path, PAYRAIL_DATABASE_URL=registry_url, XDG_CACHE_HOME=str(tmp_path / "cache"))

    result = run_python(env, cli_code(), "search", "--json", SEMANTIC_QUESTION)

    assert result.returncode == 1, result.stderr
    answer = json.loads(result.stdout)
    assert answer["error"] == "search_unavailable"
    assert str(graph / GRAPH_FILE) in answer["detail"] and f"Delete {graph}" in answer["detail"]
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("blocked", "cache", "named"),
    [
        (("onnxruntime",), "user", "needs onnxruntime and tokenizers"),
        (("tokenizers",), "user", "needs onnxruntime and tokenizers"),
        (("torch",), "empty", "needs torch and onnx"),
    ],
    ids=["no-onnxruntime", "no-tokenizers", "no-torch-to-export"],
)
def test_a_missing_package_makes_search_unavailable_saying_what_to_install(blocked, cache, named, registry_url, tmp_path):
    extra = {"XDG_CACHE_HOME": str(tmp_path / "cache")} if cache == "empty" else {}
    env = python_env(tmp_path, PAYRAIL_DATABASE_URL=registry_url, **extra)

    result = run_python(env, cli_code(blocked), "search", "--json", SEMANTIC_QUESTION)

    assert result.returncode == 1, result.stderr
    answer = json.loads(result.stdout)
    assert answer["error"] == "search_unavailable"
    assert named in answer["detail"] and "pip install" in answer["detail"]
    assert "Traceback" not in result.stderr
    # The name path never needed the model.
    named_search = run_python(env, cli_code(blocked), "search", "--json", "Stripe")
    assert named_search.returncode == 0, named_search.stderr
    assert {match["provider"] for match in json.loads(named_search.stdout)["matches"]} == {"Stripe"}
