"""Screenshots of a sweep in the MLflow UI, taken with headless Chromium driven by Playwright.

    python -m tools.ui_screenshot --uri sqlite:///mlflow.db --sweep methods \\
        --out results/ui/runs_table.png --out-chart results/ui/metric_chart.png

It starts ``creditbench ui`` on a free port (tools/ui_server.py), opens the experiment's runs
table filtered to the sweep (search ``tags.sweep = 'NAME'``, sorted by the pass@1 metric, with the
method/model/seed tag columns and the metric columns shown) and the chart view of the same runs
filtered to that metric, saves the screenshots and always stops the server. Needs Debian's Chromium
(/usr/bin/chromium, or the path in $CREDITBENCH_CHROMIUM) and the Python package playwright
(``pip install -e '.[browser]'``); never ``playwright install``.

How the MLflow 3 UI is driven (hash routes of its single-page app):

* runs table: ``/#/experiments/<id>/runs?searchFilter=..&orderByKey=..&orderByAsc=false
  &compareRunsMode=TABLE&workflowType=machine_learning``; ``compareRunsMode=CHART`` is the chart view.
  ``workflowType`` picks the UI's mode (the sidebar's GenAI / Model training switch, which the UI keeps
  per browser, GenAI until changed): the link ``creditbench ui`` prints. The experiment's own tag
  ``mlflow.experimentKind`` (set by every run) is its type, which that switch does not follow.
  Sorting by any key but the start time lists child runs flat instead of nested under their parent.
* the shown columns, column widths, run visibility and the chart search text are UI state the app
  keeps in localStorage under ``MLflowLocalStorage-1.1-ExperimentPage-["<id>"]-ReactComponentState``;
  it is seeded before the page loads (a column key is ``tags.`seed``` or ``metrics.`eval/x/pass_at_1```).
* stable selectors: ``[data-testid=experiment-view-compare-runs-card]`` (one chart card, its title in
  ``h4[title=METRIC]``), ``[data-component-id=fullscreen_button_chartcard]``, Plotly's
  ``.js-plotly-plot svg.main-svg`` and ``.scatterlayer .trace``, run names as link text.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import tempfile
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.errors import CreditBenchError
from bench.script import script_parser
from tools.ui_server import (
    experiment_id,
    pass_at_1_metric,
    run_metrics,
    run_name,
    serve_ui,
    sweep_filter,
    sweep_runs,
)

CHROMIUM = os.environ.get("CREDITBENCH_CHROMIUM", "/usr/bin/chromium")
# Without the background-networking flags Chromium keeps trying to reach Google's hosts.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
VIEWPORT = {"width": 1600, "height": 1000}
FIRST_ROWS = 12  # the runs-table rows the viewport shows, at least
TAG_COLUMNS = ("method", "model", "model_params", "seed")
UI_STATE_KEY = 'MLflowLocalStorage-1.1-ExperimentPage-["{eid}"]-ReactComponentState'
# Keep MLflow's assistant side panel closed so it doesn't cover the table.
_QUIET_UI = {"mlflow.assistant.fab.autoOpenedOnFirstLoad_v1": "true", "mlflow.assistant.panelOpen_v1": "false"}


def browser_missing() -> str | None:
    """Why a browser session can't start here (one line), or None when Chromium and playwright are there."""
    if not (os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
        return (
            f"headless Chromium not found at {CHROMIUM}: apt-get install -y chromium "
            "(or set CREDITBENCH_CHROMIUM to its path)"
        )
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the Python package playwright is missing: pip install -e '.[browser]' (never 'playwright install')"
    return None


@contextlib.contextmanager
def browser(viewport: dict[str, int] | None = None) -> Iterator[Any]:
    """A headless Chromium (Debian's) browser context with a fresh profile; closed on leaving the block."""
    reason = browser_missing()
    if reason:
        raise CreditBenchError(reason)
    from playwright.sync_api import sync_playwright

    profile = tempfile.mkdtemp(prefix="creditbench-chromium-")
    try:
        with sync_playwright() as p:
            ctx = p.chromium.launch_persistent_context(
                profile,
                executable_path=CHROMIUM,
                headless=True,
                args=CHROMIUM_ARGS,
                viewport=viewport or VIEWPORT,
                device_scale_factor=1,
            )
            try:
                ctx.set_default_timeout(60_000)
                for k, v in _QUIET_UI.items():
                    ctx.add_init_script(
                        f"try {{ localStorage.setItem({json.dumps(k)}, {json.dumps(v)}); }} catch (e) {{}}"
                    )
                yield ctx
            finally:
                ctx.close()
    finally:
        shutil.rmtree(profile, ignore_errors=True)


def ui_state(metric: str, columns: tuple[str, ...] = TAG_COLUMNS, x_axis: str = "step") -> dict:
    """The runs page's persisted UI state: tag and metric columns, every run visible, charts filtered to
    ``metric`` and drawn against the step (``x_axis="step"``) or the eval's sample count (``"samples"``)."""
    if x_axis not in ("step", "samples"):
        raise CreditBenchError(f"unknown x axis {x_axis!r}. Valid x axes: samples, step.")
    samples = metric.rsplit("/", 1)[0] + "/samples"
    metric_cols = [f"metrics.`{metric}`", f"metrics.`{samples}`"]
    tag_cols = [f"tags.`{c}`" for c in columns]
    # The table applies widths only to the columns named in columnOrder.
    order = ["attributes.`Run Name`", "runDateAndNestInfo", "duration", *tag_cols, *metric_cols]
    widths = {
        "attributes.`Run Name`": 280,
        "runDateAndNestInfo": 140,
        "duration": 80,
        **{c: 60 if c == "tags.`seed`" else 110 for c in tag_cols},
        metric_cols[0]: 190,
        metric_cols[1]: 170,
    }
    return {
        "selectedColumns": tag_cols + metric_cols,
        "columnOrder": order,
        "columnWidths": widths,
        "runsHiddenMode": "SHOW_ALL",
        "hideEmptyCharts": True,
        "chartsSearchFilter": metric,
        "globalLineChartConfig": {
            "xAxisKey": "step" if x_axis == "step" else "metric",
            "lineSmoothness": 0,
            "selectedXAxisMetricKey": "" if x_axis == "step" else samples,
        },
    }


def runs_url(base: str, eid: str, search: str, order_by: str | None = None, mode: str = "TABLE") -> str:
    """The experiment's runs page (``mode`` TABLE or CHART) with a search filter and an optional sort key."""
    q = {"searchFilter": search, "compareRunsMode": mode, "workflowType": "machine_learning"}
    if order_by:
        q |= {"orderByKey": order_by, "orderByAsc": "false"}
    return f"{base}/#/experiments/{eid}/runs?" + urllib.parse.urlencode(q, quote_via=urllib.parse.quote)


def seed_ui_state(ctx: Any, eid: str, state: dict) -> None:
    """Make every page the context opens start from ``state`` for experiment ``eid``."""
    key = UI_STATE_KEY.format(eid=eid)
    ctx.add_init_script(
        f"try {{ localStorage.setItem({json.dumps(key)}, {json.dumps(json.dumps(state))}); }} catch (e) {{}}"
    )


def in_training_mode(page: Any) -> bool:
    """Whether the page shows the UI's model-training mode: its experiment sidebar lists *Models*
    and *Model registry*, where the GenAI mode lists *Sessions* and *Judges*."""
    link = lambda name: page.get_by_role("link", name=name, exact=True).count()  # noqa: E731
    return link("Model registry") > 0 and link("Judges") == 0


def chart_card(page: Any, metric: str) -> Any:
    """The chart-view card whose title is ``metric``."""
    return page.locator("[data-testid='experiment-view-compare-runs-card']").filter(
        has=page.locator(f"h4[title={json.dumps(metric)}]")
    )


def open_runs_table(page: Any, base: str, eid: str, sweep: str, metric: str, names: list[str]) -> None:
    """Load the sweep's runs table and wait until the first of ``names`` (in the table's order: best
    ``metric`` first) are on it: a big sweep's other rows are below the fold, not yet drawn."""
    page.goto(runs_url(base, eid, sweep_filter(sweep), f"metrics.`{metric}`"))
    for name in names[:FIRST_ROWS]:
        page.get_by_role("link", name=name, exact=True).first.wait_for(state="visible")
    page.wait_for_timeout(500)  # let the column layout settle


def open_chart(page: Any, base: str, eid: str, sweep: str, metric: str) -> Any:
    """Load the sweep's chart view and wait for the ``metric`` line chart; returns its card."""
    page.goto(runs_url(base, eid, sweep_filter(sweep), f"metrics.`{metric}`", mode="CHART"))
    card = chart_card(page, metric).first
    card.locator(".js-plotly-plot svg.main-svg").first.wait_for(state="visible")
    card.locator(".scatterlayer .trace").first.wait_for(state="attached")
    return card


# Grow the chart's scrolling legend (the closest scrollable ancestor of one legend label) to show
# every run, taking the room from the plot above it (at most half of it), then let Plotly re-fit.
_FIT_LEGEND_JS = """label => {
  let legend = label.parentElement;
  while (legend && !['auto', 'scroll'].includes(getComputedStyle(legend).overflowY)) legend = legend.parentElement;
  const plot = legend && legend.previousElementSibling;
  if (!plot) return 0;
  const h = plot.getBoundingClientRect().height;
  const extra = Math.min(legend.scrollHeight - legend.clientHeight, h / 2);
  if (extra <= 0) return 0;
  legend.style.height = (legend.clientHeight + extra) + 'px';
  legend.style.maxHeight = 'none';
  for (const el of [plot, ...plot.querySelectorAll('div')]) {
    if (!el.closest('.js-plotly-plot') && el.getBoundingClientRect().height >= h - 1)
      el.style.height = (h - extra) + 'px';
  }
  window.dispatchEvent(new Event('resize'));
  return extra;
}"""


def open_fullscreen_chart(page: Any, card: Any, legend_label: str) -> Any:
    """Open a chart card's full-screen dialog with its whole legend in view; returns the dialog."""
    card.locator("[data-component-id='fullscreen_button_chartcard']").click()
    dialog = page.get_by_role("dialog")
    dialog.locator(".js-plotly-plot svg.main-svg").first.wait_for(state="visible")
    page.wait_for_timeout(1000)  # Plotly's resize to the dialog
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    label = dialog.get_by_text(legend_label, exact=True).first
    with contextlib.suppress(PlaywrightTimeout):  # no such legend: keep MLflow's scrolling one
        label.wait_for(state="attached", timeout=10_000)
        label.evaluate(_FIT_LEGEND_JS)
        page.wait_for_timeout(1000)
    title = dialog.get_by_role("heading").first if dialog.get_by_role("heading").count() else dialog
    box = title.bounding_box()
    if box:  # away from the plot, so Plotly's hover toolbar and tooltips are hidden
        page.mouse.move(box["x"] + 2, box["y"] + 2)
        page.wait_for_timeout(300)
    return dialog


def screenshot(
    uri: str,
    out: str | Path,
    out_chart: str | Path | None = None,
    *,
    sweep: str = "methods",
    experiment: str = "creditbench",
    port: int = 0,
    x_axis: str = "step",
) -> list[Path]:
    """Save the sweep's runs table (and, with ``out_chart``, its pass@1-vs-step chart) as PNGs."""
    reason = browser_missing()
    if reason:
        raise CreditBenchError(reason)
    written = []
    with serve_ui(uri, port) as base:
        eid = experiment_id(base, experiment)
        runs = sweep_runs(base, eid, sweep)
        metric = pass_at_1_metric(runs)
        value = lambda r: next((m["value"] for m in r.get("data", {}).get("metrics", []) if m["key"] == metric), -1.0)  # noqa: E731
        names = [run_name(r) for r in sorted(runs, key=value, reverse=True)]  # the table's order
        with browser() as ctx:
            seed_ui_state(ctx, eid, ui_state(metric, x_axis=x_axis))
            page = ctx.new_page()
            open_runs_table(page, base, eid, sweep, metric, names)
            if not in_training_mode(page):
                raise CreditBenchError("the MLflow UI did not open in its model-training mode")
            Path(out).parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(out))
            written.append(Path(out))
            if out_chart:
                card = open_chart(page, base, eid, sweep, metric)
                plotted = next(run_name(r) for r in runs if metric in run_metrics(r))
                open_fullscreen_chart(page, card, f"{plotted} ({metric})")
                Path(out_chart).parent.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(out_chart))
                written.append(Path(out_chart))
    return written


def main(argv: list[str] | None = None) -> int:
    ap = script_parser(__doc__, "python -m tools.ui_screenshot")
    ap.add_argument("--uri", default=os.environ.get("MLFLOW_TRACKING_URI", "sqlite:///mlflow.db"))
    ap.add_argument("--experiment", default="creditbench")
    ap.add_argument("--sweep", default="methods")
    ap.add_argument("--out", required=True, help="PNG of the sweep's runs table")
    ap.add_argument("--out-chart", help="PNG of the sweep's eval pass@1 chart")
    ap.add_argument(
        "--x-axis",
        choices=["step", "samples"],
        default="step",
        help="the chart's x axis: the training step or eval/<task>/samples",
    )
    ap.add_argument("--port", type=int, default=0, help="UI port (0: a free one)")
    a = ap.parse_args(argv)
    try:
        for p in screenshot(
            a.uri, a.out, a.out_chart, sweep=a.sweep, experiment=a.experiment, port=a.port, x_axis=a.x_axis
        ):
            print(p)
    except CreditBenchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # a Playwright timeout or a browser crash: one line, not a traceback
        if not type(e).__module__.startswith("playwright"):
            raise
        print(f"error: the MLflow UI did not show what was expected: {str(e).splitlines()[0]}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
