"""`model install` attacked with what a copied directory may hold: links, FIFOs, sockets, devices,
files and totals beyond any model, files swapped while it copies, a concurrent install, and an
install killed midway (payrail_embedder.embedders.tuned_models).

Refusals come before anything is copied, so most of these use a small hand-made directory whose
files hash to its name (all a refusal needs); the killed install copies the bundled model's real
files under a tuned model's name, and is exported (the real local model: slow). `model install`
never touches the database, so these run once, not on each server.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from payrail_embedder.embedders import local_model, tuned_models
from payrail_embedder.embedders.tuned_models import INSTALL_LOCK, MAX_ENTRIES, MAX_FILE_BYTES, MAX_TOTAL_BYTES, STAGING_PREFIX
from payrail_test_support import CLI
from payrail_test_support.cli import cli_json, run_cli_subprocess
from payrail_test_support.devices import fill, small_device
from payrail_test_support.waiting import wait_until

BASE = "all-MiniLM-L6-v2"


def env_for(data_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PAYRAIL_", "OPENAI_"))}
    # Never connected to: model install works on files alone (a URL keeps the call in process).
    return {**env, "PAYRAIL_DATA_DIR": str(data_dir), "PAYRAIL_DATABASE_URL": "postgresql:///unused", "PAYRAIL_EMBEDDER": "local"}


def named_by_content(model_dir: Path) -> Path:
    """model_dir renamed to the tuned model name its files hash to."""
    return model_dir.rename(model_dir.with_name(tuned_models.tuned_name(BASE, model_dir)))


def hand_made_model(parent: Path) -> Path:
    """A directory holding a few small files, named as their hash says: a model to every check
    install makes before it copies (not one sentence-transformers can load)."""
    model_dir = parent / "model"
    (model_dir / "1_Pooling").mkdir(parents=True)
    (model_dir / "modules.json").write_text('[{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"}]')
    (model_dir / "config.json").write_text('{"hidden_size": 384}')
    (model_dir / "1_Pooling" / "config.json").write_text('{"pooling_mode_mean_tokens": true}')
    (model_dir / "model.safetensors").write_bytes(b"\x00" * 4096)
    return named_by_content(model_dir)


def sparse(path: Path, size: int) -> None:
    """A file of size bytes that takes no disk: install refuses it from its size, before reading."""
    with open(path, "wb") as file:
        file.truncate(size)


def planted_socket(path: Path) -> None:
    # Bound by a relative name: a socket's path must fit in 108 bytes. Its file stays after it closes.
    with contextlib.chdir(path.parent), socket.socket(socket.AF_UNIX) as listening:
        listening.bind(path.name)


ATTACKS = {
    "symlink-to-a-file": (lambda m: (m / "extra.txt").symlink_to("/etc/passwd"), "extra.txt is a symbolic link"),
    "symlink-to-a-directory": (lambda m: (m / "2_Dense").symlink_to("/etc"), "2_Dense is a symbolic link"),
    "symlink-in-a-subdirectory": (lambda m: (m / "1_Pooling" / "x").symlink_to("../config.json"), "1_Pooling/x is a symbolic link"),
    "fifo": (lambda m: os.mkfifo(m / "tokenizer.json"), "tokenizer.json is a FIFO"),
    "fifo-in-the-graph": (lambda m: (m / "onnx").mkdir() or os.mkfifo(m / "onnx" / "model.onnx"), "onnx/model.onnx is a FIFO"),
    "socket": (lambda m: planted_socket(m / "s"), "/s is a socket"),
    "character-device": (lambda m: os.mknod(m / "zero", 0o600 | 0o020000, os.makedev(1, 5)), "zero is a character device"),
    "file-too-large": (
        lambda m: sparse(m / "big.safetensors", MAX_FILE_BYTES + 1),
        f"big.safetensors holds {MAX_FILE_BYTES + 1:,} bytes, more than the {MAX_FILE_BYTES:,} a tuned model's file may",
    ),
    "total-too-large": (
        lambda m: [sparse(m / f"shard-{n}.safetensors", MAX_FILE_BYTES) for n in range(MAX_TOTAL_BYTES // MAX_FILE_BYTES)],
        f"holds more than {MAX_TOTAL_BYTES:,} bytes, more than a tuned model may",
    ),
    "too-many-files": (
        lambda m: [(m / f"f{n}.txt").touch() for n in range(MAX_ENTRIES)],
        f"holds more than {MAX_ENTRIES} files and directories, more than a tuned model has",
    ),
}


@pytest.mark.parametrize("attack", ATTACKS)
def test_install_refuses_anything_but_regular_files_within_bounds_and_copies_nothing(attack, tmp_path):
    """Before: a FIFO made install wait forever (it was opened to hash it), a device such as
    /dev/zero read until memory ran out, a socket ended in a traceback, and sizes had no bound."""
    plant, refusal = ATTACKS[attack]
    source = hand_made_model(tmp_path / "copied")
    plant(source)

    code, failure, _ = cli_json(env_for(tmp_path / "data"), "model", "install", "--json", source)

    assert (code, failure["error"]) == (2, "invalid_input") and refusal in failure["detail"], failure
    assert "a tuned model holds regular files only" in failure["detail"] or "more than" in failure["detail"]
    assert not (tmp_path / "data" / "models").exists(), "something was copied"


def test_the_hand_made_model_passes_every_check_before_the_export(tmp_path):
    """The refusals above come from what was planted: the same directory without it is taken up
    to the export, which needs a real model."""
    source = hand_made_model(tmp_path / "copied")
    tuned_models.check_content(source, source.name)
    assert len(tuned_models.entries(source)) == 5


@pytest.mark.parametrize("swap", ["symlink", "fifo", "grown"])
def test_a_file_swapped_after_the_check_is_refused_while_copying(swap, tmp_path):
    """The copy opens each file without following a link or waiting on a FIFO, and takes it only
    as the check found it: a file swapped in between is refused, not followed or waited for."""
    source = hand_made_model(tmp_path / "copied")
    listed = tuned_models.entries(source)
    weights = source / "model.safetensors"
    if swap == "grown":
        weights.write_bytes(b"\x00" * 8192)
    else:
        weights.unlink()
        weights.symlink_to("/dev/zero") if swap == "symlink" else os.mkfifo(weights)

    with pytest.raises(tuned_models.TunedModelError) as refused:
        tuned_models.copy_entries(source, listed, tmp_path / "target")

    assert str(weights) in str(refused.value) and ("changed" in str(refused.value) or "cannot be read" in str(refused.value))


# A process holding a scratch directory of the prefix argv[2] (INSTALLING: an install's, its lock
# held too), with a partial file in it, as a tune or an install does while it runs.
INSTALLING = "install"
HOLDER = (
    "import sys, time; from pathlib import Path; from payrail_embedder.embedders import tuned_models\n"
    "models, prefix = Path(sys.argv[1]), sys.argv[2]\n"
    f"held = tuned_models.staging_directory(models) if prefix == {INSTALLING!r} else tuned_models.scratch_directory(models, prefix)\n"
    "with held as scratch:\n"
    "    (scratch / 'partial.safetensors').write_bytes(b'half')\n    print(scratch, flush=True)\n    time.sleep(600)\n"
)


@contextlib.contextmanager
def scratch_holder(models: Path, prefix: str):
    """A process holding a scratch directory (HOLDER); yields (the process, its directory); killed at the end."""
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(models), prefix], stdout=subprocess.PIPE, text=True)
    try:
        yield holder, Path(holder.stdout.readline().strip())
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()


def killed_holder(models: Path, prefix: str) -> Path:
    """The scratch directory of a process SIGKILLed while it held it: left behind, its lock free."""
    with scratch_holder(models, prefix) as (holder, scratch):
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert (scratch / "partial.safetensors").exists()
    return scratch


def test_a_new_scratch_directory_removes_those_of_killed_processes_and_no_running_ones(tmp_path):
    """kill -9 leaves a tune's or an install's scratch (hundreds of MB each); the next tune or
    install removes it, but never the scratch of a tune or install still running beside it."""
    models = tmp_path / "models"
    killed = [killed_holder(models, tuned_models.TUNING_PREFIX), killed_holder(models, STAGING_PREFIX)]
    with scratch_holder(models, tuned_models.TUNING_PREFIX) as (running, theirs):
        with tuned_models.scratch_directory(models, tuned_models.TUNING_PREFIX) as ours:
            assert sorted(models.iterdir()) == sorted([theirs, ours])
            assert not any(path.exists() for path in killed)
            with tuned_models.scratch_directory(models, STAGING_PREFIX) as another:  # ours is in use too
                assert sorted(models.iterdir()) == sorted([theirs, ours, another])
        assert list(models.iterdir()) == [theirs] and (theirs / "partial.safetensors").exists()
        assert running.poll() is None
    # Its process is gone now: the next one removes it.
    with tuned_models.scratch_directory(models, tuned_models.TUNING_PREFIX) as ours:
        assert list(models.iterdir()) == [ours]
    assert list(models.iterdir()) == []


def test_an_install_running_keeps_another_out_and_the_leftovers_of_a_killed_one_go(tmp_path):
    models = tmp_path / "models"
    # An install killed while it held the lock and its staging directory: a process of its own, SIGKILLed.
    with scratch_holder(models, INSTALLING) as (_, leftover):
        code, failure, _ = cli_json(env_for(tmp_path), "model", "install", "--json", hand_made_model(tmp_path / "copied"))
        assert (code, failure) == (1, {"error": "unavailable", "detail": f"another `model install` is running in {models}; run this one once it has finished"})

    assert leftover.name.startswith(STAGING_PREFIX) and (leftover / "partial.safetensors").exists()
    with tuned_models.staging_directory(models) as scratch:
        assert [p.name for p in models.iterdir() if p.name != INSTALL_LOCK] == [scratch.name]
    assert [p.name for p in models.iterdir()] == [INSTALL_LOCK]
    # The lock file is only a lock: another process may take it now.
    with open(models / INSTALL_LOCK) as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)


@pytest.mark.local_model
@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGTERM], ids=lambda stop: stop.name)
def test_an_install_killed_while_it_copies_leaves_nothing_the_next_one_trips_over(stop, tmp_path):
    """SIGKILL once the weights' copy has begun (the staging directory holds a part of them, or
    they are being exported), then the same install again: it removes the leftover, and a killed
    tune's, keeps a running tune's, and installs. SIGTERM leaves no leftover at all."""
    bundled = local_model.bundled_model_dir()
    source = tmp_path / "copied" / "model"
    shutil.copytree(bundled, source, ignore=shutil.ignore_patterns(".gitattributes"))
    source = named_by_content(source)
    models = tmp_path / "data" / "models"
    env = env_for(tmp_path / "data")

    killed = subprocess.Popen([str(CLI), "model", "install", str(source)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def weights_copying() -> Path | None:
        staged = next(models.glob(f"{STAGING_PREFIX}*/{source.name}/model.safetensors"), None)
        return staged if staged is not None and staged.stat().st_size > 0 else None

    staged = wait_until(weights_copying, "the weights' copy to begin", timeout=120, interval=0.001)
    killed.send_signal(stop)
    assert killed.wait(timeout=60) == -stop
    stderr = killed.stderr.read().decode()
    killed.stderr.close()
    if stop == signal.SIGTERM:
        assert stderr.endswith(f"Aborted! (stopped by SIGTERM; removed {staged.parent.parent})\n"), stderr
        assert [p.name for p in models.iterdir()] == [INSTALL_LOCK]
    else:
        assert staged.exists() and not (models / source.name).exists()
    copied = staged.stat().st_size if staged.exists() else 0
    # And a tune killed there earlier, beside one running now.
    killed_tune = killed_holder(models, tuned_models.TUNING_PREFIX)

    with scratch_holder(models, tuned_models.TUNING_PREFIX) as (_, running_tune):
        code, installed, stderr = cli_json(env, "model", "install", "--json", source)
        assert sorted(p.name for p in models.iterdir()) == sorted([INSTALL_LOCK, source.name, running_tune.name]), "a killed process's scratch is left"

    assert code == 0, (installed, stderr)
    assert installed == {"model": source.name, "path": str(models / source.name)}
    assert not killed_tune.exists()
    assert (models / source.name / "onnx" / "model.onnx").is_file()
    tuned_models.check_content(models / source.name, source.name)
    print(f"killed after copying {copied:,} of {(bundled / 'model.safetensors').stat().st_size:,} bytes of the weights")


# --- model list: tuning.json is a file from elsewhere ------------------------------------------------
# tuning.json is no part of a model's content (its name does not cover it), so a copy from another
# machine may carry any file there, and `model install` copies it as it is.

GOOD_TUNING = {
    "tunedFrom": "all-MiniLM-L6-v2",
    "created": "2026-01-02T03:04:05+00:00",
    "validation": {"queries": 4, "before": {"mrr@3": 0.25}, "after": {"mrr@3": 0.5}},
    "final": {"trainedOn": {"queries": 12, "before": {"mrr@3": 0.5}, "after": {"mrr@3": 0.75}}},
}
ESCAPES = "\x1b]0;owned\x07\x1b[2J\x9b31m\u202eevil\u2028"


def tuning_json(text: str | bytes):
    return lambda path: path.write_bytes(text if isinstance(text, bytes) else text.encode())


def nested(depth: int) -> str:
    return '{"a": ' * depth + "1" + "}" * depth


MANIFESTS = {
    "good": (tuning_json(json.dumps(GOOD_TUNING)), None),
    "terminal-escapes": (tuning_json(json.dumps({**GOOD_TUNING, "tunedFrom": ESCAPES, "created": ESCAPES})), None),
    "wrong-types": (
        tuning_json(
            json.dumps(
                {
                    "tunedFrom": 5,
                    "created": ["x"],
                    "validation": "high",
                    "final": {"trainedOn": {"queries": "all", "before": {"mrr@3": "0.5"}, "after": {"mrr@3": 7}}},
                }
            )
        ),
        None,
    ),
    "no-file": (lambda path: None, None),
    "a-list": (tuning_json("[1, 2]"), "tuning.json holds a JSON list, not the object model tune writes"),
    "nested-deep": (tuning_json("[" * 100_000), "tuning.json is nested more than 16 deep"),
    "nested-17": (tuning_json(nested(17)), "tuning.json is nested more than 16 deep"),
    "nan": (tuning_json('{"tunedFrom": NaN}'), "tuning.json holds NaN, which is not a number JSON allows"),
    "infinity": (tuning_json('{"x": -Infinity}'), "tuning.json holds -Infinity, which is not a number JSON allows"),
    "overflow": (tuning_json('{"x": 1e999}'), "tuning.json holds 1e999, a number beyond floating point"),
    "long-integer": (tuning_json('{"x": ' + "9" * 5_000 + "}"), "tuning.json holds an integer of 5,000 digits"),
    "lone-surrogate": (tuning_json('{"tunedFrom": "\\ud800"}'), "tuning.json holds text that is not Unicode (a lone surrogate)"),
    "not-utf8": (tuning_json(b'{"tunedFrom": "caf\xe9"}'), "tuning.json is not UTF-8 (byte 19)"),
    "malformed": (tuning_json('{"tunedFrom": '), "tuning.json is not JSON: Expecting value: line 1 column 15 (char 14)"),
    "huge": (
        lambda path: sparse(path, tuned_models.MAX_MANIFEST_BYTES + 1),
        f"tuning.json holds {tuned_models.MAX_MANIFEST_BYTES + 1:,} bytes, more than the {tuned_models.MAX_MANIFEST_BYTES:,} model list reads",
    ),
    "symlink-to-passwd": (lambda path: path.symlink_to("/etc/passwd"), "tuning.json is a symbolic link, not a file"),
    "symlink-to-zero": (lambda path: path.symlink_to("/dev/zero"), "tuning.json is a symbolic link, not a file"),
    "fifo": (lambda path: os.mkfifo(path), "tuning.json is a FIFO, not a file"),
    "directory": (lambda path: path.mkdir(), "tuning.json is a directory, not a file"),
}


def test_model_list_shows_any_tuning_json_escaped_or_says_why_not_and_never_fails(tmp_path):
    """Before: a FIFO or a link to /dev/zero hung `model list`, nesting, NaN and wrong types ended in
    a traceback, and terminal escapes and bidirectional controls reached the terminal raw."""
    models = tmp_path / "data" / "models"
    for n, (kind, (plant, _)) in enumerate(MANIFESTS.items()):
        model_dir = models / f"{BASE}-tuned-{n:012x}"
        model_dir.mkdir(parents=True)
        (model_dir / "modules.json").write_text("[]")
        plant(model_dir / "tuning.json")
    names = {kind: f"{BASE}-tuned-{n:012x}" for n, kind in enumerate(MANIFESTS)}

    # A process of its own with a deadline: reading a FIFO would wait forever, /dev/zero never end.
    text = run_cli_subprocess(env_for(tmp_path / "data"), "model", "list", timeout=60)
    listed = run_cli_subprocess(env_for(tmp_path / "data"), "model", "list", "--json", timeout=60)

    assert (text.returncode, text.stderr, listed.returncode, listed.stderr) == (0, "", 0, "")
    lines = dict(zip(names.values(), text.stdout.splitlines(), strict=True))
    answer = {model["name"]: model for model in json.loads(listed.stdout)["models"]}
    for kind, (_, problem) in MANIFESTS.items():
        name, path = names[kind], models / names[kind]
        assert answer[name]["tuningProblem"] == problem, kind
        if problem is not None:
            assert lines[name] == f"{name} ({problem}): {path}" and answer[name]["tuning"] is None, kind
    assert lines[names["good"]] == (
        f"{names['good']} (tuned from all-MiniLM-L6-v2 2026-01-02T03:04:05+00:00, validation MRR@3 0.250 -> 0.500, "
        f"on its 12 training queries (optimistic) MRR@3 0.500 -> 0.750): {models / names['good']}"
    )
    assert answer[names["good"]]["tuning"] == GOOD_TUNING
    assert lines[names["wrong-types"]] == f"{names['wrong-types']} (tuned from an unknown model): {models / names['wrong-types']}"
    assert lines[names["no-file"]] == f"{names['no-file']}: {models / names['no-file']}"
    shown = "\\x1b]0;owned\\x07\\x1b[2J\\x9b31m\\u202eevil\\u2028"
    assert lines[names["terminal-escapes"]].startswith(f"{names['terminal-escapes']} (tuned from {shown} {shown}, validation MRR@3 0.250")
    # The escapes reach neither a terminal nor a JSON reader raw, and JSON gives them back as they were.
    for output in (text.stdout, listed.stdout):
        assert not set(output) & {"\x1b", "\x07", "\x9b", "\u202e", "\u2028"}
    assert answer[names["terminal-escapes"]]["tuning"]["tunedFrom"] == ESCAPES


def test_an_install_onto_a_full_disk_says_so_and_leaves_nothing(tmp_path):
    """Before: OSError: [Errno 28] in a traceback, its staging directory left to the next install."""
    source = hand_made_model(tmp_path / "copied")
    with small_device(tmp_path / "disk", 1) as disk:
        (disk / "data" / "models").mkdir(parents=True)
        fill(disk)

        code, failure, _ = cli_json(env_for(disk / "data"), "model", "install", "--json", source)

        models = disk / "data" / "models"
        assert (code, failure) == (
            1,
            {
                "error": "unavailable",
                "detail": f"the disk is full: no space left on the device that holds {models}; "
                "free some space there, or set PAYRAIL_DATA_DIR to a directory on a disk with room",
            },
        )
        assert [p.name for p in models.iterdir()] == [INSTALL_LOCK]
