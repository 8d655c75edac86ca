"""One flagship run, measured: the process bench/perf/flagship_cost.py starts (in this checkout or in
another one, to compare two versions of the code side by side on one machine).

    python bench/perf/workers/flagship_run.py OUT.json --spec SPEC --label LABEL --seed S --warm_label W

Starts as a sweep's worker does (``bench.sweep.worker.preload``) and runs the sweep's run
``W-...-seedS`` first (unmeasured: imports, the task's generated data, the allocator and the first-call
costs a worker pays once, and the base eval of seed S, which a sweep computes once for all its labels),
then ``LABEL-...-seedS`` with its CPU seconds split into phases, and writes what it measured to
OUT.json. Only names that every version of the engine has are touched (a missing one leaves its
phase at zero), so the script measures older checkouts too: put the checkout first on PYTHONPATH and
run from it.

Phases, CPU seconds of this process (``time.process_time``, one torch thread):
rollout (the engine's generation for training), verify (the task's verifier on training rollouts),
scoring (the no-grad passes before the update), update (forward, backward and optimizer steps), eval
(everything inside the evaluation: its generation, verification, J), fixed (the rest: set-up, MLflow,
data, Lightning, recording). A phase entered inside another is charged to the inner one, except
inside eval, which keeps everything. Beside the seconds, the useful tokens each phase pushes through
the model, for the FLOP floor (see flagship_cost.py): per forward call the distinct prompts'
positions once and each row's completion positions, and whether it kept a graph for a backward.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import tempfile
import time


class Meter:
    """CPU seconds by phase, with a stack: time goes to the innermost phase entered (inside eval, to eval)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.stack: list[str] = []
        self.last = time.process_time()
        self.on = False

    def _charge(self) -> None:
        now = time.process_time()
        if self.on:
            top = self.stack[-1] if self.stack else "fixed"
            self.seconds[top] = self.seconds.get(top, 0.0) + now - self.last
        self.last = now

    def phase(self) -> str:
        return "eval" if "eval" in self.stack else (self.stack[-1] if self.stack else "fixed")

    def wrap(self, owner, name: str, phase: str) -> None:
        fn = getattr(owner, name, None)
        if fn is None:
            return
        meter = self

        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            inner = "eval" if "eval" in meter.stack else phase
            meter._charge()
            meter.stack.append(inner)
            try:
                return fn(*args, **kwargs)
            finally:
                meter._charge()
                meter.stack.pop()

        setattr(owner, name, wrapped)


class Tokens:
    """Useful model positions by phase: ``fwd`` positions run without a graph, ``train`` with one
    (forward and backward), ``logits`` positions whose logits were needed, and the sum over those
    positions of their context length (for attention)."""

    def __init__(self, meter: Meter) -> None:
        self.meter = meter
        self.by_phase: dict[str, dict[str, float]] = {}

    def add(self, prompt_ids, prompt_mask, completion_mask, grad: bool) -> None:
        keys = ("fwd", "train", "logits", "context", "calls", "padded")
        d = self.by_phase.setdefault(self.meter.phase(), dict.fromkeys(keys, 0))
        p_len = prompt_mask.long().sum(-1)  # [B]
        c_len = completion_mask.long().sum(-1)  # [B] completion tokens, eos included
        _, first = _distinct(prompt_ids)
        positions = int((p_len[first] - 1).clamp(min=0).sum()) + int(c_len.sum())
        # what a pass over the padded layout computes: each distinct prompt's columns in use once, each
        # row's last prompt column and every completion column up to the longest completion
        p_cols = int(prompt_mask.bool().any(0).sum())
        d["padded"] += len(first) * max(p_cols - 1, 0) + len(c_len) * (1 + int(c_len.max()))
        # context of each computed position: prompt positions 1..P-1, completion positions P..P+len-1
        pp = (p_len[first] - 1).clamp(min=0).double()
        context = float((pp * (pp + 1) / 2).sum())
        start = p_len.double()
        context += float((c_len.double() * start + c_len.double() * (c_len.double() + 1) / 2).sum())
        d["train" if grad else "fwd"] += positions
        d["logits"] += int(c_len.sum()) * (3 if grad else 1)
        d["context"] += context * (3 if grad else 1)
        d["calls"] += 1


class OpSplit:
    """CPU seconds of the matrix products (mm, addmm, bmm, baddbmm, forward and backward) and of
    attention's kernels, by phase: a dispatch mode that times those operators alone, so the rest of a
    phase's seconds is everything else. Only the operators' own time is counted (a few microseconds of
    timing each, against the hundreds a matrix product takes here)."""

    def __init__(self, meter: Meter) -> None:
        import torch
        from torch.utils._python_dispatch import TorchDispatchMode

        aten = torch.ops.aten
        matmul = {aten.mm.default, aten.addmm.default, aten.bmm.default, aten.baddbmm.default}
        seconds: dict[str, dict[str, float]] = {}
        self.seconds = seconds

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                name = func.__name__
                kind = "matmul" if func in matmul else "attention" if "scaled_dot_product" in name else None
                if kind is None:
                    return func(*args, **(kwargs or {}))
                t = time.process_time()
                out = func(*args, **(kwargs or {}))
                d = seconds.setdefault(meter.phase(), {"matmul": 0.0, "attention": 0.0})
                d[kind] += time.process_time() - t
                return out

        self.mode = Mode()


def _distinct(prompt_ids):
    import torch

    _, inverse = torch.unique(prompt_ids, dim=0, return_inverse=True)
    first = torch.full((int(inverse.max()) + 1,), len(inverse), dtype=torch.long)
    first = first.scatter_reduce(0, inverse, torch.arange(len(inverse)), reduce="amin")
    return inverse, first


