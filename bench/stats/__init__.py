"""Pure numerics of the reports, each written once (numpy and scipy only; nothing of bench but its errors):

- :mod:`bench.stats.paired`: the summary of paired differences (mean, SE, df, Student-t interval, p),
  plain or nested (batches within checkpoints within trajectories), and the minimum number of seeds
  for a test.
- :mod:`bench.stats.intervals`: intervals over seeds (Student-t, arcsine-root for [0, 1] metrics).
- :mod:`bench.stats.family`: multiplicity adjustments (Holm, Benjamini-Hochberg).
- :mod:`bench.stats.power`: the minimum detectable difference.
- :mod:`bench.stats.ratio`: intervals for a ratio of paired means (Fieller, delta method).
- :mod:`bench.stats.spending`: group-sequential alpha spending and its boundaries.
- :mod:`bench.stats.metrics`: a learning curve's efficiency and per-problem pass@k.
- :mod:`bench.stats.verdict`: the verdict of a comparison, a value with its rule.
- :mod:`bench.stats.format`: how intervals, signed values and p-values are written.
"""
