"""The primary family of a credit-controlled sweep: each method against its twin and its placebo."""

from __future__ import annotations

import numpy as np
import pytest

from bench.report.comparisons import analyse
from bench.report.inference import assess, compare
from bench.sweep.analysis import Analysis

ALPHA = 0.05


def _null_scores(rng, seeds: int, problems: int = 100, n: int = 4) -> dict[str, dict[int, np.ndarray]]:
    """A method, its twin and its placebo with one true pass rate per problem: per-problem accuracy with
    a training effect per run (sd 0.024, as the embedded default's) and binomial eval sampling."""
    p = rng.beta(2, 2, problems)
    out = {}
    for label in ("m", "m-twin", "m-placebo"):
        out[label] = {}
        for s in range(seeds):
            shift = rng.normal(0, 0.024)
            out[label][s] = rng.binomial(n, np.clip(p + shift, 0, 1)) / n
    return out


def test_placebo_and_twin_comparisons_keep_the_family_wise_error_at_alpha_on_null_data():
    """Where the method, its twin and its placebo do the same, the primary family (method vs twin, method
    vs placebo, Holm) rejects anything in at most alpha of the sweeps, and each comparison alone in about
    alpha: the placebo is a fair control, not one the method beats by construction."""
    rng, sims = np.random.default_rng(0), 400
    any_rejected, single = 0, []
    for _ in range(sims):
        scores = _null_scores(rng, seeds=8)
        family = [compare({c: scores[c], "m": scores["m"]}, c, "chain", delta=0.03) for c in ("m-twin", "m-placebo")]
        a = assess(family, ALPHA)
        any_rejected += any(r.p_holm < ALPHA for r in a.rows)
        single.append(family[0].diffs["m"].p < ALPHA)
    se = np.sqrt(ALPHA * (1 - ALPHA) / sims)
    assert any_rejected / sims <= ALPHA + 2.5 * se
    assert np.mean(single) == pytest.approx(ALPHA, abs=3 * se)


class _Run:
    """What analyse reads of a finished run."""

    def __init__(self, label, seed, pass_at_1):
        self.label, self.seed, self.model, self.task, self.eval_n = label, seed, "tiny-500k", "chain", 0
        self.history = [type("P", (), {"eval": {"chain": {"pass_at_1": pass_at_1}}, "per_problem": {}})()]


def test_the_report_tests_each_method_against_its_controls_first_and_leaves_placebos_out_of_the_secondary():
    rng = np.random.default_rng(1)
    runs = []
    for s in range(6):
        base = 0.5 + rng.normal(0, 0.02)
        for label, shift in (("grpo", 0), ("m", 0.05), ("m-twin", 0.0), ("m-placebo", -0.02)):
            runs.append(_Run(label, s, base + shift + rng.normal(0, 0.005)))
    analysis = Analysis(credit_controls={"m": ["m-twin", "m-placebo"]}, placebos=["m-placebo"])
    out = analyse(runs, "grpo", analysis)
    credit = out["credit"]["assessment"]
    assert [(c["baseline"], list(c["diffs"])) for c in credit["comparisons"]] == [
        ("m-twin", ["m"]),
        ("m-placebo", ["m"]),
    ]
    assert [r["verdict"] for r in credit["rows"]] == ["better", "better"] and credit["m"] == 2
    secondary = out["assessment"]["comparisons"]
    assert [sorted(c["diffs"]) for c in secondary] == [["m"], ["m-twin"]]  # the placebo is a control, not a recipe
    assert "`m` vs `m-twin`" in out["credit"]["markdown"] and "`m-twin` vs `grpo`" in out["markdown"]


class _Spent:
    """What budget_rows reads of a finished run."""

    def __init__(self, label, seed, grid, steps):
        self.label, self.seed, self.model, self.task = label, seed, "tiny-500k", "chain"
        self.samples, self.tokens, self.steps, self.optimizer_steps = grid[-1], 10 * grid[-1], steps, 2 * steps
        self.extra_samples = 0
        self.history = [type("P", (), {"samples": s})() for s in grid]


def test_the_budget_table_gives_each_labels_spend_and_says_where_eval_grids_differ():
    from bench.report.files import budget_markdown
    from bench.report.summary import budget_rows

    runs = [_Spent("grpo", s, [0, 1024, 2048], 16) for s in range(3)]
    runs += [_Spent("dapo", 0, [0, 1024, 2048], 8), _Spent("dapo", 1, [0, 1024, 2048], 9)]
    rows = {r["label"]: r for r in budget_rows(runs)}
    assert rows["dapo"]["steps"] == [8, 9] and rows["dapo"]["optimizer_steps"] == [16, 18]
    assert rows["grpo"]["eval_samples"] == [0, 1024, 2048] and all(r["same_grid"] for r in rows.values())
    text = "\n".join(budget_markdown(list(rows.values())))
    assert "| tiny-500k | chain | dapo | 2,048 | 20,480 | 8–9 | 16–18 | 0, 1,024, 2,048 |" in text
    runs.append(_Spent("dapo", 2, [0, 1152, 2048], 9))  # a refill that passed the eval point
    rows = {r["label"]: r for r in budget_rows(runs)}
    assert rows["dapo"]["eval_samples"] is None and not rows["grpo"]["same_grid"]
    assert "Eval grids differ between labels on chain (tiny-500k)" in "\n".join(budget_markdown(list(rows.values())))
    assert "own" not in text and all("extra_samples" not in r for r in rows.values())
    ibpo = [_Spent("ibpo", s, [0, 1024, 2048], 16) for s in range(2)]
    ibpo[0].extra_samples, ibpo[1].extra_samples = 130, 151  # its revisions: apart from the sample budget
    rows = {r["label"]: r for r in budget_rows(runs[:3] + ibpo)}
    assert rows["ibpo"]["extra_samples"] == [130, 151] and rows["ibpo"]["samples"] == [2048, 2048]
    text = "\n".join(budget_markdown(list(rows.values())))
    assert "| ibpo | 2,048 (+130–151 own) |" in text and "(+N own): completions the method generated" in text


def test_a_misspelt_credit_control_names_the_valid_ones(tmp_path):
    from bench.errors import CreditBenchError
    from bench.sweep.spec import read_spec

    spec = tmp_path / "s.yaml"
    spec.write_text(
        "name: s\ntasks: [chain]\nmethods: [grpo, s_trace]\ncredit_controls: [twn]\nmodels: [tiny-500k]\n"
        "seeds: [0]\nbudget: {samples: 2048}\n"
    )
    with pytest.raises(
        CreditBenchError, match=r"s.yaml:4: credit_controls must be a list of twin, placebo, got \['twn'\]"
    ):
        read_spec(spec)
