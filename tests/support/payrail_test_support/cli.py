"""payrail-embedder in a real subprocess."""

from __future__ import annotations

import subprocess
from pathlib import Path

from payrail_test_support import CLI, REPO


def run_cli(env: dict[str, str], *args: str | Path, input: str | None = None, timeout: float = 120):
    """payrail-embedder in a real subprocess; returns the CompletedProcess."""
    return subprocess.run(
        [str(CLI), *args], env=env, input=input, capture_output=True, text=True, timeout=timeout, cwd=REPO
    )
