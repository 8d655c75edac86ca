#!/usr/bin/env bash
# The GPU checks in one pass, for a CUDA machine that has torch, lightning and transformers but no network, in
# at most 8 minutes with the wheel installs. The checks, their order, time limits and commands are the plan of
# bench/gpu/checks.py (`python -m bench.gpu.checks --device cuda` prints it): the figures still open
# first (creditbench against TRL on tiny-8m and at Qwen3-1.7B size, two repetitions each), then the GPU tests;
# those measured already (Qwen3-1.7B's throughput, the bf16 chain run, the step by phase) run only when
# GPU_CHECK_ONLY names them.
#
#   OUT=/some/empty/dir bash bench/perf/gpu_check.sh
#   GPU_CHECK_ONLY="scale_1.7b step_bf16" bash bench/perf/gpu_check.sh   # those checks only, in the plan's order
#
# Run from anywhere; the project need not be installed (the repository goes on PYTHONPATH). Wheels of the
# packages the machine lacks (mlflow-skinny, jsonargparse, math-verify, datasets, trl and their dependencies)
# may lie in .whl/ of the repository root (`bash bench/gpu/wheels.sh` downloads them where there is a network):
# they are installed first into a scratch directory, without the network, and put on PYTHONPATH after the
# repository.
#
# Each check has its own time limit and all share one budget (GPU_CHECK_BUDGET seconds from the start, wheel
# installs included; default 470, or 1400 on the CPU, where the checks' limits are 3 times the GPU's): a check
# that fails or runs out of time does not stop the next, and one that no longer fits is skipped. Everything is
# written as it goes, so a check stopped by its limit (or the whole script killed) keeps what it measured: in
# $OUT (default results/gpu_check), gpu_check.log (everything printed) and nvidia-smi.txt; in $OUT/raw, the
# plan, status.tsv (each check's status and seconds), each check's log (logs/), the reports of the benchmarks
# (a stopped benchmark rewrites its report from what it finished before its own --time-limit) and the MLflow
# store of the runs (mlflow.db: the chain run's metrics, step by step). At the end, summary.md (each check's
# status and time, then every report) and results.json (every report's data) in $OUT.
#
# Without a CUDA device it says so and stops. GPU_CHECK_DEVICE=cpu runs the same checks at smoke sizes on the
# CPU instead (a few minutes), to try the script itself: the Hub-sized models then take a smoke shape
# (bench/gpu/placement.py); the numbers say nothing about a GPU.
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT="$PWD"
OUT="${OUT:-$ROOT/results/gpu_check}"
RES="$OUT/raw"
mkdir -p "$RES/logs"
OUT="$(cd "$OUT" && pwd)" RES="$(cd "$RES" && pwd)"
DEVICE="${GPU_CHECK_DEVICE:-cuda}"
BUDGET="${GPU_CHECK_BUDGET:-$([ "$DEVICE" = cuda ] && echo 470 || echo 1400)}"  # the CPU's limits are 3x
PY="${PYTHON:-python3}"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/gpu-check.XXXXXX")"  # what is not kept: wheels, caches, MLflow artifacts
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
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
if [ -n "${GPU_CHECK_ONLY:-}" ]; then  # a wrong name ends here, before anything is installed
  "$PY" -m bench.gpu.checks --only $GPU_CHECK_ONLY > /dev/null || exit 2
fi

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
export MPLBACKEND=Agg PYTHONUNBUFFERED=1 GPU_CHECK_DEVICE="$DEVICE"
export MLFLOW_TRACKING_URI="sqlite:///$RES/mlflow.db"
export CREDITBENCH_CACHE="$WORK/cache" CREDITBENCH_CHECKPOINTS="$WORK/checkpoints"

{ nvidia-smi; nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,power.limit,driver_version --format=csv; } \
  > "$OUT/nvidia-smi.txt" 2>&1 || echo "nvidia-smi: not available" >> "$OUT/nvidia-smi.txt"
"$PY" - "$DEVICE" <<'EOF'
import importlib.metadata, platform, sys, torch
print("python", platform.python_version(), "| torch", torch.__version__, "| CUDA", torch.version.cuda,
      "| device:", torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)
