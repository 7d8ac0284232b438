"""Text on its way out of the process: no secret in it, and no control character a terminal or
a log reader would obey.

Every face sends what it shows through here: CodedError scrubs its detail when it is made (so the
CLI's "Error: code: detail" and --json, the Python API's exceptions, the MCP tool's errors and the
backoffice's messages carry the scrubbed text), the CLI escapes the text of others it prints
(role names, lock holders, labelled queries), and logs.LineFormatter scrubs every value of every
line, the last line of defence.

Secrets are hidden as HIDDEN, found two ways:
- the configured ones: OPENAI_API_KEY (read from the environment each time) and the passwords of
  the database URLs the process is configured with (hide(), from settings.Settings; found by
  connection.url_secrets even in a URL libpq cannot read). One of MIN_SECRET_LENGTH characters or
  more is hidden wherever it appears; a shorter one (at least MIN_WORD_SECRET_LENGTH) only where
  it stands as a word of its own, since hiding it inside other words would garble the text;
- by their shape, configured or not: the password of any URL (scheme://user:password@host), the
  value of password=, sslpassword=, api_key=, access_token= and the like (in a connection string,
  a query string or a JSON body), an Authorization header, a bearer token, an API key shaped as
  OpenAI's and most providers' are (sk-...).

Control characters become escapes (\\x1b, \\u2028), so they are seen, never obeyed: C0 (but the
ones a caller keeps, such as newline and tab in a text of ours that is multi-line on purpose), DEL,
C1 (U+0080..U+009F: U+009B is CSI to many terminals), the line and paragraph separators, and the
bidirectional controls (which reorder what a terminal shows).
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Iterable
from functools import lru_cache

HIDDEN = "[hidden]"
API_KEY_VARIABLE = "OPENAI_API_KEY"
# A configured secret this long is hidden wherever it appears; a shorter one only as a word of its
# own; shorter still, it cannot be told from ordinary words (its shapes above still hide it).
MIN_SECRET_LENGTH = 8
MIN_WORD_SECRET_LENGTH = 4

_configured: set[str] = set()
_configured_lock = threading.Lock()

# A value: quoted (with its escapes) or up to the next space, quote, separator or closing brace;
# never one hidden already, so scrubbing scrubbed text changes nothing.
_VALUE = r"""(?!\[hidden\])(?:"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|[^\s"'&,;)}\]]+)"""
_SECRET_KEYS = r"(?:ssl)?password|passwd|api[-_]?key|access[-_]?token|auth[-_]?token|refresh[-_]?token|client[-_]?secret|secret[-_]?key"
SHAPES = (
    # scheme://user:password@host: the password runs to the last @ before a / or white space, as
    # an unencoded @ in a password leaves it; libpq reads up to the first.
    (re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://[^\s:/?#@\[\]]*:)[^\s/]*@"), rf"\1{HIDDEN}@"),
    # password=..., api_key=...: connection strings, query strings, environment dumps.
    (re.compile(rf"(?i)\b({_SECRET_KEYS})(\s*=\s*){_VALUE}"), rf"\1\2{HIDDEN}"),
    # "password": "...", 'api_key': '...': JSON bodies and Python's repr of them.
    (re.compile(rf"""(?i)(["'](?:{_SECRET_KEYS})["']\s*:\s*){_VALUE}"""), rf"\1{HIDDEN}"),
    # Authorization: Bearer ..., X-Api-Key: ...: headers an upstream echoes.
    (re.compile(rf"(?i)\b(authorization|x-api-key|api-key)(\s*:\s*)(?:(?:bearer|basic|token)\s+)?{_VALUE}"), rf"\1\2{HIDDEN}"),
    (re.compile(r"(?i)\b(bearer\s+)[a-z0-9\-._~+/]{8,}=*"), rf"\1{HIDDEN}"),
    # sk-..., sk-proj-..., and the masked sk-abc***xyz OpenAI's own refusals show.
    (re.compile(r"(?<![A-Za-z0-9])sk-[A-Za-z0-9_\-*]{12,}"), HIDDEN),
)

_BIDIRECTIONAL = (0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A))
CONTROL_CHARACTERS = frozenset((*range(0x00, 0x20), *range(0x7F, 0xA0), 0x2028, 0x2029, *_BIDIRECTIONAL))
# What json.dumps leaves raw (it escapes C0 itself): as JSON's own \u escapes they read back as the
# same characters, so a JSON answer or log line keeps them and no terminal or line reader obeys them.
JSON_ESCAPES = {code: f"\\u{code:04x}" for code in CONTROL_CHARACTERS if code >= 0x7F}


def hide(secrets: Iterable[str | None]) -> None:
    """Makes secrets known to scrub for the rest of the process (empty ones are ignored)."""
    with _configured_lock:
        _configured.update(secret for secret in secrets if secret)


def _known_secrets() -> list[str]:
    with _configured_lock:
        known = set(_configured)
    known.add(os.environ.get(API_KEY_VARIABLE, ""))
    # The longest first: a secret holding a shorter one is hidden whole.
    return sorted((s for s in known if len(s) >= MIN_WORD_SECRET_LENGTH), key=len, reverse=True)


def scrub(text: str) -> str:
    """text with every configured secret and everything shaped like one replaced by HIDDEN."""
    for secret in _known_secrets():
        text = text.replace(secret, HIDDEN) if len(secret) >= MIN_SECRET_LENGTH else re.sub(rf"(?<!\w){re.escape(secret)}(?!\w)", HIDDEN, text)
    for shape, replacement in SHAPES:
        text = shape.sub(replacement, text)
    return text


_NAMED_ESCAPES = {0x09: "\\t", 0x0A: "\\n", 0x0D: "\\r"}


def _escape(code: int) -> str:
    return _NAMED_ESCAPES.get(code) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


@lru_cache(maxsize=8)
def _escapes(keep: str) -> dict[int, str]:
    return {code: _escape(code) for code in CONTROL_CHARACTERS if chr(code) not in keep}


def escape_controls(text: str, keep: str = "") -> str:
    """text with its control characters (CONTROL_CHARACTERS) as escapes, but those in keep."""
    return text.translate(_escapes(keep))


def escape_unprintable(text: str) -> str:
    """text with every character Python would not print as an escape: the controls, and format
    characters (zero-width spaces, bidirectional controls, tags), separators but the space and
    unassigned code points, so a name that differs from another by one of them shows it."""
    return "".join(character if character.isprintable() else _escape(ord(character)) for character in text)


def one_line(text: object) -> str:
    """What may leave the process of a text from elsewhere (an error's detail, a role name): one
    line without secrets or control characters, the surrounding white space trimmed."""
    return escape_controls(scrub(str(text).strip()))


def json_text(value: object, *, indent: int | None = None) -> str:
    """value as JSON, non-ASCII text as it is but for the control characters JSON leaves raw
    (JSON_ESCAPES): what every catalog line, editor file and --json answer is written
    as. Written as \\u escapes, they read back unchanged, yet U+0085, U+2028 and U+2029 end no
    line for readers that end one there (Python's str.splitlines, editors, JavaScript before
    ES2019), and C1 (U+009B is CSI) or DEL reach no terminal raw."""
    return json.dumps(value, ensure_ascii=False, indent=indent).translate(JSON_ESCAPES)
