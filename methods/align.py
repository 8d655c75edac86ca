"""Token alignment of a completion with its most similar sibling, for methods that put credit on
the tokens where two trajectories of the same prompt differ (IBPO).

Two alignments, both returning for every token of the source whether it is *edited* (not matched):

- ``diff``: the minimal diff, i.e. a longest common subsequence (LCS), the alignment Unix ``diff``
  and ``git diff`` compute. Tokens of the source outside the LCS are the ones deleted or replaced
  on the way to the reference. The LCS is bit-parallel (Allison & Dix 1986; Crochemore et al.
  2001): the DP row of ``a`` against ``b`` is one Python integer ``V`` with a bit per token of
  ``b`` whose zero bits mark the columns where the LCS length grows,

      U = V & M[a_i];   V <- (V + U) | (V - U)          (M[c]: bits of b equal to c)

  so a token of ``a`` costs a few big-integer operations instead of |b| cell updates. All
  candidate references are packed into one integer (a zero guard bit after each stops the carry
  of ``+``; ``V - U`` never borrows since U is a sub-mask of V), so the nearest one is found in
  a single pass over ``a``. The traceback is O(|a|) (see ``_traceback``).
- ``prefix_suffix``: the span between the longest common prefix and the longest common suffix
  (the "splice at the first divergence" reading); vectorised over all pairs.

"Nearest" is the reference with the highest similarity 2 * matched / (|a| + |b|) (difflib's
``ratio`` formula, with this alignment's matches); ties go to the lowest index.
``sibling_similarity`` gives that similarity for every pair of rows of a group.

Apart from these, ``levenshtein`` is the edit-distance alignment (unit-cost insertion, deletion and
substitution; O(|a||b|), one numpy pass per token of ``a``) of a trajectory with its revision, for
IBPO's mask variant: the tokens it keeps unchanged.
"""

from __future__ import annotations

import typing
from typing import Literal

import numpy as np
import torch
from torch import Tensor

Alignment = Literal["diff", "prefix_suffix"]


class LCSReferences:
    """The candidate references of one group, with bit masks built once for all its sources.

    ``alphabet``: the tokens the sources can contain (lookups of other tokens are all-zero masks,
    so masks are built only for these).
    """

    def __init__(self, refs: list[list[int]], alphabet: np.ndarray):
        self.refs, self.alphabet = refs, alphabet
        self.packed = _bit_masks(refs, alphabet) if len(refs) > 1 else None
        self.single: dict[int, tuple[dict[int, int], list[int], int]] = {}

    def nearest(self, a: list[int]) -> tuple[int, list[bool]]:
        """Index of the reference nearest to ``a`` and, per token of ``a``, whether the LCS
        alignment with it matches that token."""
        k = 0
        if self.packed is not None:  # one packed pass gives the LCS length with every reference
            masks, offsets, full = self.packed
            lcs = _lcs_lengths(_lcs_rows(a, masks, full)[-1], self.refs, offsets)
            sims = [2 * n / max(len(a) + len(r), 1) for n, r in zip(lcs, self.refs)]
            k = max(range(len(sims)), key=lambda i: (sims[i], -i))  # ties: the lowest index
        if k not in self.single:
            self.single[k] = _bit_masks([self.refs[k]], self.alphabet)
        masks, _, full = self.single[k]
        rows = _lcs_rows(a, masks, full, keep=True)
        return k, _traceback(a, self.refs[k], rows, masks)


def lcs_nearest(a: list[int], refs: list[list[int]]) -> tuple[int, list[bool]]:
    """``LCSReferences(refs, tokens of a).nearest(a)``."""
    return LCSReferences(refs, np.unique(np.asarray(a, dtype=np.int64))).nearest(a)


def lcs_lengths(a: list[int], refs: list[list[int]]) -> list[int]:
    """LCS length of ``a`` with each of ``refs``, from one packed bit-parallel pass over ``a``."""
    masks, offsets, full = _bit_masks(refs, np.unique(np.asarray(a, dtype=np.int64)))
    return _lcs_lengths(_lcs_rows(a, masks, full)[-1], refs, offsets)


