"""The report card (bench.report.card) quotes the probe's and the sweep's reports: each comparison of the
judged label with each control, per update at every size and rate, end to end with the interval valid at
the sequential stop, and the readings by rule; hand-made reports, hand-worked figures."""

from __future__ import annotations

from bench.report.card import card, markdown

PROBE = {
    "comparisons": [
        {"method": "m", "control": "m-twin", "lr_method": 1e-4, "mean": 0.5, "lo": 0.1, "hi": 0.9, "n": 8,
         "verdict": "better", "gain_control": 2.5, "relative": {"mean": 0.2, "lo": 0.04, "hi": 0.36}, "mde": 0.3},
        {"method": "m", "control": "m-twin", "lr_method": 2e-4, "mean": -0.05, "lo": -0.2, "hi": 0.1, "n": 12,
         "verdict": "equivalent (±10% of the control's)", "gain_control": 3.0,
         "relative": {"mean": -0.0167, "lo": -0.0667, "hi": 0.0333}},
        {"method": "other", "control": "other-twin", "lr_method": 1e-4, "mean": 9.0, "lo": 8.0, "hi": 10.0, "n": 4,
         "verdict": "better"},
    ],
    "readings": [{"method": "m", "control": "m-twin", "rates": "better at 0.0001; equivalent at 0.0002"}],
}  # fmt: skip
SWEEP = {
    "analysis": {
        "sequential": {
            "analysis": {
                "decisions": [
                    {"name": "m vs m-twin (chain, tiny-500k)", "verdict": "better", "seeds": 18, "diff": 0.039,
                     "lo": 0.001, "hi": 0.076, "why": "t crossed"},
                    {"name": "m vs m-placebo (chain, tiny-500k)", "verdict": "inconclusive at the cap", "seeds": 48,
                     "diff": -0.004, "lo": -0.031, "hi": 0.023},
                ]
            }
        }
    }
}  # fmt: skip


def test_the_card_quotes_each_comparison_per_update_and_end_to_end():
    data = card(
        "m", ["m-twin", "m-placebo"], {"tiny-500k": PROBE, "tiny-2m": {"comparisons": []}}, SWEEP, {"spec": "s.yaml"}
    )
    twin, placebo = data["comparisons"]
    assert [c["lr_method"] for c in twin["per_update"]["tiny-500k"]] == [1e-4, 2e-4]  # not the other method's
    assert twin["per_update"]["tiny-2m"] == [] and placebo["per_update"]["tiny-500k"] == []
    assert twin["end_to_end"] == {"verdict": "better", "seeds": 18, "diff": 0.039, "lo": 0.001, "hi": 0.076,
                                  "why": "t crossed"}  # fmt: skip
    assert placebo["end_to_end"]["verdict"] == "inconclusive at the cap"
    assert twin["readings"] == {"tiny-500k": "better at 0.0001; equivalent at 0.0002", "tiny-2m": None}
    md = markdown(data)
    assert "| per update, tiny-500k | 0.0001 | +0.50 [+0.10, +0.90] | +20% [+4, +36] | 8 | better |" in md
    assert "| per update, tiny-500k | 0.0002 | -0.05 [-0.20, +0.10] | -2% [-7, +3] | 12 | equivalent" in md
    assert "| end to end, pass@1 | tuned | +3.9 [+0.1, +7.6] | – | 18 seeds | better |" in md  # points
    assert "| end to end, pass@1 | tuned | -0.4 [-3.1, +2.3] | – | 48 seeds | inconclusive at the cap |" in md
    assert "Per update at tiny-500k, by rule: **better at 0.0001; equivalent at 0.0002**." in md
    assert "- spec: `s.yaml`" in md


def test_a_card_before_the_sweep_has_the_probe_only():
    data = card("m", ["m-twin"], {"tiny-500k": PROBE}, None, {})
    assert data["comparisons"][0]["end_to_end"] is None
    assert "end to end" not in markdown(data).split("## `m` vs")[1]
    empty = markdown(card("m", ["m-twin"], {}, None, {}))
    assert "Nothing measured yet." in empty


def test_a_probe_with_the_oracle_gives_the_cards_ceiling():
    oracle = [{"setting": "lr 0.0001", "method": "m", "lr": 1e-4, "n": 6, "method_effect": 0.5, "oracle_effect": 2.0,
               "oracle_lo": 1.0, "oracle_hi": 3.0, "share": {"mean": 0.25, "lo": 0.05, "hi": 0.6}},
              {"setting": "lr 0.0001", "method": "other", "lr": 1e-4, "n": 6, "method_effect": 0.5,
               "oracle_effect": 2.0, "share": None}]  # fmt: skip
    data = card("m", ["m-twin"], {"tiny-500k": {**PROBE, "oracle": oracle}, "tiny-2m": PROBE}, None, {})
    assert list(data["ceiling"]) == ["tiny-500k"] and len(data["ceiling"]["tiny-500k"]) == 1
    assert "| tiny-500k | lr 0.0001 | +0.50 | +2.00 [+1.00, +3.00] | +25% [+5, +60] | 6 |" in markdown(data)
    assert "credit ceiling" not in markdown(card("m", ["m-twin"], {"tiny-500k": PROBE}, None, {}))
