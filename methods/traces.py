"""Eligibility-trace numerics shared by GRPO-lambda, P-trace and S-trace, in O(B*T) memory.

A trace turns the token log-ratios l_k = log pi(y_k) - log pi_old(y_k) of one completion into
weighted sums z_t = sum_{k<=t} W_{t,k} l_k. Writing W as a [T, T] matrix costs 1 GiB per
sequence at T = 16k, so every weight pattern used here is decomposed into a discounted cumulative
sum (chunked, below), plain prefix sums and gathers at per-position indices. Positions are
0-indexed within the completion (GRPO-lambda's "both" weights can count them from 1, ``origin``);
callers multiply l by the completion mask first, so padding contributes nothing.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor

Style = Literal["recent", "both"]  # GRPO-lambda's trace weights (``trace_log_ratio``)
Distance = Literal["raw", "selected"]  # how far back a selective trace counts (``history_log_ratio``)


def _powers(decay: float, exponents: Tensor, like: Tensor) -> Tensor:
    """decay ** exponents for integer exponents >= 0 (0 ** 0 = 1), in float64 then cast: the
    exponent is never negative, so values only underflow towards 0, never overflow."""
    base = torch.tensor(decay, dtype=torch.float64, device=like.device)
    return (base ** exponents.to(torch.float64)).to(like.dtype)


def _decay_matrix(n: int, decay: float, step: int, like: Tensor) -> Tensor:  # [n, n]
    """M[i, j] = decay ** (step * (i - j)) for j <= i, else 0."""
    i = torch.arange(n, device=like.device)
    d = (i[:, None] - i[None, :]) * step
    zero = torch.zeros((), dtype=like.dtype, device=like.device)
    return torch.where(d >= 0, _powers(decay, d.clamp(min=0), like), zero)


def discounted_cumsum(x: Tensor, decay: float) -> Tensor:  # [..., T]
    """y_t = sum_{k<=t} decay^(t-k) x_k along the last dim, i.e. y_t = x_t + decay * y_{t-1}.

    Chunks of C = ceil(sqrt(T)): inside a chunk a [C, C] lower-triangular decay matrix, and the
    running value carried from chunk to chunk by an [n, n] matrix with n = ceil(T / C) -- O(T)
    extra memory, no Python loop, differentiable, and stable for any decay in [0, 1].
    """
    T = x.shape[-1]
    if T == 0:
        return x
    C = math.isqrt(T - 1) + 1
    n = -(-T // C)
    chunks = F.pad(x, (0, n * C - T)).unflatten(-1, (n, C))  # [..., n, C]
    y = chunks @ _decay_matrix(C, decay, 1, x).T  # [..., n, C]: sums within each chunk
    if n > 1:
        ends = y[..., -1] @ _decay_matrix(n, decay, C, x).T  # [..., n]: full y at each chunk's end
        before = F.pad(ends[..., :-1], (1, 0))  # [..., n]: full y just before each chunk
        y = y + before[..., None] * _powers(decay, torch.arange(1, C + 1, device=x.device), x)
    return y.flatten(-2)[..., :T]


def _at(v: Tensor, index: Tensor) -> Tensor:  # [B, T]
    """v[:, index - 1] for index in [0, T], with v[:, -1] read as 0 (an empty prefix)."""
    return F.pad(v, (1, 0)).gather(-1, index.expand(v.shape[0], -1))


def floor_horizon(decay: float, floor: float, T: int) -> int:
    """The largest distance d with decay^d >= floor (capped at T, where the floor never binds)."""
    if floor <= 0 or decay >= 1:
        return T
    if decay == 0:
        return 0
    K = math.floor(math.log(floor) / math.log(decay))
    K += decay ** (K + 1) >= floor  # undo rounding either way at an exact power
    K -= decay**K < floor
    return min(max(K, 0), T)


def trace_log_ratio(l: Tensor, decay: float, style: Style = "recent", floor: float = 0.0, origin: int = 0) -> Tensor:
    """GRPO-lambda's traced log-ratio z_t = sum_{k<=t} W_{t,k} l_k: [B, T] -> [B, T], with

        "recent": W_{t,k} = a^(t-k)        "both": W_{t,k} = max(a^(t-k), a^(k+o))      (a = decay)

    and optionally W <- max(W, floor); o = ``origin`` is the index of the first token in the
    paper's position count (0 or 1: with 1 the first token's early weight is a, not 1). For "both"
    the max switches at k = (t - o)/2 (early tokens, k <= h_t = floor((t - o)/2), take a^(k+o));
    a^d >= floor exactly for d <= K. So the tokens up to t split into an early run [0, e] weighted
    a^(k+o) (e = min(h_t, K - o); empty for "recent"), a recent run [j, t] weighted a^(t-k)
    (j = max(h_t + 1, t - K)) and a floored middle (e, j) weighted floor.
    """
    T = l.shape[-1]
    t = torch.arange(T, device=l.device)
    K = floor_horizon(decay, floor, T)
    h = torch.div(t - origin, 2, rounding_mode="floor") if style == "both" else torch.full_like(t, -1)
    e, j = h.clamp(max=K - origin), torch.maximum(h + 1, t - K)  # [T]
    y = discounted_cumsum(l, decay)  # [B, T]
    z = y - _powers(decay, t - j + 1, l) * _at(y, j)  # recent run: y_t - a^(t-j+1) y_{j-1}
    if style == "both":
        early = torch.cumsum(l * _powers(decay, t + origin, l), -1)  # [B, T]: sum_{k<=s} a^(k+o) l_k
        z = z + _at(early, e + 1)
    if K < T:
        prefix = torch.cumsum(l, -1)  # [B, T]
        z = z + floor * (_at(prefix, j) - _at(prefix, e + 1))
    return z


def history_log_ratio(l: Tensor, decay: float, select: Tensor | None = None, distance: Distance = "raw") -> Tensor:
    """P-/S-trace history sum_{k<t, k in S} decay^d(t,k) l_k: [B, T] -> [B, T], strictly before t.

    S is every token (``select`` None) or the tokens where ``select`` [B, T] is true. The distance
    is d = t - k ("raw") or the number of selected tokens in [k, t) ("selected": the most recent
    selected token before t is at distance 1). "selected" compacts the selected tokens to the
    front of the row (a stable sort), runs the discounted sum there and reads it back at the
    number of selected tokens before t.
    """
    x = l if select is None else l * select.to(l.dtype)
    if distance == "raw" or select is None:
        return decay * F.pad(discounted_cumsum(x, decay)[..., :-1], (1, 0))  # decay * y_{t-1}
    sel = select.long()
    order = torch.sort(1 - sel, dim=-1, stable=True).indices  # selected positions first, in order
    compact = discounted_cumsum(x.gather(-1, order), decay)  # [B, T]; unselected entries are 0
    before = sel.cumsum(-1) - sel  # [B, T]: selected tokens before t
    return decay * F.pad(compact, (1, 0)).gather(-1, before)  # decay * y'_{before-1}, 0 if none
