"""Writing a file atomically: to a temporary file beside it, then renamed over it, so a reader (or a
run resumed after a crash) sees the old file or the new one, never half of one. The one way bench/
writes a file that something else reads while it may be written: results, reports, checkpoints,
stores, caches. tests/test_atomic.py holds it."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def temporary(path: Path, *, per_process: bool = False) -> Path:
    """Where a write of ``path`` goes before the rename: ``<name>.tmp`` beside it (one file system, so
    the rename is atomic), or ``<name>.<pid>.tmp`` where several processes may write ``path`` at once
    (a shared cache): each then writes its own and the last rename wins whole."""
    return path.with_name(f"{path.name}.{os.getpid()}.tmp" if per_process else f"{path.name}.tmp")


@contextmanager
def atomic_path(path: Path, *, fsync: bool = False, per_process: bool = False) -> Iterator[Path]:
    """The temporary path (:func:`temporary`) to write ``path``'s content to; when the block ends it is
    flushed to disk (with ``fsync``: a checkpoint that must survive a power loss) and renamed over
    ``path``. A block that raises leaves ``path`` as it was and removes the temporary."""
    tmp = temporary(path, per_process=per_process)
    try:
        yield tmp
        if fsync:
            with open(tmp, "rb") as fh:
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_atomic(path: Path, text: str, *, per_process: bool = False) -> Path:
    """Write ``text`` to ``path`` atomically (:func:`atomic_path`, in the locale's encoding as
    ``Path.write_text``); returns ``path``."""
    with atomic_path(path, per_process=per_process) as tmp:
        tmp.write_text(text)
    return path
