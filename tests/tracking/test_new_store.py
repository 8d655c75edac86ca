"""bench.tracking.new_store: a new SQLite store copied from an empty migrated one is the store MLflow makes
(its tables, schema version, default experiment at this store's artifact root, the next experiment's id),
an existing file is never replaced, and where the copy cannot be made MLflow makes the store itself."""

from __future__ import annotations

import os
import sqlite3

import pytest
from mlflow.tracking import MlflowClient

from bench.tracking import new_store


def _tables(db) -> tuple[list, list]:
    con = sqlite3.connect(db)
    try:
        names = sorted(r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'"))
        return names, con.execute("SELECT version_num FROM alembic_version").fetchall()
    finally:
        con.close()


def test_a_copied_store_is_the_store_mlflow_makes(tmp_path, monkeypatch):
    made = {}
    for name, copied in (("copied", True), ("migrated", False)):
        folder = tmp_path / name
        folder.mkdir()
        monkeypatch.chdir(folder)  # MLflow's default artifact root is ./mlruns of the working directory
        uri = f"sqlite:///{folder / 'mlflow.db'}"
        if copied:
            assert new_store.seed(uri)
        c = MlflowClient(uri)
        (default,) = c.search_experiments()
        assert (default.experiment_id, default.name) == ("0", "Default")
        assert default.artifact_location == str(folder / "mlruns" / "0")  # this store's, not the template's
        experiment = c.create_experiment("x")
        run = c.create_run(experiment)
        c.log_metric(run.info.run_id, "m", 1.0)
        assert c.get_run(run.info.run_id).data.metrics == {"m": 1.0}
        made[name] = (experiment, _tables(folder / "mlflow.db"))
    assert made["copied"] == made["migrated"] and made["copied"][0] == "1"
    assert not [p for p in (tmp_path / "copied").iterdir() if p.name.startswith(".")]  # no temporary file left


def test_an_existing_file_and_other_uris_are_left_alone(tmp_path):
    db = tmp_path / "mlflow.db"
    db.write_bytes(b"not yet a store")
    assert not new_store.seed(f"sqlite:///{db}") and db.read_bytes() == b"not yet a store"
    for uri in ("sqlite:///:memory:", "file:./mlruns", "http://tracking:5000", f"sqlite:///{tmp_path}/no/dir.db"):
        assert not new_store.seed(uri)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mlflow.db"]


def test_where_the_copy_cannot_be_linked_mlflow_makes_the_store(tmp_path, monkeypatch):
    def no_links(src, dst):
        raise PermissionError(1, "hard links not supported", str(dst))

    monkeypatch.setattr(os, "link", no_links)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert not new_store.seed(uri)
    assert list(tmp_path.iterdir()) == []  # neither a store nor the temporary copy
    assert [e.name for e in MlflowClient(uri).search_experiments()] == ["Default"]


def test_a_full_disk_leaves_no_half_copy(tmp_path, monkeypatch):
    real = new_store.Path.write_bytes

    def half(self, data):
        real(self, data[: len(data) // 2])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(new_store.Path, "write_bytes", half)
    assert not new_store.seed(f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("uri, path", [("sqlite:////a/b.db", "/a/b.db"), ("sqlite:///rel.db?mode=rw", "rel.db")])
def test_the_file_of_a_sqlite_uri(uri, path):
    assert str(new_store.sqlite_path(uri)) == path
