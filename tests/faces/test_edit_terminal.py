"""`payrail-embedder edit` in a real terminal with a real editor: tmux runs the command with
EDITOR=vim, and the test types into vim as an operator would (tmux send-keys), reading the screen
(tmux capture-pane) between keys. tests/faces/test_edit.py covers the same loop with a scripted editor.
"""

from __future__ import annotations

import shlex
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from payrail_test_support import CLI, REPO
from payrail_test_support.cli import cli_import
from test_edit import ENABLED, stored

VIM = "vim -u NONE -i NONE -N"  # no vimrc or viminfo of the machine's: the same keys do the same everywhere


class Terminal:
    """One tmux session on a private server, running a command; the screen as text."""

    def __init__(self, command: str, env: dict[str, str], tmp_path: Path) -> None:
        self.socket = f"payrail-test-{uuid.uuid4().hex[:8]}"
        self.status = tmp_path / "exit-status"
        self.stderr = tmp_path / "stderr"
        exports = " ".join(f"{name}={shlex.quote(value)}" for name, value in env.items())
        script = f"env -i {exports} {command} 2>{self.stderr}; echo $? > {self.status}"
        self.tmux("new-session", "-d", "-x", "160", "-y", "50", "bash", "--norc", "--noprofile", "-c", script)

    def tmux(self, *args: str) -> str:
        return subprocess.run(["tmux", "-L", self.socket, *args], check=True, capture_output=True, text=True, cwd=REPO).stdout

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-J")

    def wait_for(self, text: str) -> str:
        deadline = time.monotonic() + 60
        while text not in (screen := self.screen()):
            assert time.monotonic() < deadline, f"{text!r} never appeared on the screen:\n{screen}"
            time.sleep(0.1)
        return screen

    def keys(self, *keys: str) -> None:
        """Types each of keys: Enter and Escape as those keys, anything else as the text it is."""
        for key in keys:
            self.tmux("send-keys", *([key] if key in ("Enter", "Escape") else ["-l", key]))

    def exit_status(self) -> int:
        deadline = time.monotonic() + 60
        while not self.status.exists() or not self.status.read_text().strip():
            assert time.monotonic() < deadline, f"the command did not end:\n{self.screen()}"
            time.sleep(0.1)
        return int(self.status.read_text())

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True)


@pytest.fixture
def terminal_env(cli_env, tmp_path) -> dict[str, str]:
    cli_import(cli_env, tmp_path / "catalog.jsonl", [ENABLED])
    keep = ("PAYRAIL_", "OPENAI_", "PATH", "HOME", "LANG", "XDG_RUNTIME_DIR")
    return {k: v for k, v in cli_env.items() if k.startswith(keep)} | {"EDITOR": VIM, "TERM": "xterm-256color"}


@pytest.fixture
def edit_in_vim(terminal_env, tmp_path):
    started = []

    def start(*args: str) -> Terminal:
        terminal = Terminal(shlex.join([str(CLI), "edit", *args]), terminal_env, tmp_path)
        started.append(terminal)
        return terminal

    yield start
    for terminal in started:
        terminal.close()


def test_guidance_is_plain_lines_in_vim_and_a_new_line_is_saved(edit_in_vim, database_url):
    terminal = edit_in_vim("Acme Maps / Geocode an address")
    screen = terminal.wait_for("Notes: paid per call.")
    # Header lines, then the guidance as it reads: no JSON, no \n escapes.
    assert "Provider: Acme Maps" in screen and "Enabled: yes" in screen and "\\n" not in screen, screen
    terminal.keys("G", "o", "Instructions: GET /v1/geocode?q=ADDRESS.", "Escape", ":wq", "Enter")
    assert terminal.exit_status() == 0, terminal.stderr.read_text()
    assert stored(database_url, ENABLED["method"])["guidance"] == ENABLED["guidance"] + "\nInstructions: GET /v1/geocode?q=ADDRESS."


def test_a_refusal_reopens_vim_with_the_rules_and_the_help_and_leaving_then_fails(edit_in_vim, database_url):
    before = stored(database_url, ENABLED["method"])
    terminal = edit_in_vim("Acme Maps", "Geocode an address")
    terminal.wait_for("Docs URL: https://docs.acme.example/geocode")
    # Two wrong fields at once: an http:// docs URL and an empty provider.
    terminal.keys(":%s/Docs URL: https/Docs URL: http/", "Enter", ":%s/^Provider: .*/Provider: /", "Enter", ":wq", "Enter")
    screen = terminal.wait_for("NOT SAVED: 2 rules refused it:")
    assert "#   Provider: must be 1 to 120 characters" in screen, screen
    assert "#   Docs URL: must be one absolute https:// URL" in screen, screen
    assert "# payrail-embedder edit:" in screen and "# Save and close to apply" in screen, screen  # the help, kept
    assert "Docs URL: http://docs.acme.example/geocode" in screen, screen  # what the operator typed

    terminal.keys(":q!", "Enter")
    assert terminal.exit_status() == 2
    assert terminal.stderr.read_text().startswith("Error: invalid_input: nothing saved: you left the editor after this: ")
    assert stored(database_url, ENABLED["method"]) == before


def test_leaving_vim_without_a_change_is_not_a_failure(edit_in_vim, database_url):
    terminal = edit_in_vim("Acme Maps / Geocode an address")
    terminal.wait_for("Enabled: yes")
    terminal.keys(":q", "Enter")
    assert terminal.exit_status() == 0


def test_without_visual_or_editor_it_opens_vi_never_a_menu_that_asks_for_one(terminal_env, tmp_path):
    """Debian's sensible-editor (click's first choice) asks a new user to pick an editor first."""
    home = tmp_path / "home"  # no ~/.selected_editor: where sensible-editor would ask
    home.mkdir()
    env = {k: v for k, v in terminal_env.items() if k not in ("EDITOR", "VISUAL")} | {"HOME": str(home)}
    terminal = Terminal(shlex.join([str(CLI), "edit", "Acme Maps / Geocode an address"]), env, tmp_path)
    try:
        screen = terminal.wait_for("Notes: paid per call.")
        assert "Select an editor" not in screen, screen
        terminal.keys("Escape", ":q!", "Enter")
        assert terminal.exit_status() == 0, terminal.stderr.read_text()
    finally:
        terminal.close()
