"""Benchmark: the ATen ops one RL step dispatches, creditbench against TRL's GRPOTrainer, by phase.

    python -m bench.perf.op_count [--models tiny-8m qwen3-2l] [--steps 2] [--warmup 1] [--threads 1]
                                  [--out results/benchmarks]

Needs ``trl`` importable: the ``trl`` extra (``pip install -e '.[trl]'``), or trl 1.16.0 installed by pip
without its dependencies into a directory of its own, named in ``PYTHONPATH``.

At small sizes a GPU step is bound by kernel launches and host-side Python, not arithmetic: every ATen
op a step dispatches is a launch on a GPU (a view is not: it only makes new metadata), so the ops per
step, which a CPU run counts exactly, are a device-independent proxy for that overhead. A
``TorchDispatchMode`` sees every op below autograd (the forward's, the backward's, the optimizer's)
and puts it in the phase of the step that dispatched it:

* **rollout**: generation, rewards, advantages (creditbench's ``train_rollouts``; TRL's
  ``_prepare_inputs``, which generates, rewards, normalises and shuffles);
* **score**: log-prob passes before the update (none at these settings: both take the behaviour
  log-probs from the training forward);
* **loss + backward**: the training forward, the loss and its statistics, the backward (creditbench's
  ``update``; TRL's ``training_step`` outside ``_prepare_inputs``);
* **optimizer**: ``torch.nn.utils.clip_grad_norm_`` and ``Optimizer.step``, the same functions in both;
* **other**: the rest of the step (creditbench: its logged statistics; TRL: its loss tracking).

Host syncs are the ops after which the host waits for the device on a GPU (``item()``, ``nonzero``,
boolean-mask indexing, ``unique``); a ``tolist()`` dispatches nothing on the CPU and is not among them.
The parts of creditbench's step that TRL's lacks are counted apart (``PARTS``): the shared prompt
prefix (each distinct prompt's first tokens run once and their KV cache is gathered to its G rows, in
the rollout and in the training forward, whose backward is counted with it by the autograd nodes that
forward made), the dropping of finished rows from the decode batch, and the credit diagnostics.

The workload is bench/perf/trl.py's matched setting, through the same functions (``bench.perf.trl_runs``):
GRPO on arithmetic, G=8, up to 32 new tokens at temperature 1, no KL, fp32, one optimizer step per
generation batch, random weights loaded from the same directory, on the CPU. Models: ``tiny-8m``
(bench.models.policy; 16 prompts a step, as trl.py) and ``qwen3-2l``, a randomly initialised model of
Qwen3's architecture and 151,936-token vocabulary cut to 2 layers of width 256
(``bench.models.hub_archs.random_checkpoint``) where the LM head is Qwen-sized (4 prompts a step: 128 rows'
[tokens x vocab] logits would take 16 GB of the CPU's memory; creditbench's count does not depend on the
batch size, TRL's per-row loops do). Each run is its own process; figures are means over the
``--steps`` steps measured after ``--warmup`` steps.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.perf.op_count_runs import PARTS, PHASES, SYNCS, count_ops
from bench.script import machine, machine_line, md_table, run_script, script_parser, write_outputs

PROG = "python -m bench.perf.op_count"
MARK = "BENCH_OP_COUNT_RESULT "
FRAMEWORKS = ("creditbench", "trl")
# model -> prompts a step; qwen3-2l: Qwen3-1.7B's architecture and vocabulary (bench.models.hub_archs), cut down
MODELS = {"tiny-8m": 16, "qwen3-2l": 4}
QWEN3_2L = {
    "num_hidden_layers": 2,
    "hidden_size": 256,
    "intermediate_size": 768,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
}


def _worker(spec: dict) -> None:
    import torch

    torch.set_num_threads(spec.pop("threads"))
    print(MARK + json.dumps(count_ops(**spec)), flush=True)


def run_isolated(spec: dict) -> dict:
    """``count_ops`` in a fresh Python process (its patched phases and its counter are its own)."""
    env = dict(os.environ, TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    env.update(HF_HUB_DISABLE_PROGRESS_BARS="1", PYTHONWARNINGS="ignore")
    cmd = [sys.executable, "-m", "bench.perf.op_count", "--worker", json.dumps(spec)]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith(MARK)]
    if p.returncode or not lines:
        raise RuntimeError(f"run {spec} failed (exit {p.returncode}):\n{p.stderr[-4000:]}")
    return json.loads(lines[-1][len(MARK) :])


def save_model(name: str, out: str) -> int:
    """Save model ``name`` (random weights) and its tokenizer to ``out``; its parameter count."""
    from bench.models.hub_archs import random_checkpoint
    from bench.models.policy import build_tiny, load_policy, num_parameters
    from bench.perf.trl_runs import SEED

    if name == "qwen3-2l":
        random_checkpoint("Qwen/Qwen3-1.7B", out, dtype="float32", seed=SEED, max_positions=256, **QWEN3_2L)
        return num_parameters(load_policy(out)[0])
    model, tok = build_tiny(name, seed=SEED)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return num_parameters(model)


def summary(run: dict) -> dict:
    """One run's ops, launches (ops that are not views) and host syncs per step, by phase and in all."""
    out = {}
    for phase in PHASES:
        ops = run["ops"].get(phase, {})
        n = sum(ops.values())
        out[phase] = {"ops": n, "launches": n - run["views"].get(phase, 0), "syncs": sum(ops.get(o, 0) for o in SYNCS)}
    out["step"] = {k: sum(out[p][k] for p in PHASES) for k in ("ops", "launches", "syncs")}
    return out


