"""methods.align: the LCS ("diff") and prefix/suffix alignments that pick a trajectory's nearest
sibling, their pairwise similarity, and the Levenshtein alignment of IBPO's mask variant."""

import functools
import random

import pytest
import torch
from test_ibpo import batch_of

from methods.align import (
    align_to_nearest,
    lcs_lengths,
    lcs_nearest,
    levenshtein,
    levenshtein_kept,
    sibling_similarity,
)


def test_nearest_sibling_and_ties():
    """y- = [1,2,3,4,5,6] (row 0). Correct rows 1..3 have LCS 3, 5, 5 with it, so similarity
    2*LCS/12 = 0.5, 0.83, 0.83: rows 2 and 3 tie and the lower index (2) wins. Under
    prefix_suffix the common prefix+suffix is 3, 5 and 5 as well. Row 4 is in another group."""
    seqs = [[1, 2, 3, 4, 5, 6], [1, 2, 3, 0, 0, 0], [1, 2, 3, 4, 5, 0], [1, 2, 3, 4, 5, 7], [1, 2, 3, 4, 5, 6, 8]]
    b = batch_of(seqs, [0.0, 1.0, 1.0, 1.0, 1.0], groups=[0, 0, 0, 0, 1])
    for alignment in ("diff", "prefix_suffix"):
        nearest, edited = align_to_nearest(b.completion_ids, b.lengths, b.group_ids, ~b.correct, b.correct, alignment)
        assert nearest.tolist() == [2, -1, -1, -1, -1]
        assert edited[0].tolist() == [False] * 5 + [True, False]  # the 7th column is padding
        assert edited[1:].all()
    assert lcs_nearest([1, 2, 3], [[9], [1, 9, 3], [1, 2, 3, 4]]) == (2, [True, True, True])


def lcs_table(a, b):
    L = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            L[i][j] = L[i - 1][j - 1] + 1 if a[i - 1] == b[j - 1] else max(L[i - 1][j], L[i][j - 1])
    return L


def test_bit_parallel_lcs_matches_the_dp_table():
    """Against the textbook O(|a||b|) table: the nearest reference maximises 2 LCS / (|a| + |b|)
    (first on ties), the matched tokens number LCS(a, ref) and are a subsequence of ref."""
    rng = random.Random(0)
    for _ in range(400):
        vocab = rng.randint(1, 5)
        a = [rng.randrange(vocab) for _ in range(rng.randint(0, 14))]
        refs = [[rng.randrange(vocab) for _ in range(rng.randint(0, 14))] for _ in range(rng.randint(1, 4))]
        k, matched = lcs_nearest(a, refs)
        lcs = [lcs_table(a, r)[len(a)][len(r)] for r in refs]
        sims = [2 * n / max(len(a) + len(r), 1) for n, r in zip(lcs, refs)]
        assert k == sims.index(max(sims))
        assert sum(matched) == lcs[k]
        rest = iter(refs[k])
        assert all(tok in rest for tok, m in zip(a, matched) if m)


