"""The docs document what exists and lead where they say, CI runs what the README says, and the
sample catalog is sound."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import click
import psycopg
from click.testing import CliRunner

from payrail_embedder.base import errcodes
from payrail_embedder.base.errors import EXIT_STATUS
from payrail_embedder.cli import cli
from payrail_embedder.registry.records import parse_record
from payrail_test_support import REPO
from payrail_test_support.docs import CHANGELOG, DOCS, README, headings, pages, prose_lines, read
from payrail_test_support.servers import server_names

CLI_REFERENCE = DOCS / "cli.md"
# cog's generated part of docs/cli.md: the --help of every command, between its markers.
GENERATED = re.compile(r"^<!-- \[\[\[cog$.*?^<!-- \[\[\[end\]\]\] -->$", flags=re.S | re.M)


def command_paths(group: click.Group, prefix: str = "payrail-embedder", *, groups: bool = False) -> list[str]:
    """Every command's path ("payrail-embedder db apply"), and with groups=True every group's too."""
    paths = []
    for name, command in group.commands.items():
        path = f"{prefix} {name}"
        if isinstance(command, click.Group):
            paths += [path] * groups + command_paths(command, path, groups=groups)
        else:
            paths.append(path)
    return paths


def test_every_command_is_explained_in_the_docs():
    """Written about by a person, not only in the generated reference."""
    written = "".join(GENERATED.sub("", read(page)) for page in pages())
    missing = [path for path in command_paths(cli) if f"`{path}" not in written]
    assert not missing, f"commands missing from README.md and docs/: {missing}"


def test_the_cli_reference_is_the_help_of_every_command_as_it_is_now():
    result = subprocess.run([sys.executable, "-m", "cogapp", "--check", CLI_REFERENCE], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"docs/cli.md is stale: run `.venv/bin/cog -r docs/cli.md`\n{result.stdout}{result.stderr}"
    reference = GENERATED.search(read(CLI_REFERENCE))[0]
    assert {title for level, title in headings(reference) if level == 3} == {"payrail-embedder", *command_paths(cli, groups=True)}


def test_every_command_explains_itself_in_its_help():
    for path in command_paths(cli):
        result = CliRunner().invoke(cli, [*path.split()[1:], "--help"])
        assert result.exit_code == 0, (path, result.output)
        summary = result.output.split("\n\n")[1].strip()
        assert len(summary) > 20, (path, result.output)


def test_search_help_says_the_bundled_model_is_english_only_and_what_to_use_instead():
    result = CliRunner().invoke(cli, ["search", "--help"])
    assert result.exit_code == 0, result.output
    help_text = " ".join(result.output.split())
    assert "The bundled model (all-MiniLM-L6-v2) is English-only" in help_text, help_text
    assert "payrail-embedder --embedder openai model switch text-embedding-3-small" in help_text, help_text
    assert "## Languages" in read(DOCS / "embeddings.md")


def markdown_table(text: str, heading: str) -> list[list[str]]:
    """The body rows of the first table after heading, cells stripped of their backticks."""
    lines = text.split(heading, 1)[1].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    return [[cell.strip().strip("`") for cell in line.strip("|").split("|")] for line in lines[start + 2 : end]]


def test_errcodes_mirrors_the_sqlstates_of_db_errcodes_md():
    table = markdown_table((REPO / "db" / "ERRCODES.md").read_text(), "# SQLSTATEs of the registry")
    documented = {code.strip("` ") for row in table for code in row[0].split("/")}
    mirrored = {value for name, value in vars(errcodes).items() if name.isupper() and isinstance(value, str)}
    postgres_own = set(errcodes.TRANSIENT)
    assert mirrored - postgres_own <= documented, f"in errcodes.py, not in ERRCODES.md: {mirrored - postgres_own - documented}"
    registry_codes = {code for code in documented if code.startswith("PY")}
    assert registry_codes <= mirrored, f"in ERRCODES.md, not in errcodes.py: {registry_codes - mirrored}"


def test_the_cli_reference_lists_every_failure_code_with_its_exit_status():
    table = markdown_table(read(CLI_REFERENCE), "## Errors and exit status")
    assert {row[0]: int(row[1]) for row in table} == EXIT_STATUS


def readme_commands() -> list[str]:
    return re.findall(r"```sh\n(.+?)\n```", read(README).split("## The two commands", 1)[1], flags=re.S)[:2]


def test_ci_runs_the_readme_commands_verbatim():
    main_command, test_command = readme_commands()
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    assert main_command in ci
    assert test_command in ci
    assert "search" in main_command and "catalog/sample.jsonl" in main_command


def test_the_fast_tier_the_readme_documents_leaves_out_the_slow_tier():
    marker_expression = re.search(r'`\./scripts/test (-m "[^"]+")`', read(README))[1]
    # Slow by file, by test, and by what a test uses (chromium, the real local model).
    files = ["postgres/test_upgrades.py", "postgres/test_soak.py", "faces/test_backoffice.py", "embedders/test_local_model.py"]
    collected = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", *shlex.split(marker_expression), *(f"tests/{f}" for f in files)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert collected.returncode == 0, collected.stdout + collected.stderr
    tests = [line for line in collected.stdout.splitlines() if "::" in line]
    assert "tests/postgres/test_soak.py::test_the_checker_catches_wrong_answers[pg18]" in tests
    slow = [
        "test_upgrades.py::",
        "test_soak.py::test_soak_for_30_seconds",
        "test_backoffice.py::test_a_new_draft_is_saved_then_enabled",
        "test_local_model.py::",
    ]
    assert not [test for test in tests if any(part in test for part in slow)], tests


def test_what_depends_on_the_servers_version_runs_on_every_server_and_the_rest_on_the_newest():
    """conftest.py's rule, as docs/contributing.md states it: by folder, and by the every_server marker."""
    files = ["sql/test_search_exact.py", "security/test_logins_never_widen.py", "registry/test_bulk.py", "registry/test_save.py", "faces/test_api.py"]
    collected = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", *(f"tests/{f}" for f in files)], capture_output=True, text=True, timeout=120, cwd=REPO
    )
    assert collected.returncode == 0, collected.stdout + collected.stderr
    servers_of = {
        f: {server for server in ("pg18", "pg16") if f"tests/{f}::" in collected.stdout and re.search(rf"tests/{f}::\S*\b{server}\b", collected.stdout)}
        for f in files
    }
    assert servers_of == {
        "sql/test_search_exact.py": {"pg18", "pg16"},
        "security/test_logins_never_widen.py": {"pg18", "pg16"},
        "registry/test_bulk.py": {"pg18", "pg16"},
        "registry/test_save.py": {"pg18"},
        "faces/test_api.py": {"pg18"},
    }


