"""ScaleRL's saturating curve of pass@1 against training compute, fitted per (label, model, task):

    R(C) = R0 + (A - R0) / (1 + (C_mid / C)^B)

C = training samples consumed, R0 = the base policy's value (the mean over seeds of the eval at
C = 0, fixed, not fitted), A in [0, 1] the asymptote, B > 0 the efficiency exponent, C_mid > 0 the
compute at half the gain (Khatri et al. 2025, "The Art of Scaling Reinforcement Learning Compute for
LLMs", arXiv 2510.13786, Eq. 1). Intervals are percentile 95% intervals of a bootstrap over seeds.

    creditbench curve-fit --sweep NAME      prints the Markdown table for a sweep's runs

Departures from the paper:
1. C is training samples, not GPU-hours (the sweep's budget unit), and no early window is dropped:
   small runs have few eval points to spare.
2. The fit is least squares from a fixed grid over (B, C_mid), A solved in closed form at each
   grid point, then refined jointly (the paper grid-searches A and C_mid and fits B).
"""

from __future__ import annotations

import dataclasses
import json
from collections import defaultdict
from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares
from scipy.special import expit

from bench.errors import CreditBenchError
from bench.run.result import RunResult

B_RANGE = (0.1, 5.0)
A_WIDTH = 0.1
"""An A interval wider than this cannot tell "learns slower" from "ends lower"."""
Seed = tuple[float, np.ndarray, np.ndarray]
"""One seed's value at C = 0 and its points with C > 0: C [N], R [N]."""


@dataclass(frozen=True)
class Fit:
    """A fitted curve R(C); ``converged`` is the least-squares solver's success."""

    A: float
    B: float
    C_mid: float
    R0: float
    rss: float
    """Residual sum of squares over the points fitted."""
    converged: bool
    at_bound: tuple[str, ...] = ()
    """The parameters that ended on a bound of their range."""

    def predict(self, c: np.ndarray) -> np.ndarray:
        # 1 / (1 + (C_mid / C)^B) = expit(B (log C - log C_mid))
        return self.R0 + (self.A - self.R0) * expit(self.B * (np.log(c) - np.log(self.C_mid)))


def fit_curve(c: np.ndarray, r: np.ndarray, r0: float) -> Fit:
    """Least-squares fit of A, B, C_mid to the points (c, r) [N] with c > 0 (others are dropped), R0 = r0.
    Bounds: A in [0, 1], B in B_RANGE, C_mid in [min C / 100, 100 max C]. Three distinct C at least
    determine the fit; fewer give one point of a ridge of equal fits."""
    keep = np.asarray(c) > 0
    c, r = np.asarray(c, float)[keep], np.asarray(r, float)[keep]
    if not len(c):
        raise CreditBenchError("fit_curve needs at least one point with C > 0")
    lo = np.array([0.0, np.log(B_RANGE[0]), np.log(c.min() / 100)])  # (A, log B, log C_mid)
    hi = np.array([1.0, np.log(B_RANGE[1]), np.log(c.max() * 100)])
    log_b, log_m = np.meshgrid(np.linspace(lo[1], hi[1], 12), np.linspace(lo[2], hi[2], 41), indexing="ij")
    s = expit(np.exp(log_b.ravel())[:, None] * (np.log(c)[None] - log_m.ravel()[:, None]))  # [G, N]
    gain = np.clip((s * (r - r0)).sum(1) / (s * s).sum(1), -r0, 1 - r0)  # A - R0 given (B, C_mid)
    g = int(np.argmin(((r0 + gain[:, None] * s - r) ** 2).sum(1)))

    def residual(x: np.ndarray) -> np.ndarray:
        return r0 + (x[0] - r0) * expit(np.exp(x[1]) * (np.log(c) - x[2])) - r

    x0 = np.clip([r0 + gain[g], log_b.ravel()[g], log_m.ravel()[g]], lo, hi)
    res = least_squares(residual, x0, bounds=(lo, hi), method="trf", xtol=1e-12, ftol=1e-12)
    tol = np.array([1e-6, 1e-3, 1e-3])
    edge = tuple(n for n, x, a, b, t in zip(("A", "B", "C_mid"), res.x, lo, hi, tol) if x - a < t or b - x < t)
    A, B, C_mid = float(res.x[0]), float(np.exp(res.x[1])), float(np.exp(res.x[2]))
    return Fit(A, B, C_mid, float(r0), float(2 * res.cost), bool(res.success), edge)


def _seeds(runs: list[RunResult], task: str, metric: str) -> list[Seed]:
    if len({(r.label, r.model) for r in runs}) != 1:
        groups = sorted({f"{r.label}/{r.model}" for r in runs})
        raise CreditBenchError(f"a curve is fitted to one (label, model) group; got {', '.join(groups) or 'no runs'}")
    out = []
    for run in runs:
        pts = [(e.samples, e.eval[task]) for e in run.history if task in e.eval]
        if not pts or pts[0][0] != 0 or metric not in pts[0][1]:
            have = sorted(pts[0][1]) if pts else []
            raise CreditBenchError(
                f"run {run.run_name} has no {task}/{metric} eval at C = 0 (metrics there: {', '.join(have) or 'none'})"
            )
        c, v = np.array([p[0] for p in pts[1:]], float), np.array([p[1][metric] for p in pts[1:]], float)
        out.append((float(pts[0][1][metric]), c, v))
    return out


