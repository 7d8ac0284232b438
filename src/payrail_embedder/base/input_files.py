"""Files an operator hands the command line (catalogs for `import`, labelled queries for `eval` and
`model tune`): opened once, checked to be a file, read a line at a time within a bound.

    with open_input(path, line_limit=RECORD_LINE) as opened:     # "-" is standard input
        for line in opened.lines():                               # each call reads from the start again
            line.number, line.text            # or UnreadableLine: line.number, line.problem

What may be named:
- a regular file is read where it is, held open, so every pass reads the same file;
- a pipe, a FIFO or standard input (`-`, /dev/stdin) is read once, into a private temporary file
  (unnamed in $TMPDIR: it goes when the command ends, however it ends) of at most
  MAX_SPOOLED_BYTES, which every pass then reads; the line bound applies while it is copied, so
  `cat /dev/zero | payrail-embedder import -` stops at the first line; a full $TMPDIR is
  output_files.DiskFull naming it;
- anything else is refused in words before a byte is read: a directory, a socket, a device
  (/dev/zero, /dev/urandom, a terminal as standard input).

A line is read with at most line_limit + 1 bytes in memory. A longer one is reported as the last
line: reading stops there rather than looking for its end, which /dev/zero (or any file without
line breaks) never gives; a line that long is more than anything valid can take, so the file is
not what the operator meant, and its lines after that are not worth reading into memory. A format
whose lines are held in memory together (labelled queries) bounds the whole input too
(size_limit): the line that takes it past the bound is reported the same way, as the last line.
"""

from __future__ import annotations

import contextlib
import io
import os
import stat
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, ClassVar

from .errors import CodedError
from .output_files import writing_to

# JSON's own white space: a line of nothing else is blank; any other character is content.
JSON_WHITE_SPACE = " \t\r\n"
# How messages name standard input given as "-".
STDIN = "<stdin>"
# The most a pipe, a FIFO or standard input may hold: it is copied to a temporary file first, and
# that file must not fill the disk when the writer never stops (/dev/urandom piped in). 1 GB holds
# a catalog of 500,000 records of 2 kB; a larger one is read from a regular file, in place.
MAX_SPOOLED_BYTES = 1_000_000_000


class InputRefused(CodedError):
    """A named input that is not a file the command can read: the kind it is, or why it cannot be read."""

    code = "invalid_input"


@dataclass(frozen=True)
class ByteLimit:
    """The most bytes a part of an input may take (LineLimit: a line, its line break included;
    SizeLimit: the whole input), and why, in words."""

    bytes: int
    why: str
    # The part, as the refusal names it.
    part: ClassVar[str]

    def refusal(self) -> str:
        return f"{self.part} is longer than {self.bytes:,} bytes, {self.why}; the rest of the file was not read"


class LineLimit(ByteLimit):
    part = "the line"


class SizeLimit(ByteLimit):
    part = "the input"


@dataclass(frozen=True)
class NumberedLine:
    """A non-blank line and its number (from 1, blank lines counted)."""

    number: int
    text: str


@dataclass(frozen=True)
class UnreadableLine:
    """A line that cannot be read, its number and why: not UTF-8, or longer than the limit (then
    the last line read)."""

    number: int
    problem: str


def json_lines(file: BinaryIO, limit: LineLimit, size: SizeLimit | None = None) -> Iterator[NumberedLine | UnreadableLine]:
    """The non-blank lines of a JSON Lines file, decoded from UTF-8 (a byte order mark where the
    file begins is allowed: editors on Windows write one), each read with at most limit.bytes + 1
    bytes in memory. file: any binary file (an upload's bytes in io.BytesIO, say). With a size
    limit, the line that takes the file past it is reported (size.refusal) as the last one."""
    number = total = 0
    while raw := file.readline(limit.bytes + 1):
        number += 1
        total += len(raw)
        if len(raw) > limit.bytes:
            yield UnreadableLine(number, limit.refusal())
            return
        if size is not None and total > size.bytes:
            yield UnreadableLine(number, size.refusal())
            return
        try:
            text = raw.decode("utf-8-sig" if number == 1 else "utf-8")
        except UnicodeDecodeError as error:
            yield UnreadableLine(number, f"not valid UTF-8 (byte {error.start + 1} of the line)")
            continue
        if text.strip(JSON_WHITE_SPACE):
            yield NumberedLine(number, text)


@dataclass(frozen=True)
class InputFile:
    """An opened input: source names it in messages; file is seekable (the file itself, or its copy)."""

    source: str
    file: BinaryIO
    line_limit: LineLimit
    # Where the input begins in file: standard input redirected from a file may have been read partly already.
    start: int = 0
    size_limit: SizeLimit | None = None

    def lines(self) -> Iterator[NumberedLine | UnreadableLine]:
        """json_lines of the whole input, from its start, however often it is called."""
        self.file.seek(self.start)
        try:
            yield from json_lines(self.file, self.line_limit, self.size_limit)
        except OSError as error:
            raise InputRefused(f"{self.source} cannot be read: {error.strerror or error}") from error


