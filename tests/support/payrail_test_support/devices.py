"""File systems of their own for the tests: a device that fills up, or turns read-only, for real
(a tmpfs mounted by the tests, which run as root, as CI does)."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def small_device(path: Path, megabytes: int) -> Iterator[Path]:
    """A file system of its own at path (tmpfs) of that many megabytes, unmounted at the end."""
    path.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={megabytes}m", "tmpfs", str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "--lazy", str(path)], check=True)


def fill(device: Path, leave: int = 0) -> Path:
    """Takes every byte the device has left but `leave` (a file of its own, filler), as another
    writer would: with none left, the next write there fails with ENOSPC. Returns the filler,
    whose removal frees them again."""
    filler = device / "filler"
    subprocess.run(["fallocate", "-l", str(shutil.disk_usage(device).free - leave), str(filler)], check=True)
    if not leave:  # what the free count leaves out (a page or two), byte by byte
        with open(filler, "ab", buffering=0) as topping_up, contextlib.suppress(OSError):
            while True:
                topping_up.write(b"\0")
    assert shutil.disk_usage(device).free <= leave
    return filler
