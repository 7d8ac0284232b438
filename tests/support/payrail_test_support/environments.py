"""The environment of a payrail-embedder subprocess for any database: what the cli_env fixture
gives for the test database, for the tests that run their own servers (faults, replicas).
"""

from __future__ import annotations

import os
from pathlib import Path

from payrail_test_support.openai_fake import FAKE_MODEL


def cli_environment(database_url: str, openai_fake, tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PAYRAIL_", "OPENAI_"))}
    env.update(
        PAYRAIL_DATABASE_URL=database_url,
        PAYRAIL_DATA_DIR=str(tmp_path / "unused-embedded-data"),
        PAYRAIL_EMBEDDER="openai",
        PAYRAIL_EMBEDDING_MODEL=FAKE_MODEL,
        # One deadline for a whole request, retries included: room for the tests' small batches
        # under CI's load, and short enough for the tests of a hanging service.
        PAYRAIL_EMBEDDING_TIMEOUT="5",
        PAYRAIL_EMBEDDING_RETRIES="1",
        OPENAI_BASE_URL=openai_fake.base_url,
        OPENAI_API_KEY="test-key",
    )
    return env
