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

import contextlib
import fcntl
import hashlib
import json
import math
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

from ..base.errors import CodedError
from ..base.output_files import writing_to
from ..base.paths import default_data_dir
from . import local_model
from .protocol import EmbeddingUnavailable

NAME_PATTERN = re.compile(r"(?P<base>[A-Za-z0-9][A-Za-z0-9._-]*)-tuned-(?P<digest>[0-9a-f]{12})")
GRAPH_DIR = "onnx"
MANIFEST = "tuning.json"
# Not part of the model's content: made on each machine, or describing how the model was made.
NOT_CONTENT = frozenset({GRAPH_DIR, MANIFEST, "README.md"})
# Pickled weights run code when they are loaded; a tuned model carries safetensors only.
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt")
UNWRITABLE_HINT = "Make the models directory writable, or set PAYRAIL_DATA_DIR"
FULL_HINT = "free some space there, or set PAYRAIL_DATA_DIR to a directory on a disk with room"
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


# What `model install` copies at most, well above a real model's: the bundled all-MiniLM-L6-v2 is
# 13 files, 91.6 MB (its weights one file of 90.9 MB), and a tuned copy of it with its exported
# graph about 185 MB. The bounds leave room for a base model of a billion parameters in float32.
MAX_ENTRIES = 256
MAX_FILE_BYTES = 2_000_000_000
MAX_TOTAL_BYTES = 4_000_000_000
# Each kind a directory entry may be but a directory or a regular file, in words.
ODD_KINDS = (
    (stat.S_ISLNK, "a symbolic link"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)
READ_CHUNK = 1 << 20


def entries(model_dir: Path) -> list[tuple[Path, os.stat_result]]:
    """Every file and directory under model_dir, in name order, with its lstat, links not followed;
    TunedModelError for anything else (a link, a FIFO, a socket, a device: a tuned model holds
    regular files only; reading a FIFO would wait forever, a device never end), for pickled
    weights, and beyond MAX_ENTRIES, MAX_FILE_BYTES or MAX_TOTAL_BYTES. Reads no file."""
    found, total, pending = [], 0, [model_dir]
    while pending:
        try:
            with os.scandir(pending.pop()) as scan:
                listed = [(Path(entry.path), entry.stat(follow_symlinks=False)) for entry in scan]
        except OSError as error:
            raise TunedModelError(f"{error.filename} cannot be read: {error.strerror}") from error
        for path, status in listed:
            kind = next((words for is_kind, words in ODD_KINDS if is_kind(status.st_mode)), None)
            if kind is not None:
                raise TunedModelError(f"{path} is {kind}; a tuned model holds regular files only")
            if path.suffix in PICKLE_SUFFIXES:
                raise TunedModelError(f"{path} holds pickled weights, which run code when loaded; a tuned model carries safetensors only")
            if stat.S_ISDIR(status.st_mode):
                pending.append(path)
            elif status.st_size > MAX_FILE_BYTES:
                raise TunedModelError(f"{path} holds {status.st_size:,} bytes, more than the {MAX_FILE_BYTES:,} a tuned model's file may")
            total += 0 if stat.S_ISDIR(status.st_mode) else status.st_size
            found.append((path, status))
        if len(found) > MAX_ENTRIES:
            raise TunedModelError(f"{model_dir} holds more than {MAX_ENTRIES} files and directories, more than a tuned model has")
        if total > MAX_TOTAL_BYTES:
            raise TunedModelError(f"{model_dir} holds more than {MAX_TOTAL_BYTES:,} bytes, more than a tuned model may")
    return sorted(found)


def is_content(relative: Path) -> bool:
    return relative.parts[0] not in NOT_CONTENT


def open_regular(path: Path, size: int):
    """path opened for reading, refused unless it is still the regular file of `size` bytes that
    entries() found: no link followed, no FIFO waited for (something put there since)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as error:
        raise TunedModelError(f"{path} cannot be read ({error.strerror}): was it changed meanwhile?") from error
    status = os.fstat(fd)
    if not stat.S_ISREG(status.st_mode) or status.st_size != size:
        os.close(fd)
        raise TunedModelError(f"{path} changed while it was read; copy the whole directory again")
    return os.fdopen(fd, "rb")


def read_chunks(path: Path, size: int) -> Iterator[bytes]:
    """path's bytes (open_regular), a chunk at a time, exactly `size` of them."""
    read = 0
    with open_regular(path, size) as file:
        while chunk := file.read(READ_CHUNK):
            read += len(chunk)
            if read > size:
                break
            yield chunk
    if read != size:
        raise TunedModelError(f"{path} changed while it was read; copy the whole directory again")


def content_digest(model_dir: Path, listed: list[tuple[Path, os.stat_result]] | None = None) -> str:
    """The SHA-256 of the files the name covers (all but NOT_CONTENT), in name order; listed:
    entries(model_dir), when at hand."""
    digest = hashlib.sha256()
    for path, status in entries(model_dir) if listed is None else listed:
        relative = path.relative_to(model_dir)
        if not (is_content(relative) and stat.S_ISREG(status.st_mode)):
            continue
        name = relative.as_posix().encode()
        # Lengths first, so no two different sets of files hash the same bytes.
        digest.update(b"%d:%s%d:" % (len(name), name, status.st_size))
        for chunk in read_chunks(path, status.st_size):
            digest.update(chunk)
    return digest.hexdigest()


def tuned_name(base: str, model_dir: Path) -> str:
    return f"{base}-tuned-{content_digest(model_dir)[:12]}"


def check_content(model_dir: Path, name: str) -> None:
    """Refuses a directory that is not the tuned model `name`: directories and regular files only,
    within the bounds, no pickled weights (entries()), and sentence-transformers files whose hash
    is the name's."""
    match = NAME_PATTERN.fullmatch(name)
    if match is None:
        raise TunedModelError(f"{name!r} is not a tuned model's name (BASE-tuned-<12 hex digits>, as `model tune` names them)")
    listed = entries(model_dir)
    if not (model_dir / "modules.json").is_file():
        raise TunedModelError(f"{model_dir} holds no modules.json: not a sentence-transformers model directory")
    found = content_digest(model_dir, listed)[:12]
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
        local_model.export(model_dir, graph, unwritable_hint=UNWRITABLE_HINT)
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


class InstallRunning(CodedError):
    """Another `model install` is under way in the same models directory."""

    code = "unavailable"


# `model tune` and `model install` work in private scratch directories inside the models directory,
# named by these prefixes. Each process holds a lock (flock) on its own scratch directory while it
# lives, and the kernel drops a dead process's lock, so a scratch directory whose lock is free was
# left by a process killed where nothing could clean up (kill -9, a power cut). Every tune and install
# removes those before it makes its own: both while holding the models directory's lock (briefly),
# so a sweep never takes a scratch directory being made, nor one whose process still runs (two
# tunes at once, a tune beside an install).
TUNING_PREFIX = ".tuning-"
STAGING_PREFIX = ".installing-"
SCRATCH_PREFIXES = (TUNING_PREFIX, STAGING_PREFIX)
# One install at a time in a models directory: it holds this file's lock while it runs.
INSTALL_LOCK = ".install.lock"


@contextlib.contextmanager
def _locked_directory(path: Path, flags: int = fcntl.LOCK_EX) -> Iterator[int]:
    """path, a directory, opened and locked (flock with flags) while the block runs."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, flags)
        yield fd
    finally:
        os.close(fd)


# The scratch directories this process holds now: what remove_held_scratch removes when a signal
# ends the process (the command line's handler), since no block unwinds then.
_held: set[Path] = set()


@contextlib.contextmanager
def scratch_directory(directory: Path, prefix: str) -> Iterator[Path]:
    """A private directory in the models directory (prefix: one of SCRATCH_PREFIXES), locked while
    the block runs and removed afterwards, however the block ends; the scratch directories of
    processes that were killed are removed first (remove_abandoned)."""
    directory.mkdir(parents=True, exist_ok=True)
    with _locked_directory(directory):
        remove_abandoned(directory)
        scratch = Path(tempfile.mkdtemp(prefix=prefix, dir=directory))
        _held.add(scratch)
        owned = contextlib.ExitStack()
        owned.enter_context(_locked_directory(scratch))
    with owned:
        try:
            yield scratch
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
            _held.discard(scratch)


def remove_held_scratch() -> list[Path]:
    """Removes the scratch directories this process holds, for a signal that ends it; returns them."""
    held = sorted(_held)
    for scratch in held:
        shutil.rmtree(scratch, ignore_errors=True)
    return held


def remove_abandoned(directory: Path) -> list[Path]:
    """Removes the scratch directories in directory whose lock is free: their process is gone.
    Called holding directory's lock, so none of them is being made. Returns those removed."""
    removed = []
    for scratch in sorted(directory.iterdir()):
        if not (scratch.name.startswith(SCRATCH_PREFIXES) and scratch.is_dir() and not scratch.is_symlink()):
            continue
        try:
            with _locked_directory(scratch, fcntl.LOCK_EX | fcntl.LOCK_NB):
                shutil.rmtree(scratch, ignore_errors=True)
                removed.append(scratch)
        except BlockingIOError:
            continue  # its process runs
    return removed


@contextlib.contextmanager
def staging_directory(directory: Path) -> Iterator[Path]:
    """A scratch directory in the models directory to copy and export into, removed afterwards,
    while no other install runs there; killed tunes' and installs' leftovers are removed first."""
    directory.mkdir(parents=True, exist_ok=True)
    lock = os.open(directory / INSTALL_LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise InstallRunning(f"another `model install` is running in {directory}; run this one once it has finished") from None
        with scratch_directory(directory, STAGING_PREFIX) as scratch:
            yield scratch
    finally:
        os.close(lock)


def copy_entries(source: Path, listed: list[tuple[Path, os.stat_result]], target: Path) -> None:
    """Copies the entries of source (entries(source)) but its graph into target: directories, and
    each regular file as entries() found it (open_regular), byte for byte."""
    target.mkdir()
    for path, status in listed:
        relative = path.relative_to(source)
        if relative.parts[0] == GRAPH_DIR:
            continue
        if stat.S_ISDIR(status.st_mode):
            (target / relative).mkdir()
            continue
        with open(target / relative, "xb") as copy:
            for chunk in read_chunks(path, status.st_size):
                copy.write(chunk)


def install(source: Path, directory: Path) -> Path:
    """Copies the tuned model directory `source` (from another machine) into the models directory:
    its content must match its name (check_content: nothing is copied otherwise); its ONNX graph is
    exported here, whatever graph came with it. A private copy is checked again and exported,
    then renamed into place, so the model appears whole or not at all."""
    source = source.resolve()
    name = source.name
    check_content(source, name)
    directory.mkdir(parents=True, exist_ok=True)
    if (directory / name / "modules.json").is_file():
        return directory / name
    with writing_to(directory, FULL_HINT), staging_directory(directory) as scratch:
        if (directory / name / "modules.json").is_file():  # installed by an install that ended since the check above
            return directory / name
        staged = scratch / name
        copy_entries(source, entries(source), staged)
        # Checked again as copied: the source may have changed since it was checked.
        check_content(staged, name)
        local_model.export(staged, staged / GRAPH_DIR, unwritable_hint=UNWRITABLE_HINT)
        return keep(staged, directory)


def installed(directory: Path) -> list[dict]:
    """The tuned models of this installation, by name, with what their tuning.json says
    (read_manifest): "tuning" the manifest or None, "tuningProblem" why it is not shown, or None."""
    models = []
    for model_dir in sorted(directory.glob("*-tuned-*")):
        if not (model_dir.is_dir() and is_tuned_name(model_dir.name)):
            continue
        manifest, problem = read_manifest(model_dir)
        models.append(
            {"name": model_dir.name, "path": str(model_dir), "exported": (model_dir / GRAPH_DIR).is_dir(), "tuning": manifest, "tuningProblem": problem}
        )
    return models


# tuning.json as `model tune` writes it: a few kB, nested 4 deep, more by 100 bytes for each label
# warning it lists. Not part of a model's content, so a copy from elsewhere may carry any file
# there, which `model install` copies as it is: it is read within these bounds, as text from elsewhere.
MAX_MANIFEST_BYTES = 4 * 2**20
MAX_MANIFEST_DEPTH = 16
# Its integers are counts, and the seed (which may be any integer, of far fewer digits than this).
MAX_MANIFEST_DIGITS = 100
LONE_SURROGATE = re.compile("[\\ud800-\\udfff]")


class ManifestRefused(ValueError):
    """tuning.json is not what `model tune` writes, in words."""


def read_manifest(model_dir: Path) -> tuple[dict | None, str | None]:
    """(tuning.json of model_dir, None), or (None, why it is not shown), or (None, None) when
    there is none. Shown: a regular file (no link followed, no FIFO waited for) of at most
    MAX_MANIFEST_BYTES, UTF-8 JSON of an object nested at most MAX_MANIFEST_DEPTH deep, holding
    finite numbers and text without lone surrogates (which no UTF-8 output can carry)."""
    path = model_dir / MANIFEST
    try:
        status = path.lstat()
    except FileNotFoundError:
        return None, None
    except OSError as error:
        return None, f"{MANIFEST} cannot be read: {error.strerror}"
    kind = next((words for is_kind, words in ODD_KINDS if is_kind(status.st_mode)), None)
    if kind is not None or not stat.S_ISREG(status.st_mode):
        return None, f"{MANIFEST} is {kind or 'a directory'}, not a file"
    if status.st_size > MAX_MANIFEST_BYTES:
        return None, f"{MANIFEST} holds {status.st_size:,} bytes, more than the {MAX_MANIFEST_BYTES:,} model list reads"
    try:
        data = b"".join(read_chunks(path, status.st_size))
        manifest = json.loads(data.decode("utf-8"), parse_constant=_refuse_constant, parse_float=_finite_float, parse_int=_short_int)
        _check_manifest(manifest)
    except TunedModelError as error:
        return None, str(error)
    except UnicodeDecodeError as error:
        return None, f"{MANIFEST} is not UTF-8 (byte {error.start + 1})"
    except RecursionError:
        return None, f"{MANIFEST} is nested more than {MAX_MANIFEST_DEPTH} deep"
    except ManifestRefused as error:
        return None, f"{MANIFEST} {error}"
    except ValueError as error:  # json.JSONDecodeError, or an integer too long to convert
        return None, f"{MANIFEST} is not JSON: {error}"
    return manifest, None


def _refuse_constant(name: str):
    raise ManifestRefused(f"holds {name}, which is not a number JSON allows")


def _finite_float(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise ManifestRefused(f"holds {text[:40]}, a number beyond floating point")
    return number


def _short_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_MANIFEST_DIGITS:
        raise ManifestRefused(f"holds an integer of {len(text.lstrip('-')):,} digits")
    return int(text)


def _check_manifest(manifest: object) -> None:
    """ManifestRefused unless manifest is a JSON object within MAX_MANIFEST_DEPTH whose text
    (keys too) holds no lone surrogate; walked without recursion."""
    if not isinstance(manifest, dict):
        raise ManifestRefused(f"holds a JSON {type(manifest).__name__}, not the object model tune writes")
    pending: list[tuple[object, int]] = [(manifest, 1)]
    while pending:
        value, depth = pending.pop()
        if depth > MAX_MANIFEST_DEPTH:
            raise ManifestRefused(f"is nested more than {MAX_MANIFEST_DEPTH} deep")
        if isinstance(value, dict):
            pending += [(key, depth) for key in value]
            pending += [(item, depth + 1) for item in value.values()]
        elif isinstance(value, list):
            pending += [(item, depth + 1) for item in value]
        elif isinstance(value, str) and LONE_SURROGATE.search(value):
            raise ManifestRefused("holds text that is not Unicode (a lone surrogate)")