def _pool(seeds: list[Seed], idx: np.ndarray, c_max: float = np.inf) -> tuple[np.ndarray, np.ndarray, float]:
    """The seeds ``idx``'s points with C <= c_max, pooled: C [N], R [N], and R0 (their mean at C = 0)."""
    c = np.concatenate([seeds[i][1] for i in idx])
    r = np.concatenate([seeds[i][2] for i in idx])
    return c[c <= c_max], r[c <= c_max], float(np.mean([seeds[i][0] for i in idx]))


def _boot(seeds: list[Seed], n_boot: int, seed: int, c_max: float = np.inf) -> list[Fit]:
    """Fits to ``n_boot`` resamples of the seeds with replacement (a resample with no point is skipped)."""
    rng = np.random.default_rng(seed)
    pools = (_pool(seeds, rng.integers(0, len(seeds), len(seeds)), c_max) for _ in range(n_boot))
    return [fit_curve(*p) for p in pools if len(p[0])]


def _too_short(interval: dict[str, tuple[float, float]], c_max: float) -> list[str]:
    a_lo, a_hi = interval["A"]
    why = [f"A's interval is {a_hi - a_lo:.2f} wide (> {A_WIDTH})"] if a_hi - a_lo > A_WIDTH else []
    why += ["A's interval reaches 1"] if a_hi >= 1 - 1e-3 else []
    if interval["C_mid"][1] > c_max:
        why.append(f"C_mid's interval reaches {interval['C_mid'][1]:.0f}, past the budget {c_max:.0f}")
    return why


def fit_label(runs: list[RunResult], task: str, metric: str = "pass_at_1", n_boot: int = 1000, seed: int = 0) -> dict:
    """The curve of one (label, model) group's runs on eval ``task``: the point ``fit`` and, from 3
    seeds on, ``interval`` (percentile 95% of a bootstrap over seeds: {A, B, C_mid: (lo, hi)}),
    ``at_bound`` (share of bootstrap fits with that parameter on a bound) and ``budget_too_short``
    (without intervals: True where the point fit alone shows it, else None), with the ``reason``.

    All seeds' points are pooled, each one a residual: with a shared eval schedule the minimiser is the
    mean curve's (sum_s sum_i (r_si - f(c_i))^2 = S sum_i (mean_s r_si - f(c_i))^2 + const), and
    seeds whose eval points fall at different C still count. Fewer than 3 distinct C > 0 leave the 3
    parameters undetermined: ``identifiable`` False, no fit."""
    seeds = _seeds(runs, task, metric)
    c, r, r0 = _pool(seeds, np.arange(len(seeds)))
    cs = np.unique(c)
    out = {"label": runs[0].label, "model": runs[0].model, "task": task, "metric": metric, "seeds": len(seeds)}
    out |= {"c_max": float(c.max(initial=0)), "points": len(cs), "identifiable": len(cs) >= 3, "fit": None}
    out |= {"interval": None, "at_bound": None, "budget_too_short": None}
    if len(cs) < 3:
        where = ", ".join(f"{x:.0f}" for x in cs)
        reason = f"3 free parameters (A, B, C_mid) need 3 distinct C > 0, have {len(cs)} ({where})"
        return out | {"budget_too_short": True, "reason": reason}
    out["fit"] = fit = fit_curve(c, r, r0)
    if len(seeds) < 3:  # the point fit alone can show the budget too short, never long enough
        why = _too_short({k: (getattr(fit, k),) * 2 for k in ("A", "C_mid")}, out["c_max"])
        reason = "; ".join([f"no interval from fewer than 3 seeds ({len(seeds)})", *why])
        return out | {"budget_too_short": True if why else None, "reason": reason}
    boot = _boot(seeds, n_boot, seed)
    values = {k: np.array([getattr(f, k) for f in boot]) for k in ("A", "B", "C_mid")}
    interval = {k: tuple(float(x) for x in np.percentile(v, [2.5, 97.5])) for k, v in values.items()}
    why = _too_short(interval, out["c_max"])
    return out | {
        "interval": interval,
        "at_bound": {k: float(np.mean([k in f.at_bound for f in boot])) for k in values},
        "budget_too_short": bool(why),
        "reason": "; ".join(why) or "A and C_mid determined within the budget",
    }