for name in ("lightning", "transformers", "tokenizers", "huggingface-hub", "peft", "accelerate", "numpy",
             "mlflow-skinny", "jsonargparse", "math-verify", "datasets", "trl"):
    try:
        print(f"  {name} {importlib.metadata.version(name)}")
    except importlib.metadata.PackageNotFoundError:
        print(f"  {name}: not installed")
sys.exit(3 if sys.argv[1] == "cuda" and not torch.cuda.is_available() else 0)
EOF
if [ $? -eq 3 ]; then
  say "no CUDA device visible to torch: no GPU check was run (GPU_CHECK_DEVICE=cpu runs them at smoke sizes on the CPU)"
  echo "No CUDA device visible to torch: no GPU check was run." > "$OUT/summary.md"
  exit 1
fi
"$PY" -m bench.gpu.checks --device "$DEVICE" --res "$RES" ${GPU_CHECK_ONLY:+--only $GPU_CHECK_ONLY} \
  > "$RES/plan.tsv" || { say "the plan failed"; exit 2; }

STATUS="$RES/status.tsv"
: > "$STATUS"
# check NAME LIMIT_S ARG...: run "$PY" ARG... for at most LIMIT_S seconds (less when the budget is nearly spent)
# in the scratch directory (MLflow's artifacts land there), its output in the log and in logs/NAME.log, its
# status in status.tsv.
check() {
  local name="$1" limit="$2" left t0 rc status
  shift 2
  left=$((BUDGET - (SECONDS - START) - 10))
  if [ "$left" -lt 30 ]; then
    say "$name: skipped, the budget is spent"
    printf '%s\tskipped: the budget is spent\t0\t%s\n' "$name" "$*" >> "$STATUS"
    return
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  say "$name: starting (limit ${limit}s): $PY $*"
  t0=$SECONDS
  (cd "$WORK" && exec timeout -k 10 "$limit" "$PY" "$@" < /dev/null) 2>&1 | tee "$RES/logs/$name.log"
  rc=${PIPESTATUS[0]}
  status=passed
  [ "$rc" -ne 0 ] && status="failed (exit $rc)"
  [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ] && status="timed out after ${limit}s"
  say "$name: $status in $((SECONDS - t0))s"
  printf '%s\t%s\t%s\t%s\n' "$name" "$status" "$((SECONDS - t0))" "$*" >> "$STATUS"
}

while IFS=$'\t' read -r -u 3 name limit state command; do
  if [ "$state" != run ]; then
    say "$name: ${state/skip:/skipped:}"
    printf '%s\t%s\t0\t%s\n' "$name" "${state/skip:/skipped:}" "$command" >> "$STATUS"
    continue
  fi
  eval "args=($command)"  # the plan's shell-quoted arguments
  check "$name" "$limit" "${args[@]}"
done 3< "$RES/plan.tsv"

say "writing summary.md and results.json"
"$PY" - "$RES" "$OUT" "$DEVICE" <<'EOF' || say "the summary failed"
import json, math, os, sys
from pathlib import Path

res, out, device = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
rows = [line.split("\t") for line in (res / "status.tsv").read_text().splitlines() if line]
lines = [f"# GPU checks ({device})", "", "| check | status | s | command |", "|---|---|---:|---|"]
lines += [f"| {n} | {s} | {t} | `{c}` |" for n, s, t, c in rows]
data = {"status": [dict(zip(("check", "status", "seconds", "command"), r)) for r in rows]}

try:  # the bf16 run: its reward and loss per step, whether anything was not finite (what it logged, if stopped)
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
                  f"{train['median_step_s']:.3f} s (after the first); last eval: {train['eval'] or 'none logged'}"]
except Exception as e:  # noqa: BLE001 - the summary reports what it could read
    lines += ["", f"(the bf16 run's metrics could not be read: {type(e).__name__}: {e})"]

for md in sorted(res.rglob("*.md")):
    name = md.relative_to(res).as_posix()
    lines += ["", "---", f"<!-- {name} -->", "", md.read_text().strip()]
    js = md.with_suffix(".json")
    if js.exists():
        data[name.removesuffix(".md")] = json.loads(js.read_text())
(out / "summary.md").write_text("\n".join(lines) + "\n")
(out / "results.json").write_text(json.dumps(data, indent=1, default=str) + "\n")
EOF
say "done in $((SECONDS - START))s: $(cut -f1,2 "$STATUS" | tr '\t\n' ': ' | sed 's/: $//')"
