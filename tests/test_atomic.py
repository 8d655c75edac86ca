"""bench.atomic: a write replaces the file whole or leaves it as it was, and leaves no temporary behind."""

from __future__ import annotations

import os

import pytest

from bench.atomic import atomic_path, temporary, write_atomic


def test_a_write_replaces_the_file_whole(tmp_path):
    path = tmp_path / "report.json"
    path.write_text("old")
    assert write_atomic(path, "new\n") == path
    assert path.read_text() == "new\n"
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "last.ckpt"
    path.write_bytes(b"whole")
    with pytest.raises(OSError), atomic_path(path, fsync=True) as tmp:
        tmp.write_bytes(b"half")
        raise OSError("No space left on device")
    assert path.read_bytes() == b"whole"
    assert [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]


def test_the_temporary_sits_beside_the_file(tmp_path):
    """One name a process can find again (a checkpoint's directory removes it), or one per process where
    several write the same file (a shared cache)."""
    path = tmp_path / "run.json"
    assert temporary(path) == tmp_path / "run.json.tmp"
    assert temporary(path, per_process=True) == tmp_path / f"run.json.{os.getpid()}.tmp"
    with atomic_path(path, per_process=True, fsync=True) as tmp:
        assert tmp == temporary(path, per_process=True)
        tmp.write_bytes(b"{}")
    assert path.read_bytes() == b"{}" and not tmp.exists()
