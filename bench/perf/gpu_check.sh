#!/usr/bin/env bash
# The GPU checks in one pass, for a CUDA machine that has torch, lightning and transformers but no network:
#
#   1. the GPU tests (pytest -m gpu)
#   2. one RL step broken down by phase against its floor, tiny sizes, bf16 autocast and fp32 (bench.perf.step)
#   3. rollout and update throughput, update MFU and peak memory against the plan at Qwen3-1.7B size (bench.perf.scale)
#   4. creditbench against TRL's GRPOTrainer at matched settings on the same GPU (bench.perf.trl)
#   5. a short bf16 GRPO run on chain through `creditbench train`: reward, NaNs, time per step
#
#   OUT=/some/empty/dir bash bench/perf/gpu_check.sh
#
# Run from anywhere; it works in the repository root, which it puts on PYTHONPATH (the project need not be
# installed). Wheels of the packages the machine lacks (mlflow-skinny, jsonargparse, math-verify, datasets,
# trl and their dependencies) may lie in .whl/ of the repository root: they are installed first into a scratch
# directory, without the network, and put on PYTHONPATH after the repository.
#
# Each check has its own time limit and all share one budget (GPU_CHECK_BUDGET seconds, default 420): a
# check that fails or runs out of time does not stop the next, and one that no longer fits is skipped. What
# comes back lands flat in $OUT (default results/gpu_check): gpu_check.log (everything printed),
# nvidia-smi.txt, summary.md (each check's status and time, then every report), results.json (every
# report's data) and raw.tar.gz (the reports, each check's log and the MLflow store).
#
# Without a CUDA device it says so and stops. GPU_CHECK_DEVICE=cpu runs the same commands at smoke sizes on
# the CPU instead, to try the script itself (its numbers say nothing about a GPU).
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT="$PWD"
OUT="${OUT:-$ROOT/results/gpu_check}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
BUDGET="${GPU_CHECK_BUDGET:-420}"
DEVICE="${GPU_CHECK_DEVICE:-cuda}"
PY="${PYTHON:-python3}"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/gpu-check.XXXXXX")"
RES="$WORK/results"
mkdir -p "$RES/logs"
exec > >(tee -a "$OUT/gpu_check.log") 2>&1
TEE=$!
finish() {
  rm -rf "$WORK"
  exec >&- 2>&-
  wait "$TEE"  # the log's last lines
}
trap finish EXIT
START=$SECONDS
say() { echo "[gpu_check $((SECONDS - START))s] $*"; }
CHECKS="pytest_gpu step_bf16 step_fp32 scale trl train_chain"
for name in ${GPU_CHECK_ONLY:-}; do
  [[ " $CHECKS " == *" $name "* ]] || { say "GPU_CHECK_ONLY: unknown check '$name'; valid: $CHECKS"; exit 2; }
done

