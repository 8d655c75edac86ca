"""The MLflow UI shows a sweep: its runs in the table and their eval pass@1 curves in the chart view.

Drives headless Chromium (Debian's /usr/bin/chromium) with Playwright against ``creditbench ui``;
run with ``pytest -m browser``. Skipped where Chromium or the playwright package is missing.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from dataclasses import dataclass

import pytest

from tools import ui_screenshot as ui

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(ui.browser_missing() is not None, reason=f"browser test: {ui.browser_missing()}"),
]

METRIC = "eval/arithmetic/pass_at_1"


@dataclass
class SweepStore:
    uri: str
    experiment: str
    sweep: str
    parent: str  # the sweep's parent run's name
    children: list[str]  # its child runs' names


@pytest.fixture
def sweep_store(tmp_path) -> SweepStore:
    """A real MLflow store holding one small ``creditbench sweep``: its parent run and two child runs
    with eval curves (the sweep of tests/run/test_sweep.py, one seed)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    import yaml
    from tiny_sweep import SPEC

    spec = {**SPEC, "name": "uitest", "seeds": [0]}
    path = tmp_path / "uitest.yaml"
    path.write_text(yaml.safe_dump(spec))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    env = {**os.environ, "CREDITBENCH_CACHE": str(tmp_path / "cache"), "MLFLOW_TRACKING_URI": uri}
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.cli",
            "sweep",
            str(path),
            "--results-dir",
            str(tmp_path / "results"),
            "--uri",
            uri,
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=Path(__file__).resolve().parents[2],
        timeout=900,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    children = [f"{m}-arithmetic-tiny-500k-seed0" for m in spec["methods"]]
    return SweepStore(uri, "creditbench", "uitest", "uitest", children)


def test_ui_shows_sweep_runs_and_pass_at_1_chart(sweep_store, tmp_path):
    from pathlib import Path

    from mlflow.tracking import MlflowClient

    s = sweep_store
    exp = MlflowClient(s.uri).get_experiment_by_name(s.experiment)
    assert exp.tags["mlflow.experimentKind"] == "custom_model_development"  # the experiment's type: training
    doc = (Path(__file__).resolve().parents[2] / "docs" / "mlflow-ui.md").read_text()
    for column in (*ui.TAG_COLUMNS, "eval/<task>/pass_at_1", "eval/<task>/samples"):  # the columns it shows
        assert f"`{column}`" in doc, column
    with ui.serve_ui(s.uri) as base:
        eid = ui.experiment_id(base, s.experiment)
        runs = ui.sweep_runs(base, eid, s.sweep)
        assert sorted(ui.run_name(r) for r in runs) == sorted([s.parent, *s.children])
        assert ui.pass_at_1_metric(runs) == METRIC
        with ui.browser() as ctx:
            ui.seed_ui_state(ctx, eid, ui.ui_state(METRIC))
            page = ctx.new_page()
            ui.open_runs_table(page, base, eid, s.sweep, METRIC, [s.parent, *s.children])
            assert ui.in_training_mode(page)
            for name in [s.parent, *s.children]:
                assert page.get_by_role("link", name=name, exact=True).first.is_visible(), name
            for column in ("method", "seed", METRIC):
                assert page.locator(".ag-header-cell").get_by_text(column, exact=True).first.is_visible(), column
            page.screenshot(path=str(tmp_path / "table.png"))

            card = ui.open_chart(page, base, eid, s.sweep, METRIC)
            assert card.locator(f"h4[title='{METRIC}']").is_visible()
            assert card.locator(".js-plotly-plot svg.main-svg").first.is_visible()
            assert card.locator(".scatterlayer .trace").count() >= len(s.children)
            for name in s.children:  # a legend entry per child run (the parent logged no metrics)
                assert card.get_by_text(f"{name} ({METRIC})", exact=True).count() == 1, name
            dialog = ui.open_fullscreen_chart(page, card, f"{s.children[0]} ({METRIC})")
            for name in s.children:
                assert dialog.get_by_text(f"{name} ({METRIC})", exact=True).is_visible(), name
            page.screenshot(path=str(tmp_path / "chart.png"))
    assert (tmp_path / "table.png").stat().st_size > 10_000
    with pytest.raises((urllib.error.URLError, OSError)):  # the server is gone
        urllib.request.urlopen(f"{base}/health", timeout=5)