@contextlib.contextmanager
def open_input(name: str | Path, *, line_limit: LineLimit, size_limit: SizeLimit | None = None, max_spooled: int = MAX_SPOOLED_BYTES) -> Iterator[InputFile]:
    """The input `name` (a path, or "-" for standard input), opened once for reading; refused
    (InputRefused) unless it is a regular file, a pipe or a FIFO. See the module's docstring.
    size_limit: the most the whole input may take, for a format read whole into memory."""
    source = STDIN if str(name) == "-" else str(name)
    with contextlib.ExitStack() as closing:
        file, regular = _open_readable(name, source)
        # Standard input without a descriptor (a test harness's in-memory stream) is not ours to close.
        close = file.close if file is not getattr(sys.stdin, "buffer", None) else lambda: None
        closing.callback(close)
        if regular:
            yield InputFile(source, file, line_limit, start=file.tell(), size_limit=size_limit)
            return
        # Unbuffered: a write the disk refuses leaves nothing in a buffer to fail again at close.
        spool = closing.enter_context(tempfile.TemporaryFile(prefix="payrail-input-", buffering=0))
        _copy_lines(file, spool, source, line_limit, max_spooled, size_limit)
        close()  # the writer learns at once that nothing more is read (SIGPIPE, or EPIPE)
        yield InputFile(source, io.BufferedReader(spool), line_limit, size_limit=size_limit)


def _open_readable(name: str | Path, source: str) -> tuple[BinaryIO, bool]:
    """(the input opened for reading in binary, whether it is a regular file); InputRefused when it
    is neither a regular file nor a pipe or FIFO, before anything is read."""
    try:
        if str(name) == "-":
            return _standard_input(source)
        found = os.stat(name)  # follows links, as reading does: /dev/stdin is the pipe it leads to
        _refuse_unless_readable_kind(found.st_mode, source)
        # A FIFO opens once a writer opens its end, as `cat` waits; a regular file opens at once.
        fd = os.open(name, os.O_RDONLY | os.O_NOCTTY | os.O_CLOEXEC | (0 if stat.S_ISFIFO(found.st_mode) else os.O_NONBLOCK))
    except OSError as error:
        raise InputRefused(f"{source} cannot be opened: {error.strerror or error}") from error
    opened = os.fstat(fd)
    if (opened.st_dev, opened.st_ino) != (found.st_dev, found.st_ino):
        os.close(fd)
        raise InputRefused(f"{source} was replaced while it was opened; name it again")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb"), stat.S_ISREG(opened.st_mode)


def _standard_input(source: str) -> tuple[BinaryIO, bool]:
    if sys.stdin is None:  # started with its standard input closed
        raise InputRefused(f"{source} is closed: pipe the file into it, or name the file")
    stream = sys.stdin.buffer
    try:
        fd = stream.fileno()
    except (OSError, ValueError):  # no descriptor (a test harness's in-memory stream): read it as a pipe
        return stream, False
    mode = os.fstat(fd).st_mode
    if stat.S_ISCHR(mode) and os.isatty(fd):
        raise InputRefused(f"{source} is a terminal: pipe the file into it (cat FILE | payrail-embedder ... -) or name the file")
    _refuse_unless_readable_kind(mode, source)
    # A descriptor of its own, so closing it leaves the process's standard input open.
    return os.fdopen(os.dup(fd), "rb"), stat.S_ISREG(mode)


KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def _refuse_unless_readable_kind(mode: int, source: str) -> None:
    if stat.S_ISREG(mode) or stat.S_ISFIFO(mode):
        return
    kind = next((words for is_kind, words in KINDS if is_kind(mode)), "not a file")
    raise InputRefused(f"{source} is {kind}, not a file: name a file, a FIFO, or - for standard input")


def _copy_lines(source_file: BinaryIO, spool: io.FileIO, source: str, limit: LineLimit, max_spooled: int, size: SizeLimit | None) -> None:
    """Copies source_file into spool a line at a time, up to its first line over the limit or
    past the size limit (the part json_lines needs to refuse it), never more than max_spooled bytes."""
    copied = 0
    try:
        with writing_to(tempfile.gettempdir(), "set TMPDIR to a directory with room, or write the input to a file and name the file"):
            while raw := source_file.readline(limit.bytes + 1):
                copied += len(raw)
                if copied > max_spooled:
                    raise InputRefused(
                        f"{source} holds more than {max_spooled:,} bytes, the most read from a pipe or standard input: write it to a file and name the file"
                    )
                unwritten = memoryview(raw)
                while unwritten:
                    unwritten = unwritten[spool.write(unwritten) :]
                if len(raw) > limit.bytes or (size is not None and copied > size.bytes):
                    break
    except OSError as error:
        raise InputRefused(f"{source} cannot be read: {error.strerror or error}") from error
