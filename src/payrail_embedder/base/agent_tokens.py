"""The bearer tokens agents present to `payrail-embedder mcp --http` beyond loopback.

A token file has one line per agent, `NAME TOKEN` (blank lines and `#` comments skipped): the name
says in the log which agent asked, the token is what it presents (`Authorization: Bearer TOKEN`).
The file is read again whenever it changes, so deleting a line revokes that agent at its next
request, without a restart; a file that has become unreadable or wrong lets no one in (and says
why in the log) until it is fixed. Like an SSH key, it must be a regular file of the user the server
runs as, that only this user can read or write: checked at start and again at every change of the
file, its mode and owner included (a chmod or chown changes no content, and is a change all the same).
"""

from __future__ import annotations

import hmac
import logging
import os
import re
import stat
import threading
from dataclasses import dataclass
from pathlib import Path

from .errors import CodedError
from .logs import log

# Far above a file of every agent one registry serves; read no further.
MAX_FILE_BYTES = 1 << 20
# A token must resist guessing: 32 characters of visible ASCII (e.g. `openssl rand -hex 32`).
MIN_TOKEN_CHARACTERS = 32
MAX_TOKEN_CHARACTERS = 512
AGENT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
TOKEN = re.compile(r"[\x21-\x7e]+")


class TokenFileRefused(CodedError):
    """A token file that cannot be used: it names the file and the line, never a token."""

    code = "invalid_input"


@dataclass(frozen=True)
class _Version:
    """What says that the file changed since it was read."""

    device: int
    inode: int
    size: int
    modified_ns: int
    # chmod and chown change the inode's change time, and neither the size nor the modification time.
    changed_ns: int
    mode: int
    owner: int


def read_tokens(path: Path) -> dict[str, str]:
    """The file's tokens, each to its agent's name; TokenFileRefused when any line or the file is wrong."""
    try:
        with path.open("rb") as file:
            info = os.fstat(file.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise TokenFileRefused(f"{path}: the token file must be a regular file")
            if info.st_uid != os.geteuid():
                raise TokenFileRefused(
                    f"{path}: the token file belongs to another user (uid {info.st_uid}), who could change it; "
                    f"it must be owned by the user the server runs as (uid {os.geteuid()})"
                )
            if info.st_mode & 0o077:
                raise TokenFileRefused(f"{path}: the token file can be read or written by other users (mode {stat.S_IMODE(info.st_mode):o}); chmod 600 {path}")
            data = file.read(MAX_FILE_BYTES + 1)
    except OSError as error:
        raise TokenFileRefused(f"{path}: cannot read the token file: {error.strerror}") from None
    if len(data) > MAX_FILE_BYTES:
        raise TokenFileRefused(f"{path}: the token file is larger than {MAX_FILE_BYTES // 1024} KiB")
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError:
        raise TokenFileRefused(f"{path}: the token file must be ASCII text") from None
    tokens: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        where = f"{path}:{number}"
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        fields = line.split()
        if len(fields) != 2:
            raise TokenFileRefused(f"{where}: write one agent per line as NAME TOKEN (two fields separated by a space)")
        name, token = fields
        if not AGENT_NAME.fullmatch(name):
            raise TokenFileRefused(f"{where}: an agent's name is 1 to 63 letters, digits, dots, hyphens or underscores")
        if not (MIN_TOKEN_CHARACTERS <= len(token) <= MAX_TOKEN_CHARACTERS and TOKEN.fullmatch(token)):
            raise TokenFileRefused(
                f"{where}: the token of {name} must be {MIN_TOKEN_CHARACTERS} to {MAX_TOKEN_CHARACTERS} visible ASCII characters "
                "(make one with: openssl rand -hex 32)"
            )
        if name in tokens.values():
            raise TokenFileRefused(f"{where}: {name} has a line already; one token per agent")
        if token in tokens:
            raise TokenFileRefused(f"{where}: {name} has the token of {tokens[token]}; give each agent a token of its own")
        tokens[token] = name
    if not tokens:
        raise TokenFileRefused(f"{path}: the token file names no agent; add a line NAME TOKEN")
    return tokens


class AgentTokens:
    """The tokens of a token file, read again when it changes (a changed file takes effect at the next request)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._version = self._version_now()
        self._tokens = read_tokens(path)  # at start, a wrong file stops the server with its reason

    def _version_now(self) -> _Version | None:
        try:
            info = os.stat(self.path)
        except OSError:
            return None
        return _Version(info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_mode, info.st_uid)

    def _current(self) -> dict[str, str]:
        with self._lock:
            version = self._version_now()
            if version != self._version:
                self._version = version
                try:
                    self._tokens = read_tokens(self.path)
                except TokenFileRefused as error:
                    # Closed, not open: a token revoked by a bad edit must not come back.
                    self._tokens = {}
                    log("token_file_refused", logging.ERROR, detail=error.detail)
            return self._tokens

    def agent_of(self, presented: str) -> str | None:
        """The name of the agent whose token was presented, or None. Every token is compared, each
        in constant time, so the time taken says nothing of which token came close."""
        found = None
        for token, name in self._current().items():
            if hmac.compare_digest(token.encode("ascii"), presented.encode("ascii", "replace")):
                found = name
        return found
