#!/usr/bin/env bash
# The embedded benchmark: GRPO on the arithmetic task, across tiny model sizes and seeds, on CPU.
#   ./run_all.sh           two sizes (tiny-500k, tiny-2m) x two seeds, 100 RL steps each
#   ./run_all.sh --quick   one size (tiny-500k) x two seeds, 100 RL steps each (about 7 minutes)
#   ./run_all.sh --methods every registered method once (tiny-500k, seed 0, 100 RL steps; ARCA and a
#                          rank-matched GRPO with LoRA rank 16): does each one train and move pass@1?
# Every run starts from the same warm-started base checkpoint of its size (built once, cached in
# .creditbench/cache), is an MLflow run in ./mlflow.db, and writes results/<sweep>/runs/<run>.json;
# the last step writes results/<sweep>/summary.csv.
set -euo pipefail
cd "$(dirname "$0")"
source bench/bootstrap.sh

case "${1:-}" in
  --methods) SWEEP=methods; SIZES="tiny-500k"; SEEDS="0"; STEPS=100 ;;
  --quick) SWEEP=embedded-quick; SIZES="tiny-500k"; SEEDS="0 1"; STEPS=100 ;;
  "") SWEEP=embedded; SIZES="tiny-500k tiny-2m"; SEEDS="0 1"; STEPS=100 ;;
  *) echo "usage: ./run_all.sh [--quick | --methods]" >&2; exit 2 ;;
esac
export MLFLOW_TRACKING_URI="${MLFLOW_TRACKING_URI:-sqlite:///$PWD/mlflow.db}"
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
start=$(date +%s)

train() {  # train SIZE SEED [extra args...]
  local size=$1 seed=$2; shift 2
  creditbench train --config results/configs/embedded_grpo.yaml --no-progress \
    --model.name "$size" --seed "$seed" --rl.steps "$STEPS" --tracking.sweep "$SWEEP" "$@"
}
LORA=(--model.lora.rank 16 --model.lora.alpha 32 --rl.lr 1e-3)

for size in $SIZES; do
  for seed in $SEEDS; do
    if [ "$SWEEP" = methods ]; then
      # methods that compare adapter-on/off hidden states need LoRA; every other one trains in full
      needs_lora=$(python -c "from bench.registry import METHODS
print(' '.join(n for n in METHODS.names() if 'hidden_residual' in METHODS.get(n)().required))")
      for method in $(creditbench methods | awk '{print $1}'); do
        if [[ " $needs_lora " == *" $method "* ]]; then
          train "$size" "$seed" --method.name "$method" "${LORA[@]}"
        else
          train "$size" "$seed" --method.name "$method"
        fi
      done
      train "$size" "$seed" --method.name grpo "${LORA[@]}" --tracking.run_name "grpo-lora16-arithmetic-$size-seed$seed"
    else
      train "$size" "$seed"
    fi
  done
done

creditbench summarize --sweep "$SWEEP"
echo
echo "Done in $(( $(date +%s) - start )) s."
echo "Summary: results/$SWEEP/summary.csv (and summary.md); per-run JSON in results/$SWEEP/runs/."
echo "MLflow: $MLFLOW_TRACKING_URI  ->  run 'creditbench ui' and open http://127.0.0.1:5000"
