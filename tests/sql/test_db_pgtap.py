"""Runs every pgTAP file in db/tests/ with pg_prove, one run per server in a fresh database, and
reports each file as a test of its own."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from payrail_test_support.servers import server_names

PGTAP_FILES = sorted((Path(__file__).resolve().parents[2] / "db" / "tests").glob("*.sql"))
# pg_prove's verbose output opens each file's part with its path and dots on a line of its own.
FILE_START = re.compile(r"^(?P<path>\S+\.sql) \.{2,} *$", re.MULTILINE)
# Then its summary of them all.
SUMMARY_START = re.compile(r"^(All tests successful\.|Test Summary Report)$", re.MULTILINE)


def pg_prove_args(url: str) -> list[str]:
    parts = urlsplit(url)
    host = parse_qs(parts.query).get("host", [parts.hostname or ""])[0]
    args = ["-d", parts.path.lstrip("/"), "-h", host, "-U", parts.username or "postgres"]
    if parts.port:
        args += ["-p", str(parts.port)]
    return args


def by_file(output: str) -> dict[str, str]:
    """pg_prove's verbose output cut into each file's part, by file name: the TAP lines and the
    verdict pg_prove closes it with ("ok", or what failed)."""
    starts = list(FILE_START.finditer(output))
    summary = SUMMARY_START.search(output)
    ends = [match.start() for match in starts[1:]] + [summary.start() if summary else len(output)]
    return {Path(match["path"]).name: output[match.start() : end] for match, end in zip(starts, ends, strict=True)}


@pytest.fixture(scope="module", params=server_names())
def proved(request, servers) -> tuple[dict[str, str], str]:
    """Every pgTAP file run by one pg_prove on the server, in one fresh database (each file runs in
    a transaction it rolls back): each file's part of the output, by name, and what psql said on
    standard error."""
    server = servers(request.param)
    url = server.create_database()
    try:
        result = subprocess.run(
            ["pg_prove", "--psql-bin", str(server.psql), "--verbose", *pg_prove_args(url), *map(str, PGTAP_FILES)],
            capture_output=True,
            text=True,
            timeout=600,
            env={**os.environ, "PGPASSWORD": urlsplit(url).password or ""},
        )
    finally:
        server.drop_database(url)
    parts = by_file(result.stdout)
    assert parts, result.stdout + result.stderr
    return parts, result.stderr


def test_db_tests_exist():
    assert len(PGTAP_FILES) >= 5, [p.name for p in PGTAP_FILES]


@pytest.mark.parametrize("sql_file", PGTAP_FILES, ids=[p.name for p in PGTAP_FILES])
def test_pgtap(proved, sql_file):
    parts, stderr = proved
    part = parts.get(sql_file.name)
    assert part is not None, f"pg_prove did not run {sql_file.name}: {stderr}"
    assert part.rstrip().splitlines()[-1] == "ok", part + stderr
    assert "not ok" not in part, part
