"""Imports of files longer than one batch: read a batch at a time, every line checked before any is
saved, each batch of the save committed on its own, a stopped import finished by a rerun.

catalog.import_records takes the batch size as a parameter, so these run with batches of 4
lines; the CLI's test uses its real batch (2,048 lines). The OpenAI backend against the fake
HTTP server embeds.
"""

from __future__ import annotations

import psycopg
import pytest

from payrail_embedder.embedders import OPENAI_MAX_BATCH, Embedder, EmbeddingUnavailable, OpenAIEmbedder
from payrail_embedder.postgres.connection import connect
from payrail_embedder.registry import catalog
from payrail_embedder.registry.records import read_lines
from payrail_test_support.cli import cli_json, write_jsonl
from payrail_test_support.openai_fake import FAKE_MODEL, SwitchAt
from payrail_test_support.stored import assert_whole_or_nothing, rows

BATCH = 4


def record(n: int, **changes) -> dict:
    base = {
        "provider": f"Provider {n:04d}",
        "method": f"Method {n:04d}",
        "urls": [f"https://api.example/{n}"],
        "docsUrl": None,
        "guidance": f"Purpose: record number {n}.",
        "enabled": True,
    }
    return {**base, **changes}


def embedder_for(openai_fake) -> OpenAIEmbedder:
    return OpenAIEmbedder(FAKE_MODEL, api_key="test-key", base_url=openai_fake.base_url, timeout=2, max_retries=0)


def import_file(database_url: str, openai_fake, path, **options) -> catalog.ImportReport:
    with connect(database_url, autocommit=True) as conn:
        return catalog.import_records(conn, lambda: embedder_for(openai_fake), lambda: read_lines(path), batch_size=BATCH, **options)


def saved_names(database_url: str) -> list[str]:
    with psycopg.connect(database_url) as conn:
        return [r for (r,) in conn.execute("select method from payrail.provider_methods order by method")]


def test_a_refused_line_in_the_last_batch_saves_and_embeds_nothing(database_url, openai_fake, tmp_path):
    records = [record(n) for n in range(BATCH * 3)] + [record(99, docsUrl="http://not-https.example")]
    report = import_file(database_url, openai_fake, write_jsonl(tmp_path / "catalog.jsonl", records))
    assert not report.saved and [(r.line, "docs_url" in r.reason) for r in report.refused] == [(13, True)], report
    assert saved_names(database_url) == [] and openai_fake.requests == []


def test_a_record_named_twice_in_different_batches_names_the_earlier_line(database_url, openai_fake, tmp_path):
    records = [record(n) for n in range(BATCH * 2)] + [record(1, guidance="Purpose: the same name again.")]
    path = write_jsonl(tmp_path / "catalog.jsonl", records)
    report = import_file(database_url, openai_fake, path)
    assert [str(r) for r in report.refused] == [f"{path}:{BATCH * 2 + 1}: same provider and method as {path}:2"]
    assert not report.saved and saved_names(database_url) == []

    # With --skip-invalid the first is saved and the second refused, as within one batch.
    report = import_file(database_url, openai_fake, path, skip_invalid=True)
    assert report.saved and report.created == BATCH * 2 and len(report.refused) == 1, report


def test_the_file_is_read_a_batch_at_a_time(database_url, openai_fake, tmp_path):
    """The save's first embedding request comes before the file's second batch is read (the
    check read the whole file before it): memory holds a batch, not the file."""
    path = write_jsonl(tmp_path / "catalog.jsonl", [record(n) for n in range(BATCH * 5)])
    lines_read = []
    read_when_embedding = []

    def counted_lines():
        lines_read.append(0)
        for item in read_lines(path):
            lines_read[-1] += 1
            yield item

    class CountingEmbedder(Embedder):
        model_name = FAKE_MODEL
        batch_size = OPENAI_MAX_BATCH

        def __init__(self):
            self.inner = embedder_for(openai_fake)

        def embed(self, texts):
            read_when_embedding.append(lines_read[-1])
            return self.inner.embed(texts)

    with connect(database_url, autocommit=True) as conn:
        report = catalog.import_records(conn, CountingEmbedder, counted_lines, batch_size=BATCH)
    assert report.saved and report.created == BATCH * 5
    # Two passes over the file; each embedding request with at most one batch read ahead of it.
    assert lines_read == [BATCH * 5, BATCH * 5], lines_read
    assert read_when_embedding == [BATCH * (n + 1) for n in range(5)], read_when_embedding


def test_a_save_stopped_midway_keeps_its_batches_says_so_and_a_rerun_finishes(database_url, openai_fake, tmp_path):
    records = [record(n) for n in range(BATCH * 3)]
    path = write_jsonl(tmp_path / "catalog.jsonl", records)
    openai_fake.requests = SwitchAt(openai_fake, 2, "500")
    try:
        import_file(database_url, openai_fake, path)
        raise AssertionError("the import did not stop")
    except catalog.ImportInterrupted as stopped:
        assert f"stopped after saving {BATCH} lines ({BATCH} created, 0 updated, 0 unchanged)" in str(stopped), stopped
        assert "run the same import again" in str(stopped) and isinstance(stopped.__cause__, EmbeddingUnavailable)
    # The first batch whole, with its vectors; nothing of the second.
    assert saved_names(database_url) == [r["method"] for r in records[:BATCH]]
    assert all(assert_whole_or_nothing(r) for r in rows(database_url))

    openai_fake.behaviour = "ok"
    openai_fake.requests = []
    report = import_file(database_url, openai_fake, path)
    assert (report.saved, report.created, report.unchanged) == (True, BATCH * 2, BATCH), report
    # Only the lines not saved before were embedded again.
    assert sum(len(request["input"]) for request in openai_fake.requests) == BATCH * 2


@pytest.mark.slow
def test_the_cli_imports_a_file_of_several_batches_and_says_where_a_stopped_one_stopped(cli_env, openai_fake, tmp_path):
    records = [record(n) for n in range(OPENAI_MAX_BATCH + 10)]
    path = write_jsonl(tmp_path / "catalog.jsonl", records)
    openai_fake.requests = SwitchAt(openai_fake, 2, "500")
    code, failure, _ = cli_json(cli_env, "import", str(path), "--json")
    assert code == 1 and failure["error"] == "unavailable", failure
    assert f"stopped after saving {OPENAI_MAX_BATCH} lines ({OPENAI_MAX_BATCH} created" in failure["detail"], failure

    openai_fake.behaviour = "ok"
    code, report, _ = cli_json(cli_env, "import", str(path), "--json")
    assert (code, report["created"], report["unchanged"], report["refused"], report["saved"]) == (0, 10, OPENAI_MAX_BATCH, [], True), report