def test_prefix_suffix_loop_vs_vectorised():
    """Straight from the definition: per wrong row, over the correct rows of its group, p = common
    prefix, s = common suffix of what is left, similarity 2 (p + s) / (|y-| + |y+|); the edited
    span of the nearest is [p, |y-| - s)."""
    g = torch.Generator().manual_seed(0)
    for _ in range(20):
        B, T, G = 12, int(torch.randint(1, 9, (), generator=g)), 4
        lengths = torch.randint(1, T + 1, (B,), generator=g)
        ids = torch.randint(0, 3, (B, T), generator=g)
        groups = torch.arange(B // G).repeat_interleave(G)
        correct = torch.randint(0, 2, (B,), generator=g).bool()
        nearest, edited = align_to_nearest(ids, lengths, groups, ~correct, correct, "prefix_suffix")
        for i in range(B):
            a = ids[i, : lengths[i]].tolist()
            best, best_sim, span = -1, -1.0, None
            for j in range(B):
                if correct[i] or not correct[j] or groups[j] != groups[i]:
                    continue
                r = ids[j, : lengths[j]].tolist()
                p = 0
                while p < min(len(a), len(r)) and a[p] == r[p]:
                    p += 1
                s = 0
                while s < min(len(a), len(r)) - p and a[-1 - s] == r[-1 - s]:
                    s += 1
                sim = 2 * (p + s) / (len(a) + len(r))
                if span is None or sim > best_sim:
                    best, best_sim, span = j, sim, (p, len(a) - s)
            assert nearest[i] == best
            want = [True] * T if span is None else [span[0] <= t < span[1] for t in range(T)]
            assert edited[i].tolist() == want


def test_lcs_lengths_and_sibling_similarity_match_the_definitions():
    """lcs_lengths against the DP table; sibling_similarity against a loop over every ordered pair
    of distinct rows of a group with a source first: 2 * matched / (|a| + |b|), matched = LCS
    ("diff") or common prefix + suffix ("prefix_suffix"); -1 everywhere else."""
    rng = random.Random(1)
    for _ in range(100):
        a = [rng.randrange(4) for _ in range(rng.randint(0, 10))]
        refs = [[rng.randrange(4) for _ in range(rng.randint(0, 10))] for _ in range(rng.randint(1, 4))]
        assert lcs_lengths(a, refs) == [lcs_table(a, r)[len(a)][len(r)] for r in refs]
    g = torch.Generator().manual_seed(2)
    for _ in range(10):
        B, T = 8, 7
        lengths = torch.randint(1, T + 1, (B,), generator=g)
        ids = torch.randint(0, 3, (B, T), generator=g)
        groups = torch.arange(2).repeat_interleave(4)
        sources = torch.randint(0, 2, (B,), generator=g).bool()
        for alignment in ("diff", "prefix_suffix"):
            sim = sibling_similarity(ids, lengths, groups, sources, alignment)
            for i in range(B):
                a = ids[i, : lengths[i]].tolist()
                for j in range(B):
                    if i == j or not sources[i] or groups[i] != groups[j]:
                        assert sim[i, j] == -1
                        continue
                    b = ids[j, : lengths[j]].tolist()
                    if alignment == "diff":
                        matched = lcs_table(a, b)[len(a)][len(b)]
                    else:
                        p = next((k for k in range(min(len(a), len(b))) if a[k] != b[k]), min(len(a), len(b)))
                        rest = min(len(a), len(b)) - p
                        matched = p + next((k for k in range(rest) if a[-1 - k] != b[-1 - k]), rest)
                    assert sim[i, j].item() == pytest.approx(2 * matched / (len(a) + len(b)))


def test_levenshtein_hand_worked():
    """kitten -> sitting, distance 3: k->s and e->i substituted, g inserted. i, t, t, n are kept
    (at positions 1, 2, 3, 5 of sitting), so the unchanged set U of kitten is {1, 2, 3, 5} and the
    edited tokens are k (0) and e (4). Empty sides: all insertions / all deletions."""
    dist, kept = levenshtein([ord(c) for c in "kitten"], [ord(c) for c in "sitting"])
    assert (dist, kept) == (3, [-1, 1, 2, 3, -1, 5])
    assert levenshtein([], [1, 2]) == (2, [])
    assert levenshtein([1, 2], []) == (2, [-1, -1])
    assert levenshtein([1, 2, 3], [1, 2, 3]) == (0, [0, 1, 2])


@functools.cache
def brute_distance(a: tuple, b: tuple) -> int:
    """The recursive definition of the edit distance."""
    if not a or not b:
        return len(a) + len(b)
    return min(
        brute_distance(a[1:], b) + 1, brute_distance(a, b[1:]) + 1, brute_distance(a[1:], b[1:]) + (a[0] != b[0])
    )


def test_levenshtein_alignment_is_optimal():
    """Random small pairs: the distance is the recursive definition's, and the kept tokens form an
    alignment of that cost: kept a_i = b_k with k increasing, and between consecutive kept pairs a
    gap of p tokens of a and q of b costs max(p, q) (substitute the shorter side, indel the rest)."""
    rng = random.Random(0)
    for _ in range(500):
        vocab = rng.randint(1, 4)
        a = [rng.randrange(vocab) for _ in range(rng.randint(0, 9))]
        b = [rng.randrange(vocab) for _ in range(rng.randint(0, 9))]
        dist, kept = levenshtein(a, b)
        assert dist == brute_distance(tuple(a), tuple(b))
        pairs = [(i, k) for i, k in enumerate(kept) if k >= 0]
        assert all(a[i] == b[k] for i, k in pairs)
        cost, last = 0, (-1, -1)
        for i, k in [*pairs, (len(a), len(b))]:
            assert i > last[0] and k > last[1]
            cost += max(i - last[0] - 1, k - last[1] - 1)
            last = (i, k)
        assert cost == dist


def test_levenshtein_kept_on_padded_rows():
    """Row 0: [5,6,7,8,9] vs its revision [5,6,1,8,9,4]: 7 -> 1 substituted, 4 inserted, so U =
    positions {0, 1, 3, 4}. Row 1: [3, 3] vs [4]: nothing kept. Padding is never kept."""
    a = torch.tensor([[5, 6, 7, 8, 9], [3, 3, 0, 0, 0]])
    b = torch.tensor([[5, 6, 1, 8, 9, 4], [4, 0, 0, 0, 0, 0]])
    kept = levenshtein_kept(a, torch.tensor([5, 2]), b, torch.tensor([6, 1]))
    assert kept.tolist() == [[True, True, False, True, True], [False] * 5]
