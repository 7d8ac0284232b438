"""docs/quickstart.md runs top to bottom as printed: each sh block in a fresh shell, in order, in
a new user's HOME whose embedded registry holds the sample catalog, as the README's first command
leaves it. $EDITOR is an editor that changes the guidance and saves, as the operator the page
speaks to does; "42" stands for the history id `history` printed, as the page says."""

from __future__ import annotations

import json
import re

import pytest

from payrail_test_support import REPO
from payrail_test_support.docs import DOCS, code_blocks, read
from payrail_test_support.interfaces import editing
from test_docs_shell import fresh_env, shell

QUICKSTART = DOCS / "quickstart.md"
RECORD = "Acme Maps / Geocode an address"
QUESTION = "find the coordinates of a street address"
# What the page's own catalog file says of the record, and what the edit changes it to.
PURPOSE = "Purpose: Turn a street address into map coordinates (latitude and longitude)."
EDITED_PURPOSE = "Purpose: Turn a street address into map coordinates (latitude and longitude) for one address at a time."

pytestmark = pytest.mark.slow  # a new embedded server, the sample catalog embedded
__all__ = ["fresh_env"]  # the fixture of a new user's HOME, shared with test_docs_shell


def first_match(search_output: str) -> str:
    """The first record a search or preview printed: its "Provider / Method"."""
    return re.search(r"^1\. (.+)$", search_output, re.M)[1]


def run(env: dict[str, str], block: str) -> str:
    result = shell(env, block)
    assert result.returncode == 0 and "Traceback" not in result.stderr, f"{block}\n{result.stdout}\n{result.stderr}"
    return result.stdout + result.stderr


def test_the_operator_quickstart_runs_as_printed(fresh_env, tmp_path):
    imported, checked, enabled, golden, gated, edited, restored = blocks = code_blocks(read(QUICKSTART), "sh")
    catalog_file = REPO / "my-catalog.jsonl"  # the page writes it where the operator stands: the clone
    try:
        run(fresh_env, "payrail-embedder db apply && payrail-embedder import catalog/sample.jsonl")
        assert "1 created" in run(fresh_env, imported)
        assert json.loads(catalog_file.read_text(encoding="utf-8"))["guidance"].startswith(PURPOSE)

        drafts_then_preview = run(fresh_env, checked)
        assert RECORD in drafts_then_preview and "draft" in drafts_then_preview, drafts_then_preview
        assert first_match(drafts_then_preview.split(QUESTION)[-1]) == RECORD, drafts_then_preview
        assert first_match(run(fresh_env, enabled)) == RECORD
        assert QUESTION in run(fresh_env, golden)

        measured = run(fresh_env, gated)
        assert re.search(r"^hit@3\s+1\.000$", measured, re.M) and "0 missed" in measured, measured

        assert "updated" in run(editing(fresh_env, tmp_path / "editor", PURPOSE, EDITED_PURPOSE), edited)
        assert EDITED_PURPOSE in run(fresh_env, f'payrail-embedder show "{RECORD}"')

        history_command, restore_command = restored.strip().splitlines()
        history_id = re.search(r"^history (\d+):", run(fresh_env, history_command), re.M)[1]
        run(fresh_env, restore_command.replace("restore 42", f"restore {history_id}"))
        assert EDITED_PURPOSE not in run(fresh_env, f'payrail-embedder show "{RECORD}"')
    finally:
        catalog_file.unlink(missing_ok=True)
    assert len(blocks) == 7
