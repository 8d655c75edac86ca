"""One run of the op-count comparison, counted in this process: creditbench's GRPO through its Lightning
module or TRL's GRPOTrainer (bench.perf.trl_runs), under a ``TorchDispatchMode`` that counts every ATen op
of the measured steps by phase (bench/perf/op_count.py describes the phases, the parts and the workload,
and starts every run in a fresh process, since the phases are marked by wrapping the frameworks'
functions)."""

from __future__ import annotations

import contextlib
import functools
from collections import Counter

from torch.utils._python_dispatch import TorchDispatchMode

PHASES = ("rollout", "score", "loss + backward", "optimizer", "other")
PARTS = ("shared prompt prefix", "finished rows dropped", "credit diagnostics")
# the ops after which the host waits for the device on a GPU (the value or size of their output is read)
SYNCS = frozenset({"_local_scalar_dense", "nonzero", "masked_select", "_unique2", "unique_dim", "unique_consecutive"})


class OpCounter(TorchDispatchMode):
    """Counts the ops dispatched while a measured step is open, by (phase, part, op, whether a view):
    ``phases`` and ``parts`` are the stacks of phases and named parts entered (innermost last; no
    phase outside a measured step); ``nodes`` maps the autograd nodes a part's forward made to the
    part, so its backward is counted with it; ``steps`` holds one Counter per measured step."""

    def __init__(self):
        super().__init__()
        self.phases: list[str] = []
        self.parts: list[str] = []
        self.nodes: dict = {}
        self.steps: list[Counter] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if self.phases:
            part = self.parts[-1] if self.parts else ""
            if not part and self.nodes:
                import torch

                part = self.nodes.get(torch._C._current_autograd_node(), "")
            self.steps[-1][self.phases[-1], part, func.overloadpacket.__name__, func.is_view] += 1
        return func(*args, **(kwargs or {}))

    @contextlib.contextmanager
    def within(self, stack: list[str], name: str):
        """Count the ops dispatched inside under phase or part ``name`` (in a measured step only)."""
        if not self.phases:
            yield
            return
        stack.append(name)
        try:
            yield
        finally:
            stack.pop()

    def begin_step(self) -> None:
        self.steps.append(Counter())
        self.phases[:], self.parts[:] = ["other"], []  # in place: the wrapped functions hold these lists
        self.nodes.clear()

    def end_step(self) -> None:
        self.phases.clear()
        self.nodes.clear()


def _wrap(counter: OpCounter, owner, attr: str, stack: list[str], name: str, when=lambda: True) -> None:
    """Make ``owner.attr`` count its ops under ``name`` in ``stack`` (counter.phases or counter.parts)
    when ``when()`` holds at the call."""
    original = getattr(owner, attr)

    @functools.wraps(original)
    def wrapped(*args, **kwargs):
        if not when():
            return original(*args, **kwargs)
        with counter.within(stack, name):
            return original(*args, **kwargs)

    setattr(owner, attr, wrapped)


def _step_window(counter: OpCounter, warmup: int):
    """(begin, end) of a step, measured from the (warmup + 1)-th on."""
    seen = [0]

    def begin():
        seen[0] += 1
        if seen[0] > warmup:
            counter.begin_step()

    return begin, counter.end_step


def _optimizer_phase(counter: OpCounter) -> None:
    import torch
    from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

    _wrap(counter, torch.nn.utils, "clip_grad_norm_", counter.phases, "optimizer")
    stepping = contextlib.ExitStack()
    register_optimizer_step_pre_hook(lambda *_: stepping.enter_context(counter.within(counter.phases, "optimizer")))
    register_optimizer_step_post_hook(lambda *_: stepping.close())


