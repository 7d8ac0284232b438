"""Files the command line writes (`export -o FILE`, `golden export FILE`), and a full disk reported
as a full disk wherever the package writes.

    with output_file(path) as file:       # "-" is standard output; file takes bytes
        file.write(data)

A regular file, or a name nothing has yet, is written into a private file beside it and renamed
into place once whole: a failure (a full disk, an error of the database) leaves what was there,
never half an export that reads as a whole one. Anything else (standard output, a FIFO, a device
such as /dev/full) is written as it is.

A full disk (ENOSPC, or a quota's EDQUOT) becomes DiskFull, naming where: "the disk is full: no
space left on the device that holds PATH". is_disk_full tells one among any library's errors: an
OSError, or the operating system's words in another error (safetensors and ONNX write files
through code of their own and say it so).
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from .errors import CodedError

NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT})
NO_SPACE_WORDS = tuple(os.strerror(code) for code in sorted(NO_SPACE))
STDOUT = "standard output"


class DiskFull(CodedError):
    """The disk a command writes to is full (or the writer's quota is used up): nothing was
    written in its place; free some space and run it again."""

    code = "unavailable"


class OutputRefused(CodedError):
    """A file the command was told to write cannot be opened for writing."""

    code = "invalid_input"


def is_disk_full(error: BaseException) -> bool:
    """Whether error, or an error it was raised from or while handling, is a full disk."""
    seen: set[int] = set()
    cause: BaseException | None = error
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, OSError) and cause.errno in NO_SPACE:
            return True
        if any(words in str(cause) for words in NO_SPACE_WORDS):
            return True
        cause = cause.__cause__ or cause.__context__
    return False


def full_disk(where: Path | str, hint: str = "") -> DiskFull:
    return DiskFull(f"the disk is full: no space left on the device that holds {where}" + (f"; {hint}" if hint else ""))


@contextlib.contextmanager
def writing_to(where: Path | str, hint: str = "") -> Iterator[None]:
    """Turns a full disk met inside the block into DiskFull naming where (and what to do: hint);
    a DiskFull raised inside, naming a place of its own, goes through as it is."""
    try:
        yield
    except DiskFull:
        raise
    except Exception as error:
        if not is_disk_full(error):
            raise
        raise full_disk(where, hint) from error


@contextlib.contextmanager
def output_file(name: str | Path) -> Iterator[BinaryIO]:
    """name ("-": standard output) open for writing bytes, written whole or not at all where it
    is a regular file (the module's doc). OutputRefused when it cannot be opened, DiskFull when
    its disk fills up."""
    if str(name) == "-":
        stdout = sys.stdout.buffer
        with writing_to(_standard_output_name(stdout)):
            yield stdout
            stdout.flush()
        return
    # The file a link leads to is the one replaced, as writing through the link would.
    path = Path(os.path.realpath(name))
    try:
        found: os.stat_result | None = os.stat(path)
    except FileNotFoundError:
        found = None
    except OSError as error:
        raise OutputRefused(f"{name} cannot be written: {error.strerror}") from error
    if found is not None and not stat.S_ISREG(found.st_mode):
        with writing_to(name), _opened(path, name, os.O_WRONLY) as file:
            yield file
        return
    partial = path.with_name(f".{path.name}.{secrets.token_hex(4)}.partial")
    try:
        with writing_to(name):
            with _opened(partial, name, os.O_WRONLY | os.O_CREAT | os.O_EXCL) as file:
                yield file
            if found is not None:  # the export replaces a file: it keeps that file's permissions
                os.chmod(partial, stat.S_IMODE(found.st_mode))
            os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def _opened(path: Path, name: str | Path, flags: int) -> Iterator[BinaryIO]:
    try:
        fd = os.open(path, flags | os.O_CLOEXEC | os.O_NOCTTY, 0o666)
    except OSError as error:
        if error.errno in NO_SPACE:
            raise
        raise OutputRefused(f"{name} cannot be written: {error.strerror}") from error
    with os.fdopen(fd, "wb") as file:
        yield file


def _standard_output_name(stdout: BinaryIO) -> str:
    """ "standard output", and the file it was redirected to when it is one (Linux names it)."""
    with contextlib.suppress(OSError, ValueError):
        fd = stdout.fileno()
        if stat.S_ISREG(os.fstat(fd).st_mode):
            return f"{STDOUT} ({os.readlink(f'/proc/self/fd/{fd}')})"
    return STDOUT
