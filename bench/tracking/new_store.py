"""A new SQLite tracking store, copied from an empty one instead of migrated.

MLflow makes a new SQLite store by running every schema migration of its history (about 1.5 s of one core,
paid by every new sweep, ``creditbench run`` and ``eval`` on a new store, and most tests). :func:`seed` puts a
copy of an empty, migrated store there instead: made once per MLflow version in the temporary directory
(MLflow's own migrations, then its default experiment removed, so that opening the copy creates that
experiment with this store's artifact root, as a new store does). The copy is linked into place, so a store
that exists is never replaced and no process sees half a file; where anything fails, MLflow makes the store
itself as before.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)


def sqlite_path(uri: str) -> Path | None:
    """The file of a local ``sqlite:///PATH`` URI (None for any other URI, or an in-memory database)."""
    if not uri.startswith("sqlite:///"):
        return None
    path = uri[len("sqlite:///") :].split("?", 1)[0]
    return Path(path) if path and path != ":memory:" else None


def seed(uri: str) -> bool:
    """Where ``uri`` names a local SQLite file that does not exist yet (its directory does), put an empty
    migrated store there; whether it did."""
    path = sqlite_path(uri)
    if path is None or path.exists() or not path.parent.is_dir():
        return False
    tmp = path.parent / f".{path.name}.{os.getpid()}.new"
    try:
        tmp.write_bytes(_template().read_bytes())
        os.link(tmp, path)  # fails where a store appeared meanwhile: it is left as it is
        return True
    except OSError as e:  # no hard links here, a full disk: MLflow makes the store itself
        log.debug("no copied store at %s (%s): MLflow makes it", path, e)
        return False
    finally:
        tmp.unlink(missing_ok=True)  # also half a copy a full disk left


def _template() -> Path:
    """The empty migrated store of this MLflow version (made on first use, renamed into place whole)."""
    import mlflow

    path = Path(tempfile.gettempdir()) / f"creditbench-mlflow-{mlflow.__version__}-{os.getuid()}.db"
    if path.is_file():
        return path
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    with tempfile.TemporaryDirectory(dir=path.parent) as d:
        db = Path(d) / "store.db"
        store = SqlAlchemyStore(f"sqlite:///{db}", str(Path(d) / "artifacts"))
        store.engine.dispose()
        with sqlite3.connect(db) as con:  # no experiment: opening a copy makes the default one, its own
            con.execute("DELETE FROM experiment_tags")
            con.execute("DELETE FROM experiments")
        con.close()
        os.replace(db, path)
    return path
