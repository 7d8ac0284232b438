"""payrail-embedder for the tests: in this process with click's CliRunner (most calls), or in a
real subprocess where the process is the point; and the catalog files the tests hand it.

Both give what subprocess.run gives (returncode, stdout, stderr), with exactly env as the
command's environment, so a test reads the same whichever ran it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import pty
import pwd
import subprocess
import sys
import threading
import time
import traceback
import warnings
from pathlib import Path

import pytest
from click.testing import CliRunner

from payrail_test_support import CLI, REPO
from payrail_test_support.docs import DOCS, code_blocks, read, section

# The commands that serve until stopped: their own signal handlers and event loops belong in a process of their own.
SERVING_COMMANDS = {"mcp", "backoffice"}


def run_cli(env: dict[str, str], *args: str | Path, input: str | None = None, timeout: float = 120):
    """payrail-embedder ARGS with environment env and standard input `input`; returns a
    CompletedProcess. In this process (click's CliRunner, a fraction of a second less per call),
    except where a process of its own is what the command gets in use, run_cli_subprocess then:
    the embedded default (no PAYRAIL_DATABASE_URL: its server outlives the command), the commands
    that serve (mcp, backoffice), and calls from other threads (the environment and standard
    streams are the process's, so concurrent calls need processes of their own). timeout applies
    to a subprocess only."""
    command = next((str(arg) for arg in args if not str(arg).startswith("-")), None)
    if "PAYRAIL_DATABASE_URL" not in env or command in SERVING_COMMANDS or threading.current_thread() is not threading.main_thread():
        return run_cli_subprocess(env, *args, input=input, timeout=timeout)
    return run_cli_in_process(env, *args, input=input)


def run_cli_subprocess(env: dict[str, str], *args: str | Path, input: str | None = None, timeout: float = 120):
    """payrail-embedder in a real subprocess: for what only a process shows (its start, signals,
    standard streams of its own, the embedded server outliving it)."""
    return subprocess.run([str(CLI), *args], env=env, input=input, capture_output=True, text=True, timeout=timeout, cwd=REPO)


class OnATerminal:
    """payrail-embedder in a subprocess whose standard error is a terminal (a pseudo-terminal), as
    when a person runs it; standard output is a pipe. What the terminal showed is read as it comes.
    answering: standard input is the terminal too, and type() answers what it asks."""

    def __init__(self, env: dict[str, str], *args: str | Path, answering: bool = False) -> None:
        leader, follower = pty.openpty()
        stdin = follower if answering else subprocess.DEVNULL
        try:
            self.process = subprocess.Popen([str(CLI), *args], env=env, stdin=stdin, stdout=subprocess.PIPE, stderr=follower, cwd=REPO)
        finally:
            os.close(follower)
        self._leader = leader
        self._shown = bytearray()
        self._reader = threading.Thread(target=self._read, args=(leader,), daemon=True)
        self._reader.start()

    def _read(self, leader: int) -> None:
        try:
            while chunk := os.read(leader, 4096):
                self._shown += chunk
        except OSError:  # EIO: every process holding the terminal has ended
            pass
        finally:
            os.close(leader)

    def type(self, text: str) -> None:
        """Keys typed at the terminal (answering)."""
        os.write(self._leader, text.encode())

    def wait_for(self, text: str, timeout: float = 60) -> str:
        """What the terminal showed, once it shows text (AssertionError when it has not in timeout seconds)."""
        deadline = time.monotonic() + timeout
        while text not in self.shown and time.monotonic() < deadline:
            if self.process.poll() is not None:
                self._reader.join(5)  # it ended: what it showed is all there is
                break
            time.sleep(0.05)
        if text not in self.shown:
            raise AssertionError(f"the terminal never showed {text!r}; it showed:\n{self.shown}")
        return self.shown

    @property
    def shown(self) -> str:
        """The terminal's text so far (its line ends as written: the terminal shows \\n as \\r\\n)."""
        return self._shown.decode("utf-8", "replace").replace("\r\n", "\n")

    def finish(self, timeout: float = 120) -> subprocess.CompletedProcess:
        stdout, _ = self.process.communicate(timeout=timeout)
        self._reader.join(timeout)
        return subprocess.CompletedProcess(self.process.args, self.process.returncode, stdout.decode(), self.shown)


def run_cli_on_a_terminal(env: dict[str, str], *args: str | Path, timeout: float = 120) -> subprocess.CompletedProcess:
    """payrail-embedder ARGS with standard error on a terminal (OnATerminal): stderr is what it showed."""
    return OnATerminal(env, *args).finish(timeout)


def command_line_author(login: str) -> str:
    """Who the registry names as the author of this process's command-line writes as login, a
    superuser (payrail._author): the operating-system user the tests run as."""
    return f"{pwd.getpwuid(os.geteuid()).pw_name} (OS user, logged in as {login})"


def run_cli_in_process(env: dict[str, str], *args: str | Path, input: str | None = None):
    """payrail-embedder in this process with click's CliRunner, seen as a subprocess would show it:
    os.environ exactly env for the call, the repository as working directory, warnings and log
    records no handler takes on standard error (the pytest process's own logging handlers stand
    aside meanwhile), and an uncaught exception's traceback on standard error with exit status 1."""
    from payrail_embedder.cli import cli

    unset = {name: None for name in os.environ if name not in env}
    with contextlib.chdir(REPO), _as_a_new_process():
        result = CliRunner().invoke(cli, [str(arg) for arg in args], input=input, env={**env, **unset}, prog_name=CLI.name)
    stderr = result.stderr
    if result.exc_info and not isinstance(result.exception, SystemExit):
        stderr += "".join(traceback.format_exception(*result.exc_info))
    return subprocess.CompletedProcess([CLI.name, *map(str, args)], result.exit_code, result.stdout, stderr)


@contextlib.contextmanager
def _as_a_new_process():
    """Python's defaults of a new process for warnings (shown on sys.stderr, which CliRunner
    captures) and logging (no root handlers: logging's last resort writes WARNING and above to
    sys.stderr). The levels a command's logs.configure sets (the root's, the package's) are put
    back after it, as its handlers are: a later test's caplog would miss what --log-level error left
    below the package's level."""
    root, package = logging.getLogger(), logging.getLogger("payrail_embedder")
    handlers, levels = root.handlers[:], (root.level, package.level)
    with warnings.catch_warnings():
        warnings.resetwarnings()
        for category in (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning):
            warnings.simplefilter("ignore", category)
        warnings.showwarning = _show_warning
        root.handlers.clear()
        try:
            yield
        finally:
            root.handlers[:] = handlers
            root.setLevel(levels[0])
            package.setLevel(levels[1])


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))


