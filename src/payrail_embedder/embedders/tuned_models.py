"""Tuned models: local models fine-tuned by `model tune`, kept in this installation's models directory.

A tuned model is named by its base model and its content: `all-MiniLM-L6-v2-tuned-<12 hex digits>`,
the start of the SHA-256 of its sentence-transformers files (file names and bytes, in name order),
so a name means one set of weights wherever it is copied. It lives in `<data dir>/models/NAME/`
(the data directory is PAYRAIL_DATA_DIR, else the user's data directory), where every command, the
Python API, the MCP server and the backoffice of this installation find it:

    NAME/modules.json, config.json, model.safetensors, tokenizer.json, ...   sentence-transformers' files: the hash covers these
    NAME/onnx/model.onnx, model.onnx.data    the graph ONNX Runtime runs on the query path, exported on this machine
    NAME/tuning.json                         how it was made (golden file, split, options, metrics before and after)

The graph is made on each machine from the weights (local_model.export, checked against
sentence-transformers), as the bundled model's is: `model install` copies a tuned model from
another machine, checks its name against its content and exports it.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from ..embedded import default_data_dir
from ..errors import CodedError
from . import local_model
from .protocol import EmbeddingUnavailable

NAME_PATTERN = re.compile(r"(?P<base>[A-Za-z0-9][A-Za-z0-9._-]*)-tuned-(?P<digest>[0-9a-f]{12})")
GRAPH_DIR = "onnx"
MANIFEST = "tuning.json"
# Not part of the model's content: made on each machine, or describing how the model was made.
NOT_CONTENT = frozenset({GRAPH_DIR, MANIFEST, "README.md"})
# Pickled weights run code when they are loaded; a tuned model carries safetensors only.
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt")
COPY_HINT = "copy it from the machine that tuned it and run `payrail-embedder model install DIRECTORY` (docs/embeddings.md, Tuning the local model)"


class TunedModelError(CodedError):
    """A directory that is not a sound tuned model (wrong name, content that does not match it, pickled files)."""

    code = "invalid_input"


def is_tuned_name(name: str) -> bool:
    return NAME_PATTERN.fullmatch(name) is not None


def base_model(name: str) -> str:
    """The model a tuned model was tuned from, at the root of its lineage; any other name itself."""
    match = NAME_PATTERN.fullmatch(name)
    return match["base"] if match else name


def models_dir(data_dir: Path | None) -> Path:
    """Where this installation keeps its tuned models: <data dir>/models."""
    return (data_dir or default_data_dir()) / "models"


def content_files(model_dir: Path) -> Iterator[Path]:
    """The files the name's hash covers, in name order."""
    for path in sorted(model_dir.rglob("*")):
        relative = path.relative_to(model_dir)
        if relative.parts[0] not in NOT_CONTENT and path.is_file():
            yield path


def content_digest(model_dir: Path) -> str:
    digest = hashlib.sha256()
    for path in content_files(model_dir):
        name = path.relative_to(model_dir).as_posix().encode()
        data = path.read_bytes()
        # Lengths first, so no two different sets of files hash the same bytes.
        digest.update(b"%d:%s%d:" % (len(name), name, len(data)))
        digest.update(data)
    return digest.hexdigest()


def tuned_name(base: str, model_dir: Path) -> str:
    return f"{base}-tuned-{content_digest(model_dir)[:12]}"


def check_content(model_dir: Path, name: str) -> None:
    """Refuses a directory that is not the tuned model `name`: no links, no pickled weights, and
    sentence-transformers files whose hash is the name's."""
    match = NAME_PATTERN.fullmatch(name)
    if match is None:
        raise TunedModelError(f"{name!r} is not a tuned model's name (BASE-tuned-<12 hex digits>, as `model tune` names them)")
    for path in model_dir.rglob("*"):
        if path.is_symlink():
            raise TunedModelError(f"{path} is a symbolic link; a tuned model holds regular files only")
        if path.suffix in PICKLE_SUFFIXES:
            raise TunedModelError(f"{path} holds pickled weights, which run code when loaded; a tuned model carries safetensors only")
    if not (model_dir / "modules.json").is_file():
        raise TunedModelError(f"{model_dir} holds no modules.json: not a sentence-transformers model directory")
    found = content_digest(model_dir)[:12]
    if found != match["digest"]:
        raise TunedModelError(
            f"the files of {model_dir} hash to {found}, not to the {match['digest']} of its name {name}: "
            "an incomplete or altered copy; copy the whole directory again"
        )


def locate(name: str, directory: Path) -> Path:
    """The directory of tuned model `name` in the models directory; EmbeddingUnavailable saying what to do when absent."""
    model_dir = directory / name
    if not (model_dir / "modules.json").is_file():
        raise EmbeddingUnavailable(f"the tuned model {name} is not installed on this machine (no {model_dir}): {COPY_HINT}")
    return model_dir


def load_encoder(name: str, directory: Path):
    """Tuned model `name` on ONNX Runtime (a local_model.OnnxSentenceEncoder); its graph exported
    first when this machine has none yet."""
    model_dir = locate(name, directory)
    graph = model_dir / GRAPH_DIR
    if not graph.exists():
        try:
            check_content(model_dir, name)
        except TunedModelError as error:
            raise EmbeddingUnavailable(str(error)) from error
        local_model.export(model_dir, graph, unwritable_hint="Make the models directory writable, or set PAYRAIL_DATA_DIR")
    return local_model.OnnxSentenceEncoder(model_dir, graph)


def keep(staged: Path, directory: Path) -> Path:
    """Moves a checked, exported model directory into the models directory under its own name, at
    once (a rename: a process finds it whole or not at all). An existing copy of the same name is
    the same model and stays."""
    target = directory / staged.name
    try:
        staged.rename(target)
    except OSError:
        if not (target / "modules.json").is_file():
            raise
    return target


def install(source: Path, directory: Path) -> Path:
    """Copies the tuned model directory `source` (from another machine) into the models directory:
    its content must match its name; its ONNX graph is exported here, whatever graph came with it."""
    source = source.resolve()
    name = source.name
    check_content(source, name)
    directory.mkdir(parents=True, exist_ok=True)
    if (directory / name / "modules.json").is_file():
        return directory / name
    with tempfile.TemporaryDirectory(prefix=".installing-", dir=directory) as scratch:
        staged = Path(scratch) / name
        shutil.copytree(source, staged, ignore=shutil.ignore_patterns(GRAPH_DIR))
        # Checked again as copied: the source may have changed while it was read.
        check_content(staged, name)
        local_model.export(staged, staged / GRAPH_DIR, unwritable_hint="Make the models directory writable, or set PAYRAIL_DATA_DIR")
        return keep(staged, directory)


def installed(directory: Path) -> list[dict]:
    """The tuned models of this installation, by name, with what their tuning.json says."""
    models = []
    for model_dir in sorted(directory.glob("*-tuned-*")):
        if not (model_dir.is_dir() and is_tuned_name(model_dir.name)):
            continue
        try:
            manifest = json.loads((model_dir / MANIFEST).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            manifest = None
        models.append({"name": model_dir.name, "path": str(model_dir), "exported": (model_dir / GRAPH_DIR).is_dir(), "tuning": manifest})
    return models
