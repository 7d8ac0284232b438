"""payrail-embedder in a real subprocess, and the catalog files the tests hand it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from payrail_test_support import CLI, REPO


def run_cli(env: dict[str, str], *args: str | Path, input: str | None = None, timeout: float = 120):
    """payrail-embedder in a real subprocess; returns the CompletedProcess."""
    return subprocess.run(
        [str(CLI), *args], env=env, input=input, capture_output=True, text=True, timeout=timeout, cwd=REPO
    )


def cli_json(env: dict[str, str], *args: str | Path) -> tuple[int, dict, str]:
    """A --json command's exit status, the JSON it printed, and its standard error; anything but
    JSON on standard output, or a traceback, fails the test."""
    result = run_cli(env, *args)
    assert "Traceback" not in result.stderr, result.stderr
    try:
        return result.returncode, json.loads(result.stdout), result.stderr
    except json.JSONDecodeError:
        pytest.fail(f"not JSON (exit {result.returncode}): {result.stdout!r} {result.stderr!r}")


def write_jsonl(path: Path, records: list[dict]) -> Path:
    """The records as a JSON Lines catalog file; returns its path."""
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    return path


def cli_import(env: dict[str, str], path: Path, records: list[dict]) -> dict:
    """`payrail-embedder import --json` of records into a registry that holds none of them yet."""
    code, report, _ = cli_json(env, "import", "--json", write_jsonl(path, records))
    assert code == 0, report
    assert report == {"created": len(records), "updated": 0, "unchanged": 0, "refused": [], "saved": True, "notImported": 0}
    return report


def run_edit(env: dict[str, str], tmp_path: Path, steps: list[dict], *args: str):
    """`payrail-embedder edit ARGS` with $EDITOR tests/fake_editor.py doing steps (see there);
    returns the result and the texts the editor was shown, in order."""
    directory = tmp_path / f"editor-{len(list(tmp_path.glob('editor-*')))}"
    directory.mkdir()
    (directory / "steps.json").write_text(json.dumps(steps), encoding="utf-8")
    env = {**env, "EDITOR": f"{sys.executable} {REPO / 'tests' / 'fake_editor.py'}", "FAKE_EDITOR_DIR": str(directory)}
    result = run_cli(env, "edit", *args)
    return result, [p.read_text(encoding="utf-8") for p in sorted(directory.glob("shown-*.txt"))]
