"""The sweep report's figures (PNG, matplotlib Agg), drawn from results/<sweep>/report.json.

    creditbench plots results/<sweep>/report.json results/<sweep>/plots

``write_plots(report, out_dir)`` writes, per eval task (a ``_<eval_task>`` suffix only when the
report has more than one):

- ``pass1_vs_samples.png``: eval pass@1 against training samples, one panel per model (by size),
  one line per method label (mean over seeds, shaded 95% t-interval), the baseline in black;
- ``pass1_vs_tokens.png``: the same against generated training tokens;
- ``pass_at_k.png``: final pass@k against k, with 95% t-interval error bars;
- ``final_vs_size.png``: final pass@1 against the model's parameter count (log axis);

and ``credit_map_<model>.png`` for every model in ``report["credit_maps"]``: one fixed completion,
one row per method, each token coloured by that method's credit divided by its largest |credit|.

A method label keeps its colour in every figure; values that are missing or not finite are left
out of the plot they belong to. Text from the report is drawn literally (no mathtext).
The figures are drawn in :mod:`bench.report.plots.curves` and :mod:`bench.report.plots.credit`,
with what they share in :mod:`bench.report.plots.common`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from bench.report.plots.common import LineStyle
from bench.report.plots.credit import plot_credit_map
from bench.report.plots.curves import plot_curves, plot_final_vs_size, plot_pass_at_k


def _safe(name: str) -> str:
    """A file-name-safe version of a model or task name."""
    return re.sub(r"[^\w.-]+", "_", str(name)).strip("_") or "unnamed"


def _by_eval_task(rows: Sequence[dict]) -> dict[str, list[dict]]:
    """Rows grouped by eval task, in order of first appearance."""
    out: dict[str, list[dict]] = {}
    for r in rows:
        out.setdefault(str(r.get("eval_task") or r.get("task") or "eval"), []).append(r)
    return out


def write_plots(report: dict, out_dir: Path) -> list[Path]:
    """Write the report's figures into ``out_dir`` (created if needed); return the written paths."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    st = LineStyle(report)
    groups = _by_eval_task(report.get("rows") or [])
    written: list[Path | None] = []
    for eval_task, rows in groups.items():
        suffix = f"_{_safe(eval_task)}" if len(groups) > 1 else ""
        written.append(plot_curves(report, rows, eval_task, "samples", out_dir / f"pass1_vs_samples{suffix}.png", st))
        written.append(plot_curves(report, rows, eval_task, "tokens", out_dir / f"pass1_vs_tokens{suffix}.png", st))
        written.append(plot_pass_at_k(report, rows, eval_task, out_dir / f"pass_at_k{suffix}.png", st))
        written.append(plot_final_vs_size(report, rows, eval_task, out_dir / f"final_vs_size{suffix}.png", st))
    for model, cm in (report.get("credit_maps") or {}).items():
        written.append(plot_credit_map(str(model), cm or {}, st, out_dir / f"credit_map_{_safe(model)}.png"))
    return [p for p in written if p is not None]
