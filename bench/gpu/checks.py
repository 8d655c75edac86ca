"""The plan of bench/perf/gpu_check.sh: which checks run, in what order, for how long, with what command.

    python -m bench.gpu.checks [--device cuda] [--res DIR] [--only NAME ...]

prints one check a line, tab-separated: its name, its time limit in seconds, ``run`` or ``skip: <why>``, and
its command after the Python interpreter (shell-quoted; ``--res``: the folder its outputs go to). The script
runs them in this order, each under its limit, all within one budget (8 minutes on one GPU with the wheel
installs). The figures still open come first, the ones measured already last:

1. ``trl_tiny-8m`` (limit 130 s): creditbench against TRL's GRPOTrainer at matched settings (bench.perf.trl),
   tiny-8m, 2 repetitions of 5 measured steps: 4 processes of 19-24 s, almost all of it start-up, after 10 s
   of its own (the 95 s the third pass gave it ended each time before the fourth process).
2. ``trl_1.7b`` (170 s): the same at Qwen3-1.7B size, 4 prompts a step (fp32 weights, AdamW state,
   activations and [tokens x vocab] logits then fit an 80 GB GPU), 2 repetitions of 2 measured steps:
   processes of 38 s (creditbench) and 23 s (TRL) on an H200, 122 s in all plus its own start.
3. ``pytest_gpu`` (60 s, in what is left of the budget): the ``gpu``-marked tests (30-40 s on an H200).

With about 20 s of wheel installs and start-up, 1-2 fill at most 320 s of the 470 s budget. Measured
already, run only where ``--only`` names them: ``scale_1.7b`` (Qwen3-1.7B, random init, bf16 autocast, HF
engine, bench.perf.scale: 3 steps of 8 prompts x G=8 x 128 new tokens in 103 s on an H200,
results/benchmarks/gpu/scale_cuda_qwen3-1.7b.md), ``train_chain`` (a short bf16 GRPO run on chain through
``creditbench train`` to its end, 48 s), ``step_bf16`` and ``step_fp32`` (one RL step by phase, tiny
sizes, bench.perf.step, results/benchmarks/gpu/rl_step_cuda_*.md). bench.perf.op_count and the LM head's
memory benchmark measure on the CPU, so the GPU pass has no check of theirs.

A benchmark that takes a time limit of its own (bench.perf.scale, bench.perf.trl) gets one 15 s under the
check's: it stops in time to write the report of what it measured. ``--device cpu`` gives the same checks
at smoke sizes (seconds each, with GPU_CHECK_DEVICE=cpu for the Hub-sized models' smoke shape: see
bench.gpu.placement, which tests/gpu/test_checks.py holds every check's model to).
"""

from __future__ import annotations

import importlib.util
import shlex
from dataclasses import dataclass
from pathlib import Path

from bench.script import run_script, script_parser

PROG = "python -m bench.gpu.checks"
ROOT = Path(__file__).resolve().parents[2]
QWEN = "Qwen/Qwen3-1.7B"
INNER_MARGIN_S = 15  # a check's own --time-limit is this much under its limit: it writes its report in time
CPU_FACTOR = 3  # the smoke sizes' limits on 2 busy CPU cores, where start-ups and bf16 steps take longer


@dataclass(frozen=True)
class Check:
    """One check: its name, time limit, command (a template: {device}, {accelerator}, {res}, {sizes}, {inner},
    {root}, {gpu_tests}) and
    the sizes on a GPU and at smoke sizes on the CPU; ``needs``: a package it imports (skipped without it);
    ``measured``: where its figures are committed already (then it runs only when asked for by name)."""

    name: str
    limit_s: int
    command: str
    gpu: str = ""
    cpu: str = ""
    needs: str | None = None
    measured: str | None = None

    def limit(self, device: str) -> int:
        """Its time limit on ``device`` (seconds)."""
        return self.limit_s if device == "cuda" else self.limit_s * CPU_FACTOR

    def argv(self, device: str, res: Path) -> list[str]:
        """The command's arguments after the interpreter, on ``device`` with outputs under ``res``."""
        sizes = self.gpu if device == "cuda" else self.cpu
        fields = {"device": device, "accelerator": "gpu" if device == "cuda" else "cpu", "res": res, "root": ROOT}
        fields.update(sizes=sizes, inner=self.limit(device) - INNER_MARGIN_S, gpu_tests=_gpu_tests())
        return shlex.split(self.command.format(**fields))


