#!/usr/bin/env bash
# Regenerate the committed results that a change to the numbers moves, each from scratch and in the order
# their inputs need: the sweeps (./run_all.sh each; the flagship's tuning sweep with it), the methods'
# credit table, the credit probes (which read the sweeps' reports), the design studies that read the
# probes and the sweeps, and the tables README.md and docs/results.md quote. Then `bash tests/run.sh`
# says what else still quotes an old number. About two hours on 2 cores, and the credit tables' judges
# besides (`creditbench table --credit --run --dry_run` prints their cost).
#   tools/regenerate.sh             everything
#   tools/regenerate.sh probes      from the probes on (the sweeps as committed)
#   tools/regenerate.sh tables      only the studies and the tables
# JOBS=N workers (default 2). Each step removes its old output first, so nothing stale is left beside
# what it writes (a sweep in rounds may stop at fewer seeds than before).
set -euo pipefail
cd "$(dirname "$0")/.."
FROM=${1:-sweeps}
case "$FROM" in
  sweeps|probes|tables) ;;
  *) echo "tools/regenerate.sh: unknown step '$FROM' (valid: sweeps, probes, tables)" >&2; exit 2 ;;
esac
source bench/bootstrap.sh
export JOBS=${JOBS:-2} HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
step() { echo; echo "== $(date -u +%H:%M:%S) $*"; }

if [ "$FROM" = sweeps ]; then
  # name -> spec; the quick sweep first (CI reruns it), the flagship before the sweeps that cite it
  for pair in embedded-quick:results/sweeps/embedded-quick.yaml embedded:results/sweeps/embedded.yaml \
              embedded-control:results/sweeps/embedded-control.yaml methods:results/sweeps/methods.yaml \
              paper-arca-embedded:results/papers/arca_embedded.sweep.yaml; do
    name=${pair%%:*} spec=${pair#*:}
    step "sweep $name ($spec)"
    rm -rf "results/$name" "results/$name-tune"
    ./run_all.sh "$spec"
  done
  step "credit maps of the methods sweep"
  creditbench credit-maps --sweep methods
fi

if [ "$FROM" != tables ]; then
  step "credit probe: the flagship"
  rm -rf results/probes/embedded
  creditbench credit-probe results/sweeps/embedded.yaml --jobs "$JOBS"
  step "credit probe: the arithmetic control"
  rm -rf results/probes/embedded-control
  creditbench credit-probe results/sweeps/embedded-control.yaml --cap 6 --jobs "$JOBS"
  step "credit probe: its validation (its own seed and trajectories)"
  rm -rf results/probes/embedded-validation
  creditbench credit-probe results/sweeps/embedded.yaml --placebo --segment_steps 4 --segment_batches 2 \
    --batches 4 --first 4 --cap 4 --seed 1 --reference_seeds 50,51,52,53 \
    --out results/probes/embedded-validation --jobs "$JOBS"
  step "credit probe: the credit ceiling (each twin's oracle, four batches a checkpoint)"
  rm -rf results/probes/embedded-oracle
  creditbench credit-probe results/sweeps/embedded.yaml --oracle --batches 4 --out results/probes/embedded-oracle \
    --jobs "$JOBS"
fi

step "the sweeps' reports again: run_all.sh's wall time and the probes' sections, written after them"
for name in embedded-quick embedded embedded-control methods paper-arca-embedded; do
  creditbench summarize --sweep "$name" > /dev/null
done
step "design studies that read the committed probes and sweeps"
python -m bench.studies.probe_design --probe results/probes/embedded
python -m bench.studies.sequential_design --sims 2000
if [ "$FROM" != tables ]; then
  step "the credit table's judges at tiny-500k: each row's tuning and rounds, then its probe at the tuned rate"
  rm -rf results/probes/judge-* results/judge-*
  creditbench table --credit --run --upto tiny-500k --jobs "$JOBS" > /dev/null
  step "the control table's judges per update (arithmetic, tiny-500k)"
  creditbench table --credit --definition results/credit/control.yaml --run --jobs "$JOBS" > /dev/null
  step "the sizes' own rates (results/rate-*), then the credit table's probes at the larger sizes at them"
  for spec in results/sweeps/rate-*.yaml; do rm -rf "results/$(basename "$spec" .yaml)"{,-tune}; creditbench sweep "$spec" --jobs "$JOBS" > /dev/null; done
  # GRPO-lambda's tiny-2m probe was made before the larger sizes stopped at resolution: its rounds ran to the cap
  creditbench judge grpo_lambda --task chain --sizes tiny-500k,tiny-2m --controls twin --oracle --per_update_only \
    --rates '{tiny-2m: {lr: 5.0e-05, lrs: [2.5e-05, 5.0e-05]}}' --jobs "$JOBS" > /dev/null
  creditbench table --credit --run --per_update_only --jobs "$JOBS" > /dev/null
  step "paired segments at tiny-2m (GRPO-lambda against its twin, 8 updates from each checkpoint)"
  rm -rf results/probes/segments-tiny-2m
  creditbench credit-probe results/sweeps/judge-grpo_lambda.yaml --model tiny-2m --lrs 5e-5 --trajectory_lr 5e-5 \
    --batches 2 --segment_steps 8 --segment_batches 2 --first 4 --cap 4 --out results/probes/segments-tiny-2m \
    --jobs "$JOBS"
fi
step "the segment design study (segments against one update, from the probes' own segments)"
python -m bench.studies.segment_design results/probes/embedded-validation results/probes/segments-tiny-2m \
  --updates results/probes/embedded results/probes/judge-grpo_lambda
step "the credit table (from the probes' and the sweeps' reports) and the tables of README.md and docs/"
creditbench table --credit > /dev/null
creditbench table --credit --definition results/credit/control.yaml > /dev/null
creditbench docs-tables
echo
echo "Done. Now: bash tests/run.sh (a test names each number a page still quotes from before)."