def _lcs_lengths(V: int, refs: list[list[int]], offsets: list[int]) -> list[int]:
    """The LCS lengths a packed final DP row ``V`` encodes: |ref| minus its set bits in ref's slot."""
    return [len(r) - ((V >> o) & ((1 << len(r)) - 1)).bit_count() for r, o in zip(refs, offsets)]


def _bit_masks(seqs: list[list[int]], alphabet: np.ndarray) -> tuple[dict[int, int], list[int], int]:
    """Pack ``seqs`` into one bit vector: seqs[k] occupies bits [offsets[k], offsets[k] + len),
    then a zero guard bit. Returns ({token c: bits equal to c, for c in alphabet}, offsets,
    all non-guard bits)."""
    lens = np.array([len(s) for s in seqs], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lens + 1)[:-1]])
    tok = np.concatenate([np.asarray(s, dtype=np.int64) for s in seqs])
    pos = np.concatenate([o + np.arange(n) for o, n in zip(offsets, lens)])
    keep = np.isin(tok, alphabet)
    uniq, inv = np.unique(tok[keep], return_inverse=True)
    pos = pos[keep]
    bits = np.zeros((len(uniq), int(lens.sum() + len(seqs)) // 8 + 1), dtype=np.uint8)
    np.bitwise_or.at(bits, (inv, pos >> 3), (1 << (pos & 7)).astype(np.uint8))
    masks = {t: int.from_bytes(row.tobytes(), "little") for t, row in zip(uniq.tolist(), bits)}
    full = sum(((1 << n) - 1) << o for n, o in zip(lens.tolist(), offsets.tolist()))
    return masks, offsets.tolist(), full


def _lcs_rows(a: list[int], masks: dict[int, int], full: int, keep: bool = False) -> list[int]:
    """The bit-parallel DP rows of ``a`` against the packed references: all of them (``keep``,
    rows[i] after a[:i]) or only the last."""
    V, rows = full, [full]
    for tok in a:
        U = V & masks.get(tok, 0)
        V = ((V + U) | (V - U)) & full  # & full clears the guard bits the carries reached
        if keep:
            rows.append(V)
    return rows if keep else [V]


def _traceback(a: list[int], b: list[int], rows: list[int], masks: dict[int, int]) -> list[bool]:
    """Walk the LCS table L of a single reference back from (|a|, |b|), reading L[i][j] = j -
    popcount(rows[i] below bit j). At (i, j) with value c: equal tokens are matched; else if
    L[i-1][j] == c, a[i-1] is not needed (edited); else a[i-1] is matched to its last occurrence
    in b[:j-1] (L[i][.] stays c back to it, since L[i-1][.] <= c - 1 there). Each step consumes
    one token of ``a``, so the walk is O(|a|) big-integer operations."""
    matched = [False] * len(a)
    i, j = len(a), len(b)
    c = j - (rows[i] & ((1 << j) - 1)).bit_count()
    while i > 0 and j > 0 and c > 0:
        tok = a[i - 1]
        if tok != b[j - 1]:
            if j - (rows[i - 1] & ((1 << j) - 1)).bit_count() == c:
                i -= 1
                continue
            j = (masks[tok] & ((1 << (j - 1)) - 1)).bit_length()
        matched[i - 1] = True
        i, j, c = i - 1, j - 1, c - 1
    return matched


def common_prefix_suffix(a: Tensor, len_a: Tensor, b: Tensor, len_b: Tensor) -> tuple[Tensor, Tensor]:
    """Longest common prefix p and suffix s of the valid tokens of each pair, with p + s <=
    min(len_a, len_b): a, b [P, T] right-padded ids, len_a, len_b [P] -> ([P], [P])."""
    short = torch.minimum(len_a, len_b)  # [P]
    k = torch.arange(a.shape[1], device=a.device)  # [T]
    same = (a == b) & (k < short[:, None])  # [P, T]
    p = same.long().cumprod(-1).sum(-1)  # [P]
    ia = (len_a[:, None] - 1 - k).clamp(min=0)  # [P, T]: k-th token from the end
    ib = (len_b[:, None] - 1 - k).clamp(min=0)
    same_end = (a.gather(1, ia) == b.gather(1, ib)) & (k < (short - p)[:, None])  # [P, T]
    return p, same_end.long().cumprod(-1).sum(-1)


def align_to_nearest(
    ids: Tensor, lengths: Tensor, group_ids: Tensor, sources: Tensor, references: Tensor, alignment: Alignment
) -> tuple[Tensor, Tensor]:
    """For every source row with at least one reference row in its group, pick the nearest
    reference and mark the source's edited tokens.

    ids [B, T], lengths [B], group_ids [B], sources/references [B] bool ->
    (nearest [B] long, -1 where there is none; edited [B, T] bool, all True on rows without one).
    """
    B, T = ids.shape
    nearest = torch.full((B,), -1, dtype=torch.long, device=ids.device)
    edited = torch.ones(B, T, dtype=torch.bool, device=ids.device)
    pairs = (group_ids[:, None] == group_ids[None, :]) & sources[:, None] & references[None, :]  # [B, B]
    if not pairs.any():
        return nearest, edited
    if alignment == "prefix_suffix":
        src, ref = pairs.nonzero(as_tuple=True)  # [P] each, sorted by (src, ref)
        p, s = common_prefix_suffix(ids[src], lengths[src], ids[ref], lengths[ref])
        sim = torch.full((B, B), -1.0, device=ids.device)
        sim[src, ref] = 2 * (p + s).float() / (lengths[src] + lengths[ref]).clamp(min=1).float()
        has = pairs.any(-1)  # [B]
        nearest[has] = sim[has].argmax(-1)  # the first maximum: ties go to the lowest index
        chosen = (nearest[src] == ref).nonzero(as_tuple=True)[0]  # one pair per source row
        t = torch.arange(T, device=ids.device)
        start, end = p[chosen, None], (lengths[src] - s)[chosen, None]
        edited[src[chosen]] = (t >= start) & (t < end)
        return nearest, edited
    if alignment != "diff":
        raise ValueError(f"unknown alignment {alignment!r}; valid: {', '.join(typing.get_args(Alignment))}")
    # The LCS runs on Python integers: bring the rows involved to the CPU once.
    cpu_ids, cpu_len, cpu_pairs, cpu_groups = ids.cpu(), lengths.tolist(), pairs.cpu(), group_ids.cpu()
    nearest, edited = nearest.cpu(), edited.cpu()
    has_ref = cpu_pairs.any(-1)  # [B]
    rows = (has_ref | cpu_pairs.any(0)).nonzero().flatten().tolist()
    seqs = {i: cpu_ids[i, : cpu_len[i]].tolist() for i in rows}
    for g in cpu_groups[has_ref].unique().tolist():
        src = (has_ref & (cpu_groups == g)).nonzero().flatten().tolist()
        refs = cpu_pairs[src[0]].nonzero().flatten().tolist()  # the same for every source of the group
        alphabet = np.unique(np.concatenate([np.asarray(seqs[i], dtype=np.int64) for i in src]))
        group = LCSReferences([seqs[r] for r in refs], alphabet)
        for i in src:
            k, matched = group.nearest(seqs[i])
            nearest[i] = refs[k]
            edited[i] = False
            edited[i, : len(matched)] = ~torch.tensor(matched, dtype=torch.bool)
    return nearest.to(ids.device), edited.to(ids.device)


def sibling_similarity(
    ids: Tensor, lengths: Tensor, group_ids: Tensor, sources: Tensor, alignment: Alignment
) -> Tensor:  # [B, B]
    """2 * matched / (|a| + |b|) of every source row a with every other row b of its group under
    ``alignment`` (the similarity ``align_to_nearest`` maximises); -1 for the row itself, rows of
    other groups and rows that are not sources. ids [B, T], lengths/group_ids [B], sources [B] bool."""
    B = ids.shape[0]
    pairs = (group_ids[:, None] == group_ids[None, :]) & sources[:, None]  # [B, B]
    pairs &= ~torch.eye(B, dtype=torch.bool, device=ids.device)
    sim = torch.full((B, B), -1.0, device=ids.device)
    src, ref = pairs.nonzero(as_tuple=True)  # [P] each, sorted by (src, ref)
    if len(src) == 0:
        return sim
    if alignment == "prefix_suffix":
        p, s = common_prefix_suffix(ids[src], lengths[src], ids[ref], lengths[ref])
        matched = p + s  # [P]
    elif alignment == "diff":
        seqs = [row[:n].tolist() for row, n in zip(ids.cpu(), lengths.tolist())]
        matched_list: list[int] = []
        for i in src.unique_consecutive().tolist():
            matched_list += lcs_lengths(seqs[i], [seqs[j] for j in pairs[i].nonzero().flatten().tolist()])
        matched = torch.tensor(matched_list, device=ids.device)
    else:
        raise ValueError(f"unknown alignment {alignment!r}; valid: {', '.join(typing.get_args(Alignment))}")
    sim[src, ref] = 2 * matched.float() / (lengths[src] + lengths[ref]).clamp(min=1).float()
    return sim


def levenshtein(a: list[int], b: list[int]) -> tuple[int, list[int]]:
    """Edit distance of ``a`` and ``b`` (unit-cost insertion, deletion, substitution) and, per
    token of ``a``, the position in ``b`` an optimal alignment keeps it at (-1: substituted or
    deleted).

    The DP table D[i, j] (distance of a[:i] and b[:j]) is filled a row at a time in numpy: with
    E[j] = min(D[i-1, j] + 1, D[i-1, j-1] + [a_i != b_j]) and E[0] = i, the insertion chain
    D[i, j] = min(E[j], D[i, j-1] + 1) unrolls to  D[i, j] = j + min_{k <= j} (E[k] - k),  a
    cumulative minimum. The traceback from (|a|, |b|) keeps equal tokens (then D[i, j] = D[i-1, j-1],
    so keeping them is optimal), else prefers a substitution, then a deletion from ``a``, then an
    insertion (which optimal alignment is reported when several are)."""
    x, y = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
    j = np.arange(len(y) + 1)
    dtype = np.int16 if max(len(x), len(y)) < 2**15 else np.int32  # distances are <= max(|a|, |b|)
    D = np.empty((len(x) + 1, len(y) + 1), dtype=dtype)
    D[0] = j
    for i in range(1, len(x) + 1):
        E = np.empty(len(y) + 1, dtype=dtype)
        E[0] = i
        E[1:] = np.minimum(D[i - 1, 1:] + 1, D[i - 1, :-1] + (x[i - 1] != y))
        D[i] = np.minimum.accumulate(E - j) + j
    kept = [-1] * len(x)
    i, k = len(x), len(y)
    while i > 0 and k > 0:
        if x[i - 1] == y[k - 1]:
            kept[i - 1] = k - 1
            i, k = i - 1, k - 1
        elif D[i, k] == D[i - 1, k - 1] + 1:  # substitution
            i, k = i - 1, k - 1
        elif D[i, k] == D[i - 1, k] + 1:  # deletion of a[i-1]
            i -= 1
        else:  # insertion of b[k-1]
            k -= 1
    return int(D[-1, -1]), kept


def levenshtein_kept(a: Tensor, len_a: Tensor, b: Tensor, len_b: Tensor) -> Tensor:  # [P, T_a] bool
    """Per token of each row of ``a`` (right-padded ids [P, T_a], lengths [P]), whether the
    Levenshtein alignment with the same row of ``b`` ([P, T_b], [P]) keeps it unchanged (the set U
    of IBPO's mask variant); False on padding."""
    out = torch.zeros(a.shape, dtype=torch.bool)
    for r, (x, n, y, m) in enumerate(zip(a.cpu(), len_a.tolist(), b.cpu(), len_b.tolist())):
        _, kept = levenshtein(x[:n].tolist(), y[:m].tolist())
        out[r, :n] = torch.tensor(kept, dtype=torch.long) >= 0
    return out.to(a.device)
