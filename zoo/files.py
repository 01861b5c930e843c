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

from zoo_inference import ZooError

LOCK_NAME = ".zoo.lock"
TMP_SUFFIX = ".tmp"


def check_writable(out: str | os.PathLike[str]) -> Path:
    """Create ``out`` if needed and prove it can be written, before any work starts."""
    if not isinstance(out, str | os.PathLike):
        raise ZooError(f"out must be a folder path (str or os.PathLike), got {out!r}")
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
            _write(stage / name, content)
        for name in sorted(files, key=lambda n: n in last):
            os.replace(stage / name, out / name)
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_FILE_MODE = 0o666 & ~_umask()


@contextlib.contextmanager
def replacing(path: Path) -> Iterator[Path]:
    """A temporary path beside ``path`` to write; moved onto ``path`` (``os.replace``, atomic on
    one filesystem) when the block ends without error, removed otherwise. A process killed
    mid-write leaves the old ``path`` (or none) and a hidden ``.*.tmp`` file that
    :func:`remove_leftovers` clears."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=TMP_SUFFIX, dir=path.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        tmp.chmod(_FILE_MODE)  # mkstemp's 0600 -> what open() gives under the umask, as the pages
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def replace_file(path: Path, content: str | bytes) -> None:
    """Write ``content`` to ``path`` atomically: readers see the old file or the whole new one."""
    with replacing(path) as tmp:
        _write(tmp, content)


def _write(path: Path, content: str | bytes) -> None:
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")


def remove_leftovers(folder: Path, pattern: str | None = None) -> list[Path]:
    """Remove what a killed writer left in ``folder``: staging folders of
    :func:`write_atomically`, and the temporary files of :func:`replacing` matching ``pattern``
    (a glob relative to ``folder``, such as ``"*/.*.tmp"``; None: none). Call it only while
    holding the output's lock (:func:`locked`), so no live writer's files are taken; returns
    what it removed."""
    removed = []
    for stage in folder.glob(".zoo-staging-*"):
        shutil.rmtree(stage, ignore_errors=True)
        removed.append(stage)
    for tmp in folder.glob(pattern) if pattern else ():
        if tmp.is_file() and tmp.name.endswith(TMP_SUFFIX):
            tmp.unlink(missing_ok=True)
            removed.append(tmp)
    return removed
