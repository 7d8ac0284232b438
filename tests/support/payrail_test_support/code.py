"""payrail-embedder of other code than this checkout's installed one: an earlier revision (to
upgrade from, or to measure the before of a change), or this checkout with one db/ file changed
(a release whose deploy changes something). Run with this .venv's interpreter: every revision's
dependencies are a subset of today's, so only PYTHONPATH differs.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

from payrail_test_support import REPO


def code_tree(into: Path, rev: str | None = None) -> Path:
    """src/ and db/ of this checkout (rev None: uncommitted changes included) or of a git
    revision, in the directory `into`, which must not exist yet."""
    into.mkdir()
    if rev is None:
        shutil.copytree(REPO / "src", into / "src")
        shutil.copytree(REPO / "db", into / "db")
    else:
        archive = subprocess.run(["git", "archive", rev, "src", "db"], cwd=REPO, check=True, capture_output=True).stdout
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(into, filter="data")
    return into


def changed_tree(tree: Path, into: Path, path: str, old: str, new: str) -> Path:
    """A copy of tree whose db/path has `old` replaced by `new` (which must be there)."""
    shutil.copytree(tree, into)
    target = into / "db" / path
    text = target.read_text(encoding="utf-8")
    assert old in text, f"db/{path} of {tree} has no {old!r}"
    target.write_text(text.replace(old, new), encoding="utf-8")
    return into


def cli_of(tree: Path, env: dict[str, str], *args: str | Path) -> tuple[list[str], dict[str, str]]:
    """The command line that runs tree's payrail-embedder with args, and env with what it needs."""
    return [sys.executable, "-c", "from payrail_embedder.cli import cli; cli()", *map(str, args)], {**env, "PYTHONPATH": str(tree / "src")}


def run_cli_of(tree: Path, env: dict[str, str], *args: str | Path, input: str | None = None, timeout: float = 300):
    """tree's payrail-embedder in a real subprocess; returns the CompletedProcess."""
    command, command_env = cli_of(tree, env, *args)
    return subprocess.run(command, env=command_env, input=input, capture_output=True, text=True, timeout=timeout, cwd=tree)


def without_settings(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The environment without the registry's settings: each test names its own."""
    return {k: v for k, v in (environ or os.environ).items() if not k.startswith(("PAYRAIL_", "OPENAI_"))}