def _creditbench_phases(counter: OpCounter, warmup: int) -> None:
    import torch
    from transformers.cache_utils import DynamicCache

    from bench.engine import module, rollout, scoring, step

    begin, end = _step_window(counter, warmup)
    original = module.RLVRModule.training_step

    def training_step(self, rows, batch_idx):
        begin()
        try:
            return original(self, rows, batch_idx)
        finally:
            end()

    module.RLVRModule.training_step = training_step
    _wrap(counter, module, "train_rollouts", counter.phases, "rollout")
    _wrap(counter, module.RLVRModule, "score_batch", counter.phases, "score")
    _wrap(counter, module.RLVRModule, "update", counter.phases, "loss + backward")
    _shared_prefix_part(counter, scoring, rollout)
    _wrap(counter, DynamicCache, "batch_select_indices", counter.parts, PARTS[1], when=lambda: not counter.parts)
    _wrap(counter, step, "credit_diagnostics", counter.parts, PARTS[2])
    _wrap(counter, torch.autograd, "grad", counter.parts, PARTS[2])  # the update's one: the credit read off the loss


def _shared_prefix_part(counter: OpCounter, *modules) -> None:
    """Count ``shared_prefix_cache`` (as the ``modules`` that call it hold it) as the shared prompt prefix,
    and, where it runs with gradient, the backward of the autograd nodes it made (from its cache's keys
    and values down to the parameters)."""
    import torch

    original = modules[0].shared_prefix_cache

    @functools.wraps(original)
    def shared_prefix_cache(*args, **kwargs):
        with counter.within(counter.parts, PARTS[0]):
            cache = original(*args, **kwargs)
        if cache is not None and counter.phases and torch.is_grad_enabled():
            todo = [t.grad_fn for layer in cache.layers for t in (layer.keys, layer.values)]
            while todo:
                node = todo.pop()
                if node is not None and node not in counter.nodes and node.name() != "torch::autograd::AccumulateGrad":
                    counter.nodes[node] = PARTS[0]
                    todo += [n for n, _ in node.next_functions]
        return cache

    for m in modules:
        m.shared_prefix_cache = shared_prefix_cache


def _trl_phases(counter: OpCounter, warmup: int) -> None:
    from transformers.trainer_callback import CallbackHandler
    from trl import GRPOTrainer

    begin, end = _step_window(counter, warmup)
    on_begin, on_end = CallbackHandler.on_step_begin, CallbackHandler.on_step_end

    def on_step_begin(self, *args):
        begin()
        return on_begin(self, *args)

    def on_step_end(self, *args):
        end()
        return on_end(self, *args)

    CallbackHandler.on_step_begin, CallbackHandler.on_step_end = on_step_begin, on_step_end
    _wrap(counter, GRPOTrainer, "training_step", counter.phases, "loss + backward")
    _wrap(counter, GRPOTrainer, "_prepare_inputs", counter.phases, "rollout")
    rollout = lambda: counter.phases[-1:] == ["rollout"]  # noqa: E731 -- scoring passes, not the training forward
    _wrap(counter, GRPOTrainer, "_get_per_token_logps_and_entropies", counter.phases, "score", when=rollout)


def count_ops(framework: str, model_dir: str, steps: int, warmup: int, prompts: int) -> dict:
    """Run ``framework``'s matched GRPO (bench.perf.trl_runs) with ``prompts`` a step for warmup + steps RL
    steps in this process and count the measured steps' ops: their means per step, by phase and op."""
    from bench.perf import trl_runs

    trl_runs.PROMPTS = prompts  # this process's workload: trl_runs' functions read it from their module
    counter = OpCounter()
    _optimizer_phase(counter)
    (_creditbench_phases if framework == "creditbench" else _trl_phases)(counter, warmup)
    with counter:
        res = trl_runs.measure(framework, "matched", model_dir, steps, warmup)
    n = len(counter.steps)
    totals: Counter = sum(counter.steps, Counter())
    ops, views, parts = {p: {} for p in PHASES}, Counter(), {p: Counter() for p in PARTS}
    for (phase, part, op, is_view), count in sorted(totals.items()):
        ops[phase][op] = ops[phase].get(op, 0) + count / n
        views[phase] += count / n if is_view else 0
        if part:
            parts[part]["ops"] += count / n
            parts[part]["views"] += count / n if is_view else 0
            parts[part]["syncs"] += count / n if op in SYNCS else 0
    return {
        "ops": ops,
        "views": dict(views),
        "parts": {k: dict(v) for k, v in parts.items()},
        "step_ops": [sum(s.values()) for s in counter.steps],  # every measured step's count
        "step_tokens": res["step_tokens"][warmup:],  # completion tokens generated
    }