def instrument(meter: Meter, tokens: Tokens) -> None:
    import torch

    import bench.engine.module as module
    import bench.engine.rollout as rollout
    import bench.engine.scoring as scoring
    from bench.core import Task

    classes, todo = set(), [Task]
    while todo:
        c = todo.pop()
        for sub in c.__subclasses__():
            if sub not in classes:
                classes.add(sub)
                todo.append(sub)
    for cls in classes:
        if "verify" in vars(cls):
            meter.wrap(cls, "verify", "verify")
    for engine in ("HFRolloutEngine", "TinyRolloutEngine"):
        cls = getattr(rollout, engine, None)
        if cls is not None:
            meter.wrap(cls, "generate", "rollout")
            meter.wrap(cls, "generate_ids", "rollout")
    module_cls = module.RLVRModule
    meter.wrap(module_cls, "score_batch", "scoring")
    meter.wrap(module_cls, "update", "update")
    meter.wrap(module_cls, "validation_step", "eval")
    meter.wrap(module_cls, "on_validation_epoch_start", "eval")
    meter.wrap(module_cls, "on_validation_epoch_end", "eval")

    def counted(fn):
        @functools.wraps(fn)
        def wrapped(model, prompt_ids, prompt_mask, completion_ids, completion_mask, *args, **kwargs):
            tokens.add(prompt_ids, prompt_mask, completion_mask, torch.is_grad_enabled())
            return fn(model, prompt_ids, prompt_mask, completion_ids, completion_mask, *args, **kwargs)

        return wrapped

    scoring.score = counted(scoring.score)
    try:
        import bench.engine.exact as exact

        exact.score = scoring.score
    except ImportError:
        pass
    for engine in ("HFRolloutEngine", "TinyRolloutEngine"):
        cls = getattr(rollout, engine, None)
        if cls is None or not hasattr(cls, "_generate"):
            continue
        gen = cls._generate

        def generated(self, ids, mask, *args, _gen=gen, **kwargs):
            out = _gen(self, ids, mask, *args, **kwargs)
            tokens.add(ids, mask, out.completion_mask, False)
            return out

        cls._generate = generated


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--spec", default="results/sweeps/embedded.yaml")
    ap.add_argument("--label", default="grpo")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--warm_label", default="s_trace")
    ap.add_argument("--ops", action="store_true", help="also time the matrix products and attention of each phase")
    ap.add_argument("--set", action="append", default=[], help="rl.KEY=VALUE: an RL option of both runs (YAML value)")
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    scratch = tempfile.mkdtemp(prefix="flagship-")
    os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{scratch}/mlflow.db"
    import torch

    torch.set_num_threads(1)
    import bench
    from bench.run.train import run

    try:
        from bench.sweep.sweep import load_spec
        from bench.sweep.worker import preload
    except ImportError:  # the code of a checkout from before bench/run was split (a --baseline)
        from bench.run.sweep import load_spec
        from bench.run.worker import preload

    preload()  # as a sweep's worker starts: imports, and generated task data kept between runs

    runs = {r.key: r for r in load_spec(args.spec).runs}
    pick = {r.label: r for r in runs.values() if r.cfg.seed == args.seed}
    for name in (args.label, args.warm_label):
        if name not in pick:
            valid = ", ".join(sorted(pick)) or f"none: seed {args.seed} is not one of the sweep's seeds"
            print(f"flagship_run: no run of label {name!r} and seed {args.seed} in {args.spec}; labels: {valid}",
                  file=sys.stderr)  # fmt: skip
            return 2
    if args.set:  # RL options of both runs (a baseline checkout is never given any)
        from bench.perf.rl_settings import with_rl_settings

        for r in pick.values():
            r.cfg = with_rl_settings(r.cfg, args.set)
    run(pick[args.warm_label].cfg, progress=False)
    meter = Meter()
    tokens = Tokens(meter)
    instrument(meter, tokens)
    ops = OpSplit(meter) if args.ops else None
    cfg = pick[args.label].cfg
    wall, cpu = time.perf_counter(), time.process_time()
    meter.last, meter.on = cpu, True
    profile = os.environ.get("FLAGSHIP_PROFILE")  # a path: the measured run's cProfile statistics go there
    if profile:
        import cProfile

        profiler = cProfile.Profile()
        result = profiler.runcall(run, cfg, progress=False)
        profiler.dump_stats(profile)
    elif ops:
        with ops.mode:
            result = run(cfg, progress=False)
    else:
        result = run(cfg, progress=False)
    meter._charge()
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    final = result["final"]
    out = {
        "code": os.path.dirname(os.path.dirname(os.path.abspath(bench.__file__))),
        "run": pick[args.label].key,
        "cpu_s": cpu,
        "wall_s": wall,
        "phases": meter.seconds,
        "tokens": tokens.by_phase,
        "samples": result["samples"],
        "final": {k: final[k] for k in ("pass_at_1", "pass_at_4", "mean_length") if k in final},
        "history": [h["eval"] for h in result["history"]],
        "threads": torch.get_num_threads(),
        "packed_update": getattr(cfg.rl, "packed_update", False),  # older code: the padded layout
        "old_logprobs": getattr(cfg.rl, "old_logprobs", "rescore"),
        "ops": ops.seconds if ops else None,
        "result": {k: v for k, v in result.items() if k not in ("wall_s", "mlflow_run_id", "fingerprint")},
    }
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
