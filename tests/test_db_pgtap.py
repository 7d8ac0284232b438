"""Runs every pgTAP file in db/tests/ with pg_prove, on each server, in a fresh database."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

PGTAP_FILES = sorted((Path(__file__).resolve().parents[1] / "db" / "tests").glob("*.sql"))


def pg_prove_args(url: str) -> list[str]:
    parts = urlsplit(url)
    host = parse_qs(parts.query).get("host", [parts.hostname or ""])[0]
    args = ["-d", parts.path.lstrip("/"), "-h", host, "-U", parts.username or "postgres"]
    if parts.port:
        args += ["-p", str(parts.port)]
    return args


def test_db_tests_exist():
    assert len(PGTAP_FILES) >= 5, [p.name for p in PGTAP_FILES]


@pytest.mark.parametrize("sql_file", PGTAP_FILES, ids=[p.name for p in PGTAP_FILES])
def test_pgtap(server, database_url, sql_file):
    result = subprocess.run(
        ["pg_prove", "--psql-bin", str(server.psql), "--verbose", *pg_prove_args(database_url), str(sql_file)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PGPASSWORD": urlsplit(database_url).password or ""},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "All tests successful." in result.stdout, result.stdout
