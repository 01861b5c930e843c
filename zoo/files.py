"""Writing results into a folder: checked before any work, staged on the target's own
filesystem and moved into place only when complete, one writer at a time."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path

from inference import ZooError

LOCK_NAME = ".zoo.lock"


def check_writable(out: str | os.PathLike[str]) -> Path:
    """Create ``out`` if needed and prove it can be written, before any work starts."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ZooError(f"output {str(out)!r} exists and is not a directory")
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out):
            pass
    except OSError as e:
        raise ZooError(f"cannot write to {str(out)!r}: {e.strerror or e}") from None
    return out


@contextlib.contextmanager
def locked(out: Path) -> Iterator[None]:
    """Hold ``out``'s lock file; a second writer gets a clear error instead of a lost result."""
    path = out / LOCK_NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                raise ZooError(
                    f"another zoo process is writing to {str(out)!r}; wait for it to finish"
                ) from None
            raise
        yield
    finally:
        os.close(fd)


def write_atomically(
    out: Path, files: Mapping[str, str | bytes], *, last: tuple[str, ...] = ()
) -> None:
    """Write ``files`` (name -> text or bytes) into ``out``: staged in a hidden folder inside
    ``out`` (so on its filesystem), then each moved into place with ``os.replace``; the names in
    ``last`` (an index that links to the others) are moved last. On error nothing is replaced."""
    stage = Path(tempfile.mkdtemp(prefix=".zoo-staging-", dir=out))
    try:
        for name, content in files.items():
            target = stage / name
            if isinstance(content, bytes):
                target.write_bytes(content)
            else:
                target.write_text(content, encoding="utf-8")
        for name in sorted(files, key=lambda n: n in last):
            os.replace(stage / name, out / name)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