export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
if compgen -G ".whl/*.whl" > /dev/null; then
  say "installing $(ls .whl/*.whl | wc -l) wheels from .whl/ into $WORK/site"
  if "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$WORK/site" .whl/*.whl; then
    export PYTHONPATH="$ROOT:$WORK/site${PYTHONPATH#"$ROOT"}"
  elif (for w in .whl/*.whl; do "$PY" -m zipfile -e "$w" "$WORK/site" || exit 1; done); then  # no pip: unpacked
    say "pip could not install the wheels: unpacked them into $WORK/site instead"
    export PYTHONPATH="$ROOT:$WORK/site${PYTHONPATH#"$ROOT"}"
  else
    say "the wheels did not install: the checks that need them will fail"
  fi
fi
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 HF_HUB_DISABLE_PROGRESS_BARS=1 TOKENIZERS_PARALLELISM=false
export MPLBACKEND=Agg PYTHONUNBUFFERED=1
export MLFLOW_TRACKING_URI="sqlite:///$WORK/mlflow.db"
export CREDITBENCH_CACHE="$WORK/cache" CREDITBENCH_CHECKPOINTS="$WORK/checkpoints"

{ nvidia-smi; nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,power.limit,driver_version --format=csv; } \
  > "$OUT/nvidia-smi.txt" 2>&1 || echo "nvidia-smi: not available" >> "$OUT/nvidia-smi.txt"
"$PY" - <<'EOF'
import importlib.metadata, platform, torch
print("python", platform.python_version(), "| torch", torch.__version__, "| CUDA", torch.version.cuda,
      "| device:", torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)
for name in ("lightning", "transformers", "tokenizers", "huggingface-hub", "peft", "accelerate", "numpy",
             "mlflow-skinny", "jsonargparse", "math-verify", "datasets", "trl"):
    try:
        print(f"  {name} {importlib.metadata.version(name)}")
    except importlib.metadata.PackageNotFoundError:
        print(f"  {name}: not installed")
EOF
if [ "$DEVICE" = cuda ] && ! "$PY" -c 'import sys, torch; sys.exit(not torch.cuda.is_available())'; then
  say "no CUDA device visible to torch: no GPU check was run (GPU_CHECK_DEVICE=cpu runs them at smoke sizes on the CPU)"
  echo "No CUDA device visible to torch: no GPU check was run." > "$OUT/summary.md"
  exit 1
fi

if [ "$DEVICE" = cuda ]; then  # the real sizes
  ACC=gpu STEP_ARGS=(--sizes tiny-500k tiny-2m tiny-8m --steps 3)
  SCALE_ARGS=(--steps 2 --prompts 8 --group-size 8 --new-tokens 128 --minibatches 2)
  TRL_ARGS=(--sizes tiny-8m --reps 1 --steps 3 --warmup 1)
  TRAIN_STEPS=20 TRAIN_EVAL=64
else  # smoke sizes: the commands, arguments and outputs, not the numbers
  ACC=cpu STEP_ARGS=(--sizes tiny-500k --steps 1)
  SCALE_ARGS=(--steps 2 --prompts 2 --group-size 2 --new-tokens 8 --minibatches 1 --no-gradient-checkpointing
    --shrink num_hidden_layers=1 hidden_size=64 intermediate_size=128 num_attention_heads=2 num_key_value_heads=1
    head_dim=32)
  TRL_ARGS=(--sizes tiny-500k --reps 1 --steps 1 --warmup 1)
  TRAIN_STEPS=3 TRAIN_EVAL=16
fi
TRAIN_SIZE="${GPU_CHECK_TRAIN_SIZE:-tiny-500k}"

STATUS="$RES/status.tsv"
: > "$STATUS"
# check NAME LIMIT_S COMMAND...: run COMMAND for at most LIMIT_S seconds (less when the budget is nearly spent),
# its output in the log and in logs/NAME.log, its status in status.tsv.
check() {
  local name="$1" limit="$2" left t0 rc
  shift 2
  if [ -n "${GPU_CHECK_ONLY:-}" ] && [[ " $GPU_CHECK_ONLY " != *" $name "* ]]; then
    return  # GPU_CHECK_ONLY="name ...": only those checks, in the script's order
  fi
  left=$((BUDGET - (SECONDS - START) - 10))
  if [ "$left" -lt 30 ]; then
    say "$name: skipped, the budget is spent"
    printf '%s\tskipped\t0\t%s\n' "$name" "$*" >> "$STATUS"
    return
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  say "$name: starting (limit ${limit}s): $*"
  t0=$SECONDS
  timeout -k 10 "$limit" "$@" 2>&1 | tee "$RES/logs/$name.log"
  rc=${PIPESTATUS[0]}
  local status=passed
  [ "$rc" -ne 0 ] && status="failed (exit $rc)"
  [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ] && status="timed out after ${limit}s"
  say "$name: $status in $((SECONDS - t0))s"
  printf '%s\t%s\t%s\t%s\n' "$name" "$status" "$((SECONDS - t0))" "$*" >> "$STATUS"
}

check pytest_gpu 90 "$PY" -m pytest -m gpu -q -p no:cacheprovider --junitxml="$RES/pytest_gpu.xml" \
  $(grep -rl "mark.gpu" tests)  # only the files that hold GPU tests: the others need packages the machine lacks
check step_bf16 100 "$PY" -m bench.perf.step --device "$DEVICE" --precision bf16-mixed "${STEP_ARGS[@]}" --out "$RES"
check step_fp32 90 "$PY" -m bench.perf.step --device "$DEVICE" --precision 32-true "${STEP_ARGS[@]}" --out "$RES"
check scale 150 "$PY" -m bench.perf.scale --model Qwen/Qwen3-1.7B --engines hf --device "$DEVICE" \
  --precision bf16-mixed "${SCALE_ARGS[@]}" --out "$RES/scale_$DEVICE.md"
check trl 120 "$PY" -m bench.perf.trl --device "$DEVICE" "${TRL_ARGS[@]}" --out "$RES"
check train_chain 100 "$PY" -m bench.cli train --config results/configs/embedded_grpo.yaml --task.name chain \
  --model.name "$TRAIN_SIZE" --trainer.accelerator "$ACC" --precision bf16-mixed --rl.steps "$TRAIN_STEPS" \
  --eval.every "$TRAIN_STEPS" --eval.num_problems "$TRAIN_EVAL" --eval.n 1 --eval.k '[1]' \
  --tracking.experiment gpu-check --tracking.results_dir "$RES/train" --no_progress

say "writing summary.md, results.json and raw.tar.gz"
"$PY" - "$RES" "$OUT" "$DEVICE" <<'EOF' || say "the summary failed"
import json, math, os, sys
from pathlib import Path

res, out, device = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
rows = [line.split("\t") for line in (res / "status.tsv").read_text().splitlines() if line]
lines = [f"# GPU checks ({device})", "", "| check | status | s | command |", "|---|---|---:|---|"]
lines += [f"| {n} | {s} | {t} | `{c}` |" for n, s, t, c in rows]
data = {"status": [dict(zip(("check", "status", "seconds", "command"), r)) for r in rows]}

try:  # the bf16 run: its reward and loss per step, and whether anything was not finite
    from mlflow import MlflowClient

    client = MlflowClient(os.environ["MLFLOW_TRACKING_URI"])
    exp = client.get_experiment_by_name("gpu-check")
    run = client.search_runs([exp.experiment_id], order_by=["attributes.start_time DESC"])[0] if exp else None
    if run is not None:
        keys = ("train/reward", "loss/total", "train/grad_norm", "time/step_s")
        hist = {k: [m.value for m in sorted(client.get_metric_history(run.info.run_id, k), key=lambda m: m.step)]
                for k in keys}
        bad = [k for k, v in hist.items() if any(not math.isfinite(x) for x in v)]
        r, t = hist["train/reward"], hist["time/step_s"][1:] or hist["time/step_s"]
        half = max(1, len(r) // 2)
        train = {"run": run.info.run_name, "status": run.info.status, "series": hist, "non_finite": bad,
                 "reward_first_half": sum(r[:half]) / half if r else None,
                 "reward_second_half": sum(r[half:]) / max(1, len(r) - half) if r else None,
                 "median_step_s": sorted(t)[len(t) // 2] if t else None,
                 "eval": {k: v for k, v in run.data.metrics.items() if k.startswith("eval")}}
        data["train_chain"] = train
        if not r:
            raise ValueError("no train/reward logged")
        lines += ["", f"## Short bf16 GRPO run on chain ({train['run']}, {train['status']})", "",
                  f"reward per step: {', '.join(f'{x:.3f}' for x in r)}",
                  f"mean reward, first half {train['reward_first_half']:.3f} -> second half "
                  f"{train['reward_second_half']:.3f}; not finite: {bad or 'nothing'}; median step "
                  f"{train['median_step_s']:.3f} s (after the first)"]
except Exception as e:  # noqa: BLE001 - the summary reports what it could read
    lines += ["", f"(the bf16 run's metrics could not be read: {type(e).__name__}: {e})"]

for md in sorted(res.glob("*.md")):
    lines += ["", "---", f"<!-- {md.name} -->", "", md.read_text().strip()]
    js = md.with_suffix(".json")
    if js.exists():
        data[md.stem] = json.loads(js.read_text())
(out / "summary.md").write_text("\n".join(lines) + "\n")
(out / "results.json").write_text(json.dumps(data, indent=1, default=str) + "\n")
EOF
tar -czf "$OUT/raw.tar.gz" -C "$WORK" results $(cd "$WORK" && ls mlflow.db 2>/dev/null) \
  || say "raw.tar.gz failed"
say "done in $((SECONDS - START))s: $(cut -f1,2 "$STATUS" | tr '\t\n' ': ' | sed 's/: $//')"