def extrapolation_check(
    runs: list[RunResult], task: str, metric: str = "pass_at_1", n_boot: int = 1000, seed: int = 0
) -> dict:
    """Fit on the eval points with C <= half the largest C, predict the mean over seeds at each later C:
    ``error`` the mean |predicted - observed|, ``max_error`` the largest; from 3 seeds on ``interval``
    per later C (percentile 95% of the bootstrap-over-seeds predictions; it holds the fit's spread,
    not the noise of the observed mean) and ``inside``, whether every observed mean lies within its own."""
    seeds = _seeds(runs, task, metric)
    c, r, _ = _pool(seeds, np.arange(len(seeds)))
    cs = np.unique(c)
    half = float(c.max(initial=0)) / 2
    early, late = cs[cs <= half], cs[cs > half]
    if len(early) < 3:
        return {"possible": False, "reason": f"3 eval points with 0 < C <= {half:.0f} needed, have {len(early)}"}
    fit = fit_curve(*_pool(seeds, np.arange(len(seeds)), half))
    observed = np.array([r[c == x].mean() for x in late])
    predicted = fit.predict(late)
    out = {"possible": True, "fit": fit, "c": late.tolist(), "observed": observed.tolist()}
    out |= {"predicted": predicted.tolist(), "error": float(np.abs(predicted - observed).mean())}
    out |= {"max_error": float(np.abs(predicted - observed).max()), "interval": None, "inside": None}
    if len(seeds) < 3:
        return out
    preds = np.array([f.predict(late) for f in _boot(seeds, n_boot, seed, half)])  # [n_boot, len(late)]
    lo, hi = np.percentile(preds, [2.5, 97.5], axis=0)
    return out | {
        "interval": list(zip(lo.tolist(), hi.tolist())),
        "inside": bool(np.all((lo <= observed) & (observed <= hi))),
    }


def intervals_overlap(a: dict, b: dict) -> dict[str, bool | None]:
    """Whether two groups' (fit_label's) 95% intervals overlap on A and on C_mid; None without intervals.
    Apart on A: they end at different levels; apart on C_mid alone: one learns faster."""
    if a["interval"] is None or b["interval"] is None:
        return {"A": None, "C_mid": None}
    ia, ib = a["interval"], b["interval"]
    return {k: bool(ia[k][0] <= ib[k][1] and ib[k][0] <= ia[k][1]) for k in ("A", "C_mid")}


def fit_sweep(runs: list[RunResult], n_boot: int = 1000, seed: int = 0) -> list[dict]:
    """fit_label per (label, model, training task) of a sweep's runs, each with its ``extrapolation``."""
    groups: dict[tuple[str, str, str], list[RunResult]] = defaultdict(list)
    for run in runs:
        groups[(run.label, run.model, run.task)].append(run)
    return [
        fit_label(g, task, n_boot=n_boot, seed=seed)
        | {"extrapolation": extrapolation_check(g, task, n_boot=n_boot, seed=seed)}
        for (_, _, task), g in sorted(groups.items())
    ]


def to_json(f: dict) -> dict:
    """A fit_label (or fit_sweep) result with its Fits (its extrapolation's too) as mappings and its
    intervals as lists (report.json)."""
    return json.loads(json.dumps(f, default=lambda v: dataclasses.asdict(v) if isinstance(v, Fit) else list(v)))


def _cell(fit: Fit | None, interval: dict | None, key: str, fmt: str) -> str:
    if fit is None:
        return "-"
    ci = f" [{interval[key][0]:{fmt}}, {interval[key][1]:{fmt}}]" if interval else ""
    return f"{getattr(fit, key):{fmt}}{'*' * (key in fit.at_bound)}{ci}"


def markdown_lines(fits: list[dict]) -> list[str]:
    """A table of fit_label results (with fit_sweep's ``extrapolation`` where present)."""
    lines = [
        "R(C) = R0 + (A - R0) / (1 + (C_mid / C)^B) against training samples C; 95% intervals from a "
        "bootstrap over seeds; * a point fit on a bound of its range. Extrapolation: fitted on C <= half "
        "the budget, mean |error| of the predicted mean beyond (in: every observed mean inside its "
        "interval). Too short: the data cannot tell learning slower from ending lower.",
        "",
        "| label | task | model | A [95% CI] | C_mid [95% CI] | B | extrapolation | verdict |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for f in fits:
        x = f.get("extrapolation") or {"possible": False, "reason": "not run"}
        inside = {True: " (in)", False: " (out)", None: ""}[x.get("inside")]
        extra = f"{x['error']:.3f}{inside}" if x["possible"] else f"n/a: {x['reason']}"
        if not f["identifiable"]:
            verdict = f"not identifiable: {f['reason']}"
        else:
            verdict = {True: "too short: ", False: "separates: ", None: ""}[f["budget_too_short"]] + f["reason"]
        a, c_mid = _cell(f["fit"], f["interval"], "A", ".3f"), _cell(f["fit"], f["interval"], "C_mid", ".0f")
        b = _cell(f["fit"], None, "B", ".2f")
        lines.append(f"| {f['label']} | {f['task']} | {f['model']} | {a} | {c_mid} | {b} | {extra} | {verdict} |")
    return lines