def test_every_benchmark_is_in_the_benchmarks_page_and_the_runner_names_them_on_a_wrong_name():
    benchmarks = sorted(p.stem for p in (REPO / "benchmarks").glob("*.py") if p.stem != "throwaway_postgres")
    missing = [name for name in benchmarks if f"./scripts/benchmark {name}" not in read(DOCS / "benchmarks.md")]
    assert not missing, f"benchmarks missing from docs/benchmarks.md: {missing}"
    # A wrong name fails before anything is installed, and says which names there are.
    result = subprocess.run([REPO / "scripts" / "benchmark", "search-speed"], capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    assert f"NAME is one of: {' '.join(benchmarks)}" in result.stderr


def test_the_contributing_map_names_every_module_of_the_package_once_in_its_folder():
    """docs/contributing.md's map: every module, under the folder that holds it, and nothing that is gone."""
    package = REPO / "src" / "payrail_embedder"
    text = read(DOCS / "contributing.md")
    section = text.split("## The package's map", 1)[1].split("\n## ", 1)[0]
    folders = {path.parent.relative_to(package).as_posix() for path in package.rglob("*.py")} - {"."}
    modules = {path.relative_to(package).as_posix() for path in package.rglob("*.py") if path.name != "__init__.py" or path.parent == package}
    listed, folder = set(), "."
    for line in section.splitlines():
        top = re.match(r"^\s*- `([a-z_]+)/`", line)
        if top:
            folder = top.group(1)
        elif re.match(r"^- ", line):
            folder = "."
        for name in re.findall(r"`([a-z_]+\.py)`", line):
            listed.add(name if folder == "." else f"{folder}/{name}")
    assert {f"{folder}/" for folder in folders} <= set(re.findall(r"`([a-z_]+/)`", section))
    assert listed == modules


def test_the_unicode_and_icu_versions_the_docs_quote_are_the_generated_sqls():
    """Docs that quote the Unicode data's versions quote what db/schema/016-unicode_security.sql
    says it was generated from (payrail._unicode_security_source), so a regeneration cannot leave
    them behind. The changelog keeps the versions of its day."""
    source = read(REPO / "db" / "schema" / "016-unicode_security.sql")
    (generated_from,) = re.findall(r"^return '(ICU [0-9.]+, Unicode [0-9.]+)';$", source, re.MULTILINE)
    quoted = {
        (page.relative_to(REPO).as_posix(), version)
        for page in [*pages(), *sorted((REPO / "db").glob("*.md"))]
        if page != CHANGELOG
        for version in re.findall(r"\b(?:ICU|Unicode) [0-9]+\.[0-9]+", read(page))
    }
    assert quoted, "no page quotes the versions: this test would prove nothing"
    assert {(page, version) for page, version in quoted if version not in generated_from} == set()


def test_sample_catalog():
    lines = (REPO / "catalog" / "sample.jsonl").read_text().splitlines()
    records = [parse_record(json.loads(line)) for line in lines]
    assert len(records) >= 40
    assert sum(1 for r in records if r.enabled) >= 40
    for record in records:
        assert record.docs_url and record.docs_url.startswith("https://"), record
        assert re.fullmatch(r"Purpose: .+\nInstructions: .+\nNotes: .+", record.guidance, flags=re.S), record.method
    paid = [r for r in records if "payment agent" in r.guidance.lower()]
    assert len(paid) >= 10
    hotel = [r for r in records if r.enabled and "live hotel availability" in r.guidance.lower()]
    assert len(hotel) >= 3


def test_the_supported_versions_in_the_docs_are_the_servers_every_test_runs_on(servers):
    """Supported means tested: docs/operations.md's PostgreSQL and pgvector versions are exactly
    those of the embedded servers the suite runs (Docker and PAYRAIL_TEST_DATABASE_URL come and go)."""
    claim = re.search(r"\*\*Supported versions: PostgreSQL ([^*]+?), with pgvector ([\d.]+)\*\*", read(DOCS / "operations.md"))
    assert claim, "docs/operations.md states no supported versions"
    embedded = [name for name in server_names() if re.fullmatch(r"pg\d+", name)]
    assert sorted(f"pg{version}" for version in re.findall(r"\d+", claim[1])) == sorted(embedded)
    for name in embedded:
        with psycopg.connect(servers(name).admin_url) as conn:
            assert conn.info.server_version // 10000 == int(name.removeprefix("pg"))
            offered = conn.execute("select default_version from pg_available_extensions where name = 'vector'").fetchone()
        assert offered == (claim[2],), name


def anchor(title: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", title.lower().replace("`", "")).replace(" ", "-")


def anchors(page: Path) -> Iterator[str]:
    """Every heading's anchor; a repeated one also as anchor-1, anchor-2, ... as GitHub numbers them."""
    seen: dict[str, int] = {}
    for _, title in headings(read(page)):
        slug = anchor(title)
        seen[slug] = seen.get(slug, -1) + 1
        yield f"{slug}-{seen[slug]}" if seen[slug] else slug


def relative_links(page: Path) -> list[str]:
    """The targets of page's links and images that point into the repository (code spans left out)."""
    prose = re.sub(r"`[^`]*`", "", "\n".join(prose_lines(GENERATED.sub("", read(page)))))
    return [target for target in re.findall(r"\]\(([^)\s]+)\)", prose) if not re.match(r"[a-z]+:", target)]


def test_every_relative_link_leads_to_a_file_and_a_heading_that_exist():
    documents = [*pages(), *sorted((REPO / "db").glob("*.md"))]
    broken = []
    for page in documents:
        for target in relative_links(page):
            path, _, fragment = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            if not linked.exists() or (fragment and fragment not in set(anchors(linked))):
                broken.append(f"{page.relative_to(REPO)}: {target}")
    assert not broken, "links that lead nowhere:\n" + "\n".join(broken)
    assert sum(len(relative_links(page)) for page in documents) > 50  # the parser finds the links


def test_the_link_checker_knows_broken_links_and_github_anchors(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# A `db apply`, again?\n\n## Notes\n\n## Notes\n\n```sh\n# not a heading\n```\n[x](#notes-1) `[y](#z)`\n", encoding="utf-8")
    assert list(anchors(page)) == ["a-db-apply-again", "notes", "notes-1"]
    assert relative_links(page) == ["#notes-1"]


def test_no_test_takes_the_benchmark_queries_as_expected_answers():
    """benchmarks/data measures the product (its README.md): a test that asserted answers to its dev
    queries would tune the product to the measurement."""
    dev_queries = "-".join(("queries", "dev"))  # spelled apart so this file does not read as one of them
    readers = [path.name for path in (REPO / "tests").rglob("*.py") if dev_queries in path.read_text(encoding="utf-8")]
    assert not readers, f"tests reading the benchmark's dev queries: {readers}"
    assert (REPO / "benchmarks" / "data" / f"{dev_queries}.jsonl").is_file()
