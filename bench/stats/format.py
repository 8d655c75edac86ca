"""How the reports write numbers: a value, "value [lo, hi]", "value ± se", and a p-value ("<0.001" below
0.001). A format spec such as ``".3f"`` or ``"+.2f"`` (signed) picks the digits; a missing value is "–"."""

from __future__ import annotations

from collections.abc import Sequence

DASH = "–"


def number(value: float | None, spec: str = ".3f") -> str:
    """``value`` in ``spec``; "–" without one."""
    return DASH if value is None else f"{value:{spec}}"


def interval(value: float | None, lo: float | None, hi: float | None, spec: str = ".3f") -> str:
    """``value [lo, hi]`` in ``spec``; the value alone without both bounds; "–" without a value."""
    if value is None:
        return DASH
    if lo is None or hi is None:
        return f"{value:{spec}}"
    return f"{value:{spec}} [{lo:{spec}}, {hi:{spec}}]"


def percent(ratio: dict[str, float] | None) -> str:
    """A ratio with its interval ({"mean", "lo", "hi"}) in signed whole percent, "+25% [+5, +60]" (one that
    rounds to 0 is "+0", never "-0"); "–" without one."""
    if not ratio:
        return DASH
    mean, lo, hi = (rounded(100 * ratio[k], 0, signed=True) for k in ("mean", "lo", "hi"))
    return f"{mean}% [{lo}, {hi}]"


def with_se(value: float | None, se: float | None, spec: str = ".3f") -> str:
    """``value ± se`` in ``spec`` (the SE without a sign); the value alone without an SE; "–" without a value."""
    if value is None:
        return DASH
    return f"{value:{spec}}" if se is None else f"{value:{spec}} ± {se:{spec.lstrip('+')}}"


def rounded(value: float, digits: int, signed: bool = False) -> str:
    """``value`` to ``digits`` decimals, where it rounds to zero without a sign: "0.0", never "-0.0"."""
    return f"{round(value, digits) + 0.0:{'+' if signed else ''}.{digits}f}"  # + 0.0 turns -0.0 into 0.0


def p_value(p: float | None) -> str:
    """A p-value to 3 decimals, "<0.001" below 0.001; "–" without one."""
    return DASH if p is None else ("<0.001" if p < 1e-3 else f"{p:.3f}")


def seed_span(seeds: Sequence[int]) -> str:
    """Seeds as runs of consecutive ones: ``[0, 1, 2, 5, 7, 8]`` -> ``0-2, 5, 7-8``."""
    out: list[str] = []
    for s in sorted(seeds):
        if out and s == int(out[-1].rpartition("-")[2]) + 1:
            out[-1] = f"{out[-1].partition('-')[0]}-{s}"
        else:
            out.append(str(s))
    return ", ".join(out)
