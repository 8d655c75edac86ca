"""The report card of ``creditbench judge``: a method's verdicts against its controls, per update (the
credit probe's trajectory-level comparisons at each rate and model size) and end to end (the sweep's
sequential decisions), read from the reports the probe and the sweep wrote, with the words of their
rules (bench.stats.words, bench.report.sequential) quoted, not restated."""

from __future__ import annotations

from typing import Any

from bench.script import md_table
from bench.stats import format as fmt


def card(
    label: str,
    controls: list[str],
    probes: dict[str, dict[str, Any]],
    sweep: dict[str, Any] | None,
    files: dict[str, str],
) -> dict[str, Any]:
    """The card's data: for each control label, its per-update comparisons at each size (``probes``: size ->
    the probe's report.json) and its end-to-end decision (``sweep``: the sweep's report.json, or None
    where only the probe ran); ``files``: what the card points to (spec, reports, figures, MLflow run)."""
    rows = []
    for control in controls:
        per_update = {
            size: [_update(c) for c in rep.get("comparisons", []) if c["method"] == label and c["control"] == control]
            for size, rep in probes.items()
        }
        readings = {size: _reading(rep, label, control) for size, rep in probes.items()}
        rows.append({"control": control, "per_update": per_update, "readings": readings,
                     "end_to_end": _decision(sweep, label, control)})  # fmt: skip
    ceiling = {size: [r for r in rep.get("oracle") or [] if r["method"] == label] for size, rep in probes.items()}
    return {"label": label, "comparisons": rows, "ceiling": {k: v for k, v in ceiling.items() if v}, "files": files}


def _reading(probe: dict[str, Any], label: str, control: str) -> str | None:
    """The probe's words for ``label`` vs ``control`` across its rates (its readings table), or None."""
    return next(
        (r["rates"] for r in probe.get("readings", []) if (r["method"], r["control"]) == (label, control)), None
    )


def _update(c: dict[str, Any]) -> dict[str, Any]:
    keep = ("lr_method", "mean", "lo", "hi", "verdict", "n", "gain_control", "relative", "mde")
    return {k: c[k] for k in keep if k in c}


def _decision(sweep: dict[str, Any] | None, label: str, control: str) -> dict[str, Any] | None:
    """The sweep's sequential decision of ``label`` vs ``control`` (its name starts "label vs control (")."""
    if not sweep:
        return None
    seq = ((sweep.get("analysis") or {}).get("sequential") or {}).get("analysis") or {}
    for d in seq.get("decisions", []):
        if d["name"].startswith(f"{label} vs {control} ("):
            return {k: d[k] for k in ("verdict", "seeds", "diff", "lo", "hi", "why") if k in d}
    return None


def _points(v: float) -> str:
    return f"{100 * v:+.1f}"


def markdown(data: dict[str, Any]) -> str:
    """The card as a page: a table per comparison (each size and rate per update, then end to end), the
    readings by rule, and the files."""
    label = data["label"]
    lines = [f"# Report card: `{label}`", ""]
    lines.append(
        "Per update: the method's gain in J after one update minus its control's, from the same weights, "
        "optimizer state and batch (points of J; the interval over reference trajectories, at the probe's "
        "design). End to end: the paired difference in final pass@1 over seeds in rounds (points), with the "
        "repeated interval valid at the sequential stop."
    )
    lines.append("")
    for row in data["comparisons"]:
        lines += [f"## `{label}` vs `{row['control']}`", ""]
        table = []
        for size, comps in row["per_update"].items():
            for c in comps:
                rel = c.get("relative") or {}
                share = fmt.percent(rel)
                table.append([f"per update, {size}", f"{c['lr_method']:g}",
                              f"{c['mean']:+.2f} [{c['lo']:+.2f}, {c['hi']:+.2f}]", share, str(c["n"]),
                              c["verdict"]])  # fmt: skip
        e = row["end_to_end"]
        if e:
            interval = f"{_points(e['diff'])} [{_points(e['lo'])}, {_points(e['hi'])}]"
            table.append(["end to end, pass@1", "tuned", interval, "–", f"{e['seeds']} seeds", e["verdict"]])
        if table:
            header = ["level", "lr", "difference [interval]", "share of the control's gain", "n", "verdict"]
            lines += md_table(header, table, "llrrrl")
        else:
            lines.append("Nothing measured yet.")
        for size, words in row["readings"].items():
            if words:
                lines += ["", f"Per update at {size}, by rule: **{words}**."]
        lines.append("")
    lines += _ceiling(data.get("ceiling") or {})
    lines += ["## Files", ""] + [f"- {k}: `{v}`" for k, v in data["files"].items()]
    return "\n".join(lines) + "\n"


def _ceiling(ceiling: dict[str, list[dict[str, Any]]]) -> list[str]:
    """The card's credit-ceiling table (each size's share of the oracle), nothing without an oracle arm."""
    if not ceiling:
        return []
    lines: list[str] = []
    lines += ["## The credit ceiling", "",
              "The method's gain over its twin as a share of the twin's oracle's (the twin's credit moved onto the "
              "Monte-Carlo step advantages; Fieller's interval, bench.report.oracle):", ""]  # fmt: skip
    table = []
    for size, rows in ceiling.items():
        for r in rows:
            sh = r.get("share")
            share = fmt.percent(sh)
            oracle = f"{r['oracle_effect']:+.2f}" + (
                f" [{r['oracle_lo']:+.2f}, {r['oracle_hi']:+.2f}]" if "oracle_lo" in r else ""
            )
            table.append([size, r["setting"], f"{r['method_effect']:+.2f}", oracle, share, str(r["n"])])
    lines += md_table(["size", "setting", "method - twin", "oracle - twin", "share of the oracle", "n"], table,
                      "llrrrr") + [""]  # fmt: skip
    return lines
