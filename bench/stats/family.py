"""Multiplicity adjustments of a family of p-values, each returned in the family's order."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values of a family, in its order: the i-th smallest p times
    (m - i + 1), made non-decreasing, capped at 1."""
    p = np.asarray(pvalues, dtype=float)
    order, m = np.argsort(p), len(p)
    adj = np.minimum(1.0, np.maximum.accumulate(p[order] * (m - np.arange(m))))
    out = np.empty(m)
    out[order] = adj
    return out.tolist()


def benjamini_hochberg(pvalues: Sequence[float]) -> list[float]:
    """Benjamini-Hochberg step-up adjusted p-values (q-values) of a family, in its order: the
    i-th smallest p times m / i, made non-decreasing from the largest down, capped at 1."""
    p = np.asarray(pvalues, dtype=float)
    order, m = np.argsort(p), len(p)
    adj = np.minimum.accumulate((p[order] * m / np.arange(1, m + 1))[::-1])[::-1]
    out = np.empty(m)
    out[order] = np.minimum(adj, 1.0)
    return out.tolist()
