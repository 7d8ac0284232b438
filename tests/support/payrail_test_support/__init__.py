"""What the tests and the benchmarks share: real PostgreSQL servers, the fake OpenAI server, the
agent catalog, the CLI in a subprocess, and the contract's ranking computed independently.

Installed editable by ./scripts/setup, so REPO is the checkout these files live in.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
# The console script of the interpreter running the tests: the project installed in this .venv.
CLI = Path(sys.executable).parent / "payrail-embedder"
