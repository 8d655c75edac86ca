"""The ``analysis`` section of a sweep spec (bench.sweep.spec): how the report compares the sweep's
labels, which of them are credit controls, and the variance ``--dry_run`` sizes the design with."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from bench.core import check
from bench.sweep.entries import Control
from bench.sweep.schedule import SequentialSpec


@dataclass
class Analysis:
    """How the report compares methods (bench.report.inference) and how ``--dry_run`` sizes the design."""

    metric: str = "pass_at_1"
    """The primary metric: the family of comparisons (every label vs its control, per model and task)
    is tested on it with Holm's correction."""
    alpha: float = 0.05
    """Family-wise error rate of the comparisons (Holm) and level of the equivalence tests."""
    power: float = 0.8
    """Power at which the minimum detectable difference is stated."""
    margin: float = 0.03
    """Equivalence margin (the metric's scale): "no difference" is claimed only when a TOST bounds the
    difference within +-margin."""
    controls: dict[str, str] = field(default_factory=dict)
    """Label -> the label it is compared with instead of the baseline (e.g. a LoRA method with
    the rank-matched LoRA baseline)."""
    credit_controls: dict[str, list[str]] = field(default_factory=dict)
    """Label -> the labels of its credit controls (its credit-off twin, its placebo): the primary
    family of comparisons, each method against each of them; filled by the spec's ``credit_controls``.
    The comparisons with the baseline are then the secondary family, Holm-adjusted on their own."""
    placebos: list[str] = field(default_factory=list)
    """The labels whose method entry trains a placebo (its ``placebo`` flag); set from the method entries
    with ``credit_controls`` (:meth:`control`)."""
    sd_train: float | None = None
    """Prior SD of a run's primary metric from training alone (between seeds), for ``--dry_run``."""
    sd_item: float | None = None
    """Prior within-problem sampling SD (sqrt of the mean of p(1-p) over problems), for ``--dry_run``."""
    pilot: str | None = None
    """A sweep under the results folder whose runs give the variance components for ``--dry_run``
    (instead of sd_train and sd_item)."""
    sequential: SequentialSpec | None = None
    """The spec's ``sequential`` schedule itself (set from it, the same object): the credit family is
    then decided by the group-sequential analysis (bench.report.sequential)."""

    def __post_init__(self) -> None:
        check(
            re.fullmatch(r"(pass|avg)_at_[1-9]\d*|greedy", self.metric) is not None,
            f"analysis.metric must be pass_at_K (K in eval.k), avg_at_N (N = eval.n) or greedy, got {self.metric!r}",
        )
        check(0 < self.alpha < 0.5, f"analysis.alpha must be in (0, 0.5), got {self.alpha}")
        check(0 < self.power < 1, f"analysis.power must be in (0, 1), got {self.power}")
        check(self.margin > 0, f"analysis.margin must be > 0, got {self.margin}")
        for name in ("sd_train", "sd_item"):
            value = getattr(self, name)
            check(value is None or value >= 0, f"analysis.{name} must be >= 0, got {value}")

    def control(self, label: str) -> Control | None:
        """What ``label`` is as a credit control: "placebo" where its entry has the ``placebo`` flag (the
        rule bench.paired.plan applies to a run's config), else "twin"; None for a label that is no
        method's credit control."""
        if not any(label in cs for cs in self.credit_controls.values()):
            return None
        return "placebo" if label in self.placebos else "twin"
