"""Credit measured per update: paired updates from the same weights, the same optimizer state and the
same rollout batch, scored on the exact objective J (:mod:`bench.engine.exact`).

A credit method and its credit-off twin differ in one thing, the credit applied to the same samples.
End to end that difference drowns in trajectory noise (two runs decorrelate within a few steps); here
it is measured with the trajectory removed by construction:

    for each checkpoint c along a reference trajectory (its weights theta_c and AdamW state),
      for each of B rollout batches b drawn from pi_theta_c (shared by every arm):
        for each arm a (a label of the sweep at a learning rate):
          theta_a = one RL step's update of theta_c by a's method on exactly batch b
                    (same samples, rewards, behaviour log-probs, minibatch order, micro-batches)
          dJ_a(c, b) = J(theta_a) - J(theta_c)
      the credit's effect per update: dJ_method(c, b) - dJ_twin(c, b), paired over (c, b)

plus, on the same batches, how each arm's parameter change aligns with grad J (the first-order
improvement grad J . d theta and their cosine), and paired segments of K updates with common random
numbers (:mod:`bench.paired.segment`). ``creditbench credit-probe SPEC`` runs it on a sweep spec's
labels (:mod:`bench.paired.probe`); the statistics are :mod:`bench.report.per_update`.
"""
