"""The documentation as a reader finds it: the README (the front page), the pages of docs/ and the
changelog, and the sections and code blocks of them that the tests run as written."""

from __future__ import annotations

import re
from pathlib import Path

from . import REPO

README = REPO / "README.md"
DOCS = REPO / "docs"
CHANGELOG = REPO / "CHANGELOG.md"
FENCE = re.compile(r"^(```|~~~)")


def pages() -> list[Path]:
    """Every page of the documentation: the README, then docs/ by name, then the changelog."""
    return [README, *sorted(DOCS.glob("*.md")), CHANGELOG]


def read(page: Path) -> str:
    return page.read_text(encoding="utf-8")


def prose_lines(text: str) -> list[str]:
    """text's lines outside fenced code blocks (a heading or a link inside code is none)."""
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def headings(text: str) -> list[tuple[int, str]]:
    """The (level, title) of every Markdown heading of text, in order."""
    return [(len(m[1]), m[2].strip()) for line in prose_lines(text) if (m := re.match(r"^(#{1,6}) (.+)$", line))]


def section(text: str, heading: str) -> str:
    """The body under heading (e.g. "## From TypeScript"), up to the next heading of its level or above."""
    level = len(heading) - len(heading.lstrip("#"))
    body, fenced = [], False
    for line in text.split(f"\n{heading}\n", 1)[1].splitlines(keepends=True):
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced and re.match(rf"#{{1,{level}}} ", line):
            break
        body.append(line)
    return "".join(body)


def code_blocks(text: str, language: str) -> list[str]:
    """The fenced blocks of one language in text, in order, each as written (with its last newline)."""
    return re.findall(rf"^```{language}\n(.+?)^```", text, flags=re.S | re.M)