TRL = "-m bench.perf.trl --device {device} --runs creditbench/matched trl/matched --time-limit {inner} {sizes}"
CHECKS = (
    Check(
        "trl_tiny-8m",
        130,
        TRL + " --out {res}/trl_tiny-8m",
        gpu="--sizes tiny-8m --reps 2 --steps 5 --warmup 1",
        cpu="--sizes tiny-500k --reps 1 --steps 1 --warmup 1 --prompts 2",
        needs="trl",
    ),
    Check(
        "trl_1.7b",
        170,
        TRL + " --out {res}/trl_1.7b",
        gpu=f"--sizes {QWEN} --prompts 4 --reps 2 --steps 2 --warmup 1",
        cpu=f"--sizes {QWEN} --prompts 2 --reps 1 --steps 1 --warmup 1",
        needs="trl",
    ),
    Check(
        "pytest_gpu",
        60,
        "-m pytest -m gpu -q -p no:cacheprovider --rootdir {root} --junitxml={res}/pytest_gpu.xml {gpu_tests}",
    ),
    Check(
        "scale_1.7b",
        120,
        f"-m bench.perf.scale --model {QWEN} --engines hf --device {{device}} --precision bf16-mixed {{sizes}} "
        "--time-limit {inner} --out {res}/scale_{device}.md",
        gpu="--steps 3 --prompts 8 --group-size 8 --new-tokens 128 --minibatches 2",
        cpu="--steps 2 --prompts 2 --group-size 2 --new-tokens 8 --minibatches 1 --no-gradient-checkpointing",
        measured="results/benchmarks/gpu/scale_cuda_qwen3-1.7b.md",
    ),
    Check(
        "train_chain",
        70,
        "-m bench.cli train --config {root}/results/configs/embedded_grpo.yaml --task.name chain "
        "--model.name tiny-500k --trainer.accelerator {accelerator} --precision bf16-mixed {sizes} --eval.n 1 "
        "--eval.k '[1]' --tracking.experiment gpu-check --tracking.results_dir {res}/train --no_progress",
        gpu="--rl.steps 20 --eval.every 20 --eval.num_problems 64",
        cpu="--rl.steps 3 --rl.prompts_per_step 4 --eval.every 3 --eval.num_problems 8",
        measured="results/benchmarks/gpu/h200-pass4-summary.md",
    ),
    Check(
        "step_bf16",
        100,
        "-m bench.perf.step --device {device} --precision bf16-mixed {sizes} --out {res}",
        gpu="--sizes tiny-500k tiny-2m tiny-8m --steps 3",
        cpu="--sizes tiny-500k --steps 1",
        measured="results/benchmarks/gpu/rl_step_cuda_bf16-mixed.md",
    ),
    Check(
        "step_fp32",
        90,
        "-m bench.perf.step --device {device} --precision 32-true {sizes} --out {res}",
        gpu="--sizes tiny-500k tiny-2m tiny-8m --steps 3",
        cpu="--sizes tiny-500k --steps 1",
        measured="results/benchmarks/gpu/rl_step_cuda_32-true.md",
    ),
)


def _gpu_tests() -> str:
    """The test files that hold GPU tests (the others need packages a GPU machine may lack), absolute."""
    files = sorted(p for p in (ROOT / "tests").rglob("test_*.py") if "mark.gpu" in p.read_text())
    return " ".join(shlex.quote(str(p)) for p in files)


def selected(only: list[str] | None) -> list[Check]:
    """The checks ``only`` names (in the plan's order), or all; an unknown name ends in one line."""
    from bench.errors import did_you_mean

    names = [c.name for c in CHECKS]
    for name in only or []:
        if name not in names:
            raise did_you_mean("GPU check", name, names)
    return [c for c in CHECKS if not only or c.name in only]


def status(check: Check, only: list[str] | None) -> str:
    """``run``, or ``skip: <why>``: its package missing, or its figures committed and not asked for."""
    if check.needs and importlib.util.find_spec(check.needs) is None:
        return f"skip: needs {check.needs}, which is not installed"
    if check.measured and not only:
        return f"skip: measured already ({check.measured}); GPU_CHECK_ONLY={check.name} runs it"
    return "run"


def plan_lines(device: str, res: Path, only: list[str] | None = None) -> list[str]:
    """The plan, one tab-separated line a check (see the module docstring)."""
    return [
        "\t".join((c.name, str(c.limit(device)), status(c, only), shlex.join(c.argv(device, res))))
        for c in selected(only)
    ]


def main(argv: list[str] | None = None) -> int:
    """Print the plan."""
    ap = script_parser(__doc__, PROG)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--res", default="results/gpu_check/raw", help="the folder the checks' outputs go to")
    ap.add_argument("--only", nargs="*", help="these checks only, in the plan's order (GPU_CHECK_ONLY)")
    a = ap.parse_args(argv)
    print("\n".join(plan_lines(a.device, Path(a.res).resolve(), a.only)))
    return 0


if __name__ == "__main__":
    run_script(main, PROG)