def _differences(cb: dict, trl: dict, phase: str, top: int) -> list[tuple[str, float, float]]:
    """The ``top`` ops of ``phase`` whose counts differ most between the runs: (op, creditbench, TRL)."""
    a, b = cb["ops"].get(phase, {}), trl["ops"].get(phase, {})
    rows = [(op, a.get(op, 0), b.get(op, 0)) for op in set(a) | set(b)]
    return sorted(rows, key=lambda r: (-abs(r[1] - r[2]), r[0]))[:top]


def _n(x: float) -> str:
    return f"{x:,.0f}"


JUSTIFIED = (
    "## What creditbench dispatches that TRL does not, and why it stays",
    "",
    "- **The shared prompt prefix.** Each distinct prompt's first tokens run once and their KV cache is "
    "gathered to its G rows, in the rollout (TRL prefills every row) and in the training forward (TRL "
    "runs every row's prompt). That is one more model call in each, and the training one's backward: a "
    "fixed number of ops a step, independent of the batch, that saves (G-1)/G of the prompts' forward "
    "and backward FLOPs -- what dominates once the model is not tiny. Removing it would also move every "
    "run's numbers (the gradient of rows sharing a prompt is summed in another order).",
    "- **Dropping finished rows.** The decode batch keeps only the rows still generating "
    "(bench.engine.rollout.lean_decode): a gather of the KV cache each time rows finish, where TRL keeps "
    "decoding finished rows to the end. With the tiny models' 99-token vocabulary some row ends at almost "
    "every step; over Qwen's vocabulary random weights almost never sample eos.",
    "- **The credit diagnostics.** The ``credit/*`` metrics read each token's effective credit off the "
    "loss (one ``autograd.grad`` of the loss with respect to the log-probs, not through the model) and "
    "summarise it: what the benchmark measures about every method.",
    "",
    "TRL's step dispatches its own extras: per-row Python loops over the batch in its rollout (the "
    "``select``/``copy_`` pairs above, which grow with the batch) and its logged metrics. creditbench's "
    "rollout and update dispatch no per-row or per-token loops: its count is the same at any batch size.",
)


