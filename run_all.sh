#!/usr/bin/env bash
# The embedded benchmark on CPU: does a method's credit assignment help? S-trace, GRPO-lambda and the 80/20
# rule each against its credit-off twin (the same recipe with uniform credit; the two selection methods also
# against their placebo), and GRPO, on a credit-sensitive task (chain), tiny-500k, at an exact budget of
# training samples; each pair at one learning rate tuned first (on other seeds and held-out train problems),
# then seeds in rounds until each credit comparison is decided (better, worse or equivalent within 3 points;
# 6 to 48 seeds); then the report: the decisions, each comparison at every rate, the secondary family.
#   ./run_all.sh           results/sweeps/embedded.yaml: 112 tuning runs + the rounds, under an hour on 2 cores
#   ./run_all.sh --quick   results/sweeps/embedded-quick.yaml: GRPO and S-trace on chain, 3 seeds (minutes)
#   ./run_all.sh SPEC.yaml any sweep spec (results/sweeps/embedded-long.yaml: every method, tuned lr; days)
# JOBS=N runs N at a time (default 2 worker processes, one core each); MLFLOW_TRACKING_URI names
# another store (default ./mlflow.db). Every run starts from the warm-started base checkpoint of its
# task and size (built once, cached in .creditbench/cache), is an MLflow run under the sweep's parent
# run, and writes results/<sweep>/runs/<run>.json with its per-problem counts. A stopped sweep
# started again skips the finished runs. The report: results/<sweep>/summary.md (means and intervals
# over seeds, the comparisons with Holm and TOST, the minimum detectable difference, blame alignment),
# summary.csv, report.json and the figures (*.png). Step by step: docs/recipes/run-the-benchmark.md.
set -euo pipefail
cd "$(dirname "$0")"

case "${1:-}" in
  --quick) SPEC=results/sweeps/embedded-quick.yaml ;;
  "") SPEC=results/sweeps/embedded.yaml ;;
  -h|--help) sed -n '2,16p' "$0" | cut -c3-; exit 0 ;;  # before the environment: help installs nothing
  *) SPEC=$1 ;;
esac
source bench/bootstrap.sh
JOBS=${JOBS:-2}
export MLFLOW_TRACKING_URI="${MLFLOW_TRACKING_URI:-sqlite:///$PWD/mlflow.db}"
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
start=$(date +%s)

creditbench sweep "$SPEC" --jobs "$JOBS"

SWEEP=$(python -c "import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))['name'])" "$SPEC")
wall=$(( $(date +%s) - start ))
python - "$SWEEP" "$wall" "$JOBS" <<'PY'
import json, os, platform, sys
sweep, wall, jobs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
info = {"sweep": sweep, "wall_s": wall, "jobs": jobs, "cpus": os.cpu_count(), "machine": platform.processor() or platform.machine(),
        "python": platform.python_version()}
with open(f"results/{sweep}/run_all.json", "w") as fh:
    json.dump(info, fh, indent=1)
PY
echo
echo "Done in ${wall} s."
echo "Report: results/$SWEEP/summary.md (and summary.csv, report.json, *.png); per-run JSON in results/$SWEEP/runs/."
echo "MLflow: $MLFLOW_TRACKING_URI  ->  run 'creditbench ui' and open http://127.0.0.1:5000"