def cli_json(env: dict[str, str], *args: str | Path) -> tuple[int, dict, str]:
    """A --json command's exit status, the JSON it printed, and its standard error; anything but
    JSON on standard output, or a traceback, fails the test."""
    result = run_cli(env, *args)
    assert "Traceback" not in result.stderr, result.stderr
    try:
        return result.returncode, json.loads(result.stdout), result.stderr
    except json.JSONDecodeError:
        pytest.fail(f"not JSON (exit {result.returncode}): {result.stdout!r} {result.stderr!r}")


def without_registry(report: dict) -> dict:
    """An import's or sync's --json report without what it says of the registry after it, which it
    must say: what the registry holds ("registry", stored.counts), and for an import the advice on
    the records it saved ("advice": every piece, with its counts)."""
    assert set(report.get("registry") or {}) >= {"records", "enabled", "drafts", "draftsNeedingEmbedding"}, report
    if "created" in report:
        assert report.get("advice") and all(set(count) == {"code", "summary", "fix", "enabled", "drafts"} for count in report["advice"]), report
    return {key: value for key, value in report.items() if key not in ("registry", "advice")}


def write_jsonl(path: Path, records: list[dict]) -> Path:
    """The records as a JSON Lines catalog file; returns its path."""
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    return path


def cli_import(env: dict[str, str], path: Path, records: list[dict]) -> dict:
    """`payrail-embedder import --json` of records into a registry that holds none of them yet."""
    code, report, _ = cli_json(env, "import", "--json", write_jsonl(path, records))
    assert code == 0, report
    assert without_registry(report) == {"created": len(records), "updated": 0, "unchanged": 0, "refused": [], "saved": True, "notImported": 0}
    return report


def run_edit(env: dict[str, str], tmp_path: Path, steps: list[dict], *args: str, input: str | None = None):
    """`payrail-embedder edit ARGS` with $EDITOR tests/fake_editor.py doing steps (see there) and
    standard input `input` (the answers to its questions); returns the result and the texts the
    editor was shown, in order."""
    directory = tmp_path / f"editor-{len(list(tmp_path.glob('editor-*')))}"
    directory.mkdir()
    (directory / "steps.json").write_text(json.dumps(steps), encoding="utf-8")
    env = {**env, "EDITOR": f"{sys.executable} {REPO / 'tests' / 'fake_editor.py'}", "FAKE_EDITOR_DIR": str(directory)}
    result = run_cli(env, "edit", *args, input=input)
    return result, [p.read_text(encoding="utf-8") for p in sorted(directory.glob("shown-*.txt"))]


OPERATIONS = DOCS / "operations.md"


def documented_commands(title: str, document: Path = OPERATIONS) -> list[str]:
    """The sh blocks of one `## title` section of a Markdown page (docs/operations.md), in order."""
    return [block.removesuffix("\n") for block in code_blocks(section(read(document), f"## {title}"), "sh")]


def run_commands(commands: str, env: dict[str, str], cwd: Path, user: str | None = None) -> subprocess.CompletedProcess:
    """Shell commands as an operator runs them, payrail-embedder on the PATH: stop at the first that fails."""
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", commands],
        env={**env, "PATH": f"{CLI.parent}:{env.get('PATH', '')}"},
        cwd=cwd,
        user=user,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, f"{commands}\n{result.stdout}\n{result.stderr}"
    return result