def markdown(data: dict) -> str:
    """The report: ops per step by phase for each model and framework, creditbench's parts that TRL lacks,
    the ops whose counts differ most, and what the differences are."""
    a = data["args"]
    main_rows, part_rows, diff_rows = [], [], []
    for r in data["results"]:
        cb, trl = (summary(r["runs"][f]) for f in FRAMEWORKS)
        for name, s in (("creditbench", cb), ("TRL", trl)):
            phases = [_n(s[p]["ops"]) for p in PHASES]
            step, ratio = s["step"], s["step"]["ops"] / trl["step"]["ops"]
            launches = f"{_n(step['launches'])} ({step['launches'] / trl['step']['launches']:.2f})"
            main_rows.append(
                [r["model"], name, *phases, f"{_n(step['ops'])} ({ratio:.2f})", launches, _n(step["syncs"])]
            )
        for part in PARTS:
            p = r["runs"]["creditbench"]["parts"][part]
            ops = p.get("ops", 0)
            part_rows.append([r["model"], part, _n(ops), _n(ops - p.get("views", 0)), _n(p.get("syncs", 0))])
        for phase in ("rollout", "loss + backward"):
            for op, x, y in _differences(r["runs"]["creditbench"], r["runs"]["trl"], phase, 6):
                diff_rows.append([r["model"], phase, op, _n(x), _n(y), f"{x - y:+,.0f}"])
    models = ", ".join(
        f"{r['model']} ({r['params']:,} parameters, {r['prompts']} prompts x G=8)" for r in data["results"]
    )
    host = machine_line(data["machine"], "transformers", "trl")
    lines = [
        f"# The ATen ops of one RL step: creditbench against TRL's GRPOTrainer ({host})",
        "",
        f"`{PROG} --models {' '.join(a['models'])} --steps {a['steps']} --warmup {a['warmup']} "
        f"--threads {a['threads']}`. "
        f"GRPO on arithmetic at bench/perf/trl.py's matched setting (fp32, no KL, up to 32 new tokens at "
        f"temperature 1, one optimizer step per generation batch), random weights: {models}. Ops dispatched "
        f"per RL step (means over {a['steps']} steps after {a['warmup']}), by phase; launches are the ops "
        "that are not views (a kernel each on a GPU), host syncs the ops after which a GPU's host waits "
        "(item(), nonzero, ...). In brackets: creditbench / TRL.",
        "",
        *md_table(
            ["model", "framework", *PHASES, "ops / step", "launches / step", "host syncs / step"],
            main_rows,
            align="ll" + "r" * (len(PHASES) + 3),
        ),
        "",
        "creditbench's parts that TRL's step lacks (ops per step, included in the phases above):",
        "",
        *md_table("model | part | ops | launches | host syncs", part_rows, align="llrrr"),
        "",
        "The ops whose counts differ most between the two (per step):",
        "",
        *md_table("model | phase | op | creditbench | TRL | difference", diff_rows, align="lllrrr"),
        "",
        *JUSTIFIED,
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = script_parser(__doc__, PROG)
    ap.add_argument("--models", nargs="+", default=list(MODELS), help=f"among {', '.join(MODELS)}")
    ap.add_argument("--steps", type=int, default=2, help="measured RL steps per run")
    ap.add_argument("--warmup", type=int, default=1, help="RL steps before the measured ones")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per run")
    ap.add_argument("--out", default="results/benchmarks")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        _worker(json.loads(a.worker))
        return
    import importlib.util

    from bench.errors import CreditBenchError, did_you_mean

    for name in a.models:
        if name not in MODELS:
            raise did_you_mean("model", name, MODELS)
    if importlib.util.find_spec("trl") is None:
        raise CreditBenchError(
            "the op-count benchmark needs trl: pip install -e '.[trl]' (or pip install --no-deps --target DIR "
            "trl==1.16.0 and PYTHONPATH=DIR)"
        )
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in a.models:
            model_dir = str(Path(tmp) / name)
            result = {"model": name, "params": save_model(name, model_dir), "prompts": MODELS[name], "runs": {}}
            for framework in FRAMEWORKS:
                spec = dict(framework=framework, model_dir=model_dir, steps=a.steps, warmup=a.warmup)
                run = run_isolated({**spec, "prompts": MODELS[name], "threads": a.threads})
                result["runs"][framework] = run
                print(json.dumps({"model": name, "framework": framework, **summary(run)["step"]}), flush=True)
            results.append(result)
    data = {
        "machine": machine(a.threads, packages=("transformers", "trl")),
        "args": {k: v for k, v in vars(a).items() if k not in ("worker", "out")},
        "results": results,
    }
    text = markdown(data)
    write_outputs(a.out, "op_count", text, data)
    print(text)


if __name__ == "__main__":
    run_script(main, PROG)
