"""Where the package keeps what it makes when no --data-dir is given: the local PostgreSQL's data
directory and the tuned models, one place per user."""

from __future__ import annotations

from pathlib import Path

import platformdirs


def default_data_dir() -> Path:
    return Path(platformdirs.user_data_dir("payrail-agent-search"))
