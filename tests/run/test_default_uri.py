"""The default tracking URI is one function (bench.config.default_uri): $MLFLOW_TRACKING_URI, else the
local SQLite store, wherever a run, a sweep or a command takes its default."""

from __future__ import annotations

import pytest

from bench.bases import warmstart
from bench.cli import bases
from bench.config import TrackingConfig, default_uri


class Built(Exception):
    pass


def test_the_default_is_the_environment_else_the_local_store(monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert default_uri() == TrackingConfig().uri == "sqlite:///mlflow.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:///elsewhere.db")
    assert default_uri() == TrackingConfig().uri == "sqlite:///elsewhere.db"


def test_building_a_base_logs_to_the_environments_store(monkeypatch):
    """`creditbench bases build` used to log the warm-start to sqlite:///mlflow.db whatever the
    environment said."""
    seen = []

    def build_base(task_name, size, cache_dir, tracking_uri, fresh=False):
        seen.append(tracking_uri)
        raise Built

    monkeypatch.setattr(warmstart, "build_base", build_base)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:///elsewhere.db")
    with pytest.raises(Built):
        bases.main(["build", "arithmetic"])
    assert seen == ["sqlite:///elsewhere.db"]
