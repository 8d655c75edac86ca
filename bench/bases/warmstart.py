"""The supervised warm-start: a tiny policy learns the task's solution format until its sampled
accuracy reaches a target, leaving room for RL. It is itself a Lightning run logged to MLflow,
deterministic for its seed, and cached per (task, task version, task options, size, settings):
every RL run of that task and size starts from the same base checkpoint.

The base is the checked checkpoint whose accuracy on a fixed check set is closest to the target.
These tasks are learned in a sharp transition (chain: 0.09 to 0.68 within 25 steps on one CPU),
and where it falls moves with the floats; when the accuracy jumps past the target by more than the
tolerance between two checks, the warm-start is replayed from its seed (the same trajectory: checks
draw from their own seeded generator) checking every step across the jump; where one step still
crosses it (chain: 0.21 to 0.33 in one step), the base takes that step in part, the fraction found by
bisection, so the base lands within the tolerance wherever the transition falls
(tests/run/test_reproducibility.py). The committed results'
bases are pinned copies (bench.bases.bases): they are installed, not rebuilt, and their weights are
checked against the pin on every load."""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import json
import shutil
import time
from functools import partial
from pathlib import Path

import lightning as L
import torch
from torch.utils.data import DataLoader

from bench.bases import bases
from bench.config import SamplingConfig, WarmStartConfig
from bench.core import Task
from bench.engine.progress import duration
from bench.engine.rollout import HFRolloutEngine
from bench.engine.seeding import seeded
from bench.errors import CreditBenchError
from bench.models.policy import build_tiny, num_parameters, sized

RECIPE_VERSION = "2"  # bump when a code change alters what the warm-start produces: it invalidates the cache
CHECK_ROWS = 200  # held-out train rows used for the accuracy check (not trained on here)


class SFTModule(L.LightningModule):
    def __init__(
        self, model, tokenizer, task: Task, cfg: WarmStartConfig, check_rows: list[dict], dense: range = range(0)
    ):
        super().__init__()
        self.model, self.tokenizer, self.task, self.cfg, self.check_rows = model, tokenizer, task, cfg, check_rows
        self.engine = HFRolloutEngine(model, tokenizer)
        self.dense = dense  # steps checked one by one (the replay across a jump)
        self.checks: dict[int, float] = {}  # step -> check accuracy
        self.best: tuple[float, int, dict] | None = None  # (|accuracy - target|, step, weights)
        self.kept: dict[int, dict] = {}  # step -> weights, for the dense steps (the partial step's ends)
        self.last_accuracy = 0.0

    def training_step(self, rows: list[dict], batch_idx: int):
        tok = self.tokenizer
        prompts = [self.task.prompt(r, tok) for r in rows]
        p_len = [len(p) for p in tok(prompts, add_special_tokens=False)["input_ids"]]
        full = tok([p + r["solution"] for p, r in zip(prompts, rows)], add_special_tokens=False)["input_ids"]
        seqs = [f + [tok.eos_token_id] for f in full]
        T = max(map(len, seqs))
        ids = torch.full((len(seqs), T), tok.pad_token_id, dtype=torch.long)
        for i, s in enumerate(seqs):
            ids[i, : len(s)] = torch.tensor(s)
        pos = torch.arange(T)[None]
        lengths = torch.tensor([len(s) for s in seqs])[:, None]
        real = pos < lengths  # [B, T]; right padding only follows real tokens, so causal attention needs no mask
        labels = ids.masked_fill(~real | (pos < torch.tensor(p_len)[:, None]), -100)  # loss on the solution only
        loss = self.model(input_ids=ids.to(self.device), labels=labels.to(self.device)).loss
        self.log("warmstart/loss", loss, prog_bar=True, batch_size=len(rows))
        return loss

    def on_train_batch_end(self, outputs, batch, batch_idx: int) -> None:
        step = self.global_step
        if step in self.dense or (not self.dense and step % self.cfg.check_every == 0):
            acc = self.last_accuracy = self.checks[step] = self.accuracy()
            self.log("warmstart/check_accuracy", acc, prog_bar=True)
            weights = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
            if step in self.dense:
                self.kept[step] = weights
            if closest(self.checks, self.cfg.target_accuracy) == step:
                self.best = (abs(acc - self.cfg.target_accuracy), step, weights)
            if acc >= self.cfg.target_accuracy:
                self.trainer.should_stop = True

    @torch.no_grad()
    def accuracy(self) -> float:
        """Sampled accuracy on the check rows, ``check_samples`` each, from a generator seeded with the
        warm-start's seed: a function of the weights, and no draw from the training's random stream."""
        prompts = [self.task.prompt(r, self.tokenizer) for r in self.check_rows]
        n = self.cfg.check_samples
        with seeded(self.cfg.seed):
            gen = self.engine.generate(prompts, n, SamplingConfig(max_new_tokens=64))
        rows = [r for r in self.check_rows for _ in range(n)]  # the rows in generate's order: p0s0, p0s1, ...
        outcomes = self.task.verify(gen.texts, rows, details=False)
        return sum(o.correct for o in outcomes) / len(outcomes)

    def configure_optimizers(self):
        opt = torch.optim.AdamW(self.model.parameters(), lr=self.cfg.lr, betas=(0.9, 0.98), weight_decay=0.0)
        warm = self.cfg.warmup_steps
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / max(1, warm)))
        return [opt], [{"scheduler": sched, "interval": "step"}]


def closest(checks: dict[int, float], target: float) -> int:
    """The checked step whose accuracy is closest to the target (the earliest of a tie)."""
    return min(sorted(checks), key=lambda s: abs(checks[s] - target))


def partial_step(module, before: dict, after: dict, target: float, tolerance: float, iters: int = 12):
    """The fraction ``a`` of one optimizer step (weights ``before + a * (after - before)``) whose check
    accuracy is within ``tolerance`` of the target, by bisection (accuracy below the target at 0, at or
    above it at 1): for a transition sharper than one step. Returns (a, accuracy, weights) of the
    closest point tried."""
    lo, hi, best = 0.0, 1.0, None
    for _ in range(iters):
        a = (lo + hi) / 2
        w = {k: before[k] + a * (after[k] - before[k]) if before[k].is_floating_point() else after[k] for k in before}
        module.model.load_state_dict(w)
        acc = module.accuracy()
        if best is None or abs(acc - target) < abs(best[1] - target):
            best = (a, acc, w)
        if abs(acc - target) <= tolerance:
            break
        lo, hi = (a, hi) if acc < target else (lo, a)
    return best


def replay_window(checks: dict[int, float], target: float, tolerance: float) -> range | None:
    """The steps to check one by one in a replay, or None when none is needed: after the first check
    at or above the target, when no check landed within ``tolerance`` of it, the steps from the
    check before it to it."""
    steps = sorted(checks)
    if any(abs(a - target) <= tolerance for a in checks.values()):
        return None
    over = next((i for i, s in enumerate(steps) if checks[s] >= target), None)
    if over is None:
        return None  # never reached (max_steps): the closest check is the base
    return range(steps[over - 1] if over else 1, steps[over] + 1)


def base_dir(cache_dir: str, task_name: str, task: Task, size: str, cfg: WarmStartConfig) -> Path:
    cfg = sized(cfg, size)
    key = json.dumps(
        {
            "recipe": RECIPE_VERSION,
            "task": task_name,
            "version": task.VERSION,
            "task_config": dataclasses.asdict(task.config),
            "size": size,
            "warmstart": dataclasses.asdict(cfg),
        },
        sort_keys=True,
    )
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    return Path(cache_dir) / "base" / task_name / f"{size}-{digest}"


def base_checkpoint(
    task_name: str,
    task: Task,
    size: str,
    cfg: WarmStartConfig,
    cache_dir: str,
    tracking_uri: str,
    progress: bool = True,
) -> Path:
    """The cached base checkpoint for (task, size): the pinned copy when there is one
    (bench.bases.bases), else built by a warm-start run, once. Its weights are checked against their
    pin on every call. The warm-start announces itself in one line (:func:`announcement`); a process
    that finds another one building the same checkpoint says so and waits for it."""
    cfg = sized(cfg, size)
    out = base_dir(cache_dir, task_name, task, size, cfg)
    if (out / "warmstart.json").exists():
        bases.verify(out)
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.parent / f".{out.name}.lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # concurrent runs wait for one warm-start
            print(
                f"warm-start: waiting for another process to finish building the {size} base checkpoint "
                f"for {task_name!r} ({out}); this run starts from it when it is done",
                flush=True,
            )
            fcntl.flock(lock, fcntl.LOCK_EX)
        if not (out / "warmstart.json").exists():
            if bases.install(out):
                print(f"warm-start: installed the pinned {size} base for {task_name!r} ({bases.key_of(out)}) in {out}")
            else:
                warm_start(task_name, task, size, cfg, out, tracking_uri, progress)
        bases.verify(out)
        return out


def warm_start(
    task_name: str, task: Task, size: str, cfg: WarmStartConfig, out: Path, tracking_uri: str, progress: bool = True
) -> Path:
    """Build the base checkpoint at ``out`` (one thread: the same sums in the same order whatever the
    machine's core count), replaying across a jump past the target (:func:`replay_window`)."""
    rows = task.load("train")
    if "solution" not in rows.column_names:
        raise CreditBenchError(
            f"task {task_name!r} has no reference solutions, so a tiny model cannot be "
            "warm-started on it; give a trained checkpoint as model.name"
        )
    print(announcement(task_name, size, cfg, out), flush=True)
    check_rows = [rows[i] for i in range(len(rows) - CHECK_ROWS, len(rows))]
    train_rows = rows.select(range(len(rows) - CHECK_ROWS))
    logger = _warmstart_logger(task_name, task, size, cfg, tracking_uri, train_rows)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    try:
        fit = partial(_fit, size, task, cfg, train_rows, check_rows, logger, progress)
        module, tokenizer, chosen = _choose_base(fit, cfg)
    finally:
        torch.set_num_threads(threads)
    module.model.load_state_dict(chosen.pop("weights"))
    chosen["wall_s"] = round(time.perf_counter() - t0, 1)
    return _save_base(module, tokenizer, chosen, task_name, size, cfg, logger, out)


def _warmstart_logger(task_name: str, task: Task, size: str, cfg: WarmStartConfig, tracking_uri: str, train_rows):
    """The warm-start's MLflow run: its tags, settings and training data."""
    from bench.tracking.lineage import log_task_data
    from bench.tracking.tracking import flatten, git_commit, make_logger

    tags = {
        "task": task_name,
        "task_version": task.VERSION,
        "model": size,
        "seed": str(cfg.seed),
        "git_commit": git_commit(),
        "kind": "warmstart",
    }
    logger = make_logger(tracking_uri, "creditbench-warmstart", f"warmstart-{task_name}-{size}-seed{cfg.seed}", tags)
    logger.log_hyperparams({f"warmstart.{k}": v for k, v in flatten(cfg).items()})
    log_task_data(logger, task_name, task, "train", train_rows, "training")
    return logger


def _fit(
    size, task, cfg: WarmStartConfig, train_rows, check_rows, logger, progress: bool, dense: range, max_steps: int
):
    """Supervised fine-tuning from the seed's initialisation for ``max_steps``, checking accuracy on
    the held-out rows (at every step of ``dense``, a replay, which is not logged twice)."""
    from bench.engine.progress import optimizer_steps, step_progress

    L.seed_everything(cfg.seed, verbose=False)
    model, tokenizer = build_tiny(size, seed=cfg.seed)
    module = SFTModule(model, tokenizer, task, cfg, check_rows, dense)
    loader = DataLoader(
        train_rows,
        batch_size=cfg.batch_size,
        shuffle=True,
        collate_fn=lambda b: b,
        generator=torch.Generator().manual_seed(cfg.seed),
        drop_last=True,
    )
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=max_steps,
        max_epochs=-1,
        logger=logger if not dense else False,  # the replay retraces logged steps: not logged twice
        enable_checkpointing=False,
        enable_model_summary=False,
        log_every_n_steps=25,
        gradient_clip_val=1.0,
        enable_progress_bar=progress,
        callbacks=[step_progress("warm-start", max_steps, optimizer_steps, bar=progress)],
    )
    trainer.fit(module, loader)
    return module, tokenizer


def _choose_base(fit, cfg: WarmStartConfig) -> tuple[SFTModule, object, dict]:
    """Train, replay across a jump past the target, and take the step nearest the target accuracy
    (part of a step where one step crosses it): the module, its tokenizer, and what was chosen."""
    module, tokenizer = fit(range(0), cfg.max_steps)
    checks = dict(module.checks)
    window = replay_window(checks, cfg.target_accuracy, cfg.tolerance)
    if window is not None:
        print(
            f"warm-start: check accuracy jumped from {checks.get(window.start, 0.0):.3f} at step {window.start} "
            f"to {checks[window.stop - 1]:.3f} at step {window.stop - 1}; replaying, checking every step between",
            flush=True,
        )
        module, tokenizer = fit(window, window.stop - 1)
        checks |= module.checks
    gap, step, weights = module.best
    fraction, fractions = 1.0, {}
    below = [
        s for s in module.kept if checks[s] < cfg.target_accuracy and checks.get(s + 1, -1.0) >= cfg.target_accuracy
    ]
    if gap > cfg.tolerance and below:  # sharper than one step: take the last step in part
        step = below[-1]
        fraction, acc, weights = partial_step(
            module, module.kept[step], module.kept[step + 1], cfg.target_accuracy, cfg.tolerance
        )
        gap, step, fractions = abs(acc - cfg.target_accuracy), step + 1, {"fraction": fraction, "accuracy": acc}
        print(f"warm-start: one step crosses the target; the base takes {fraction:g} of step {step}", flush=True)
    chosen = {
        "steps": step,
        "step_fraction": fraction,
        "check_accuracy": fractions.get("accuracy", checks[step]),
        "within_tolerance": gap <= cfg.tolerance,
        "replayed": window is not None,
        "checks": {str(k): v for k, v in sorted(checks.items())},
        "weights": weights,
    }
    return module, tokenizer, chosen


def _save_base(
    module, tokenizer, chosen: dict, task_name: str, size: str, cfg: WarmStartConfig, logger, out: Path
) -> Path:
    """Write the base and its warmstart.json next to ``out``, log them, and move them into place."""
    from bench.environment.fingerprint import fingerprint
    from bench.tracking.tracking import log_dict

    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    module.model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    info = {
        "task": task_name,
        "size": size,
        "params": num_parameters(module.model),
        "steps": chosen["steps"],
        "step_fraction": chosen["step_fraction"],
        "check_accuracy": chosen["check_accuracy"],
        "target_accuracy": cfg.target_accuracy,
        "within_tolerance": chosen["within_tolerance"],
        "replayed": chosen["replayed"],
        "checks": chosen["checks"],
        "weights_sha256": bases.weights_sha256(tmp),
        "fingerprint": fingerprint(1),
        "wall_s": chosen["wall_s"],
        "seed": cfg.seed,
        "mlflow_run_id": logger.run_id,
    }
    (tmp / "warmstart.json").write_text(json.dumps(info, indent=2))
    logger.log_metrics({"warmstart/base_check_accuracy": info["check_accuracy"], "warmstart/base_step": info["steps"]})
    log_dict(logger, info, "warmstart.json")
    logger.end("success")
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out


def base_identity(out: Path) -> dict:
    """What a run records of its base: its key, weights digest, step and check accuracy."""
    info = json.loads((out / "warmstart.json").read_text())
    keep = ("weights_sha256", "steps", "step_fraction", "check_accuracy")
    return {"key": bases.key_of(out), **{k: info[k] for k in keep if k in info}}


def announcement(task_name: str, size: str, cfg: WarmStartConfig, out: Path) -> str:
    """The line a warm-start starts with: what it builds and why, how long it may take, and that
    it happens once. The time is what the last warm-start of ``size`` in the same cache took, when
    there was one; the progress bar or lines that follow give the time left from the first step."""
    done = sorted(out.parents[1].glob(f"*/{size}-*/warmstart.json"), key=lambda p: p.stat().st_mtime)
    last = json.loads(done[-1].read_text()) if done else {}
    took = f"the last one of {size} here took {duration(last['wall_s'])}" if "wall_s" in last else "time left below"
    return (
        f"warm-start: building the {size} base checkpoint for {task_name!r}, once: supervised steps on the "
        f"task's reference solutions until sampled accuracy reaches {cfg.target_accuracy:g} (at most "
        f"{cfg.max_steps} steps; {took}), so that RL starts from a policy that is sometimes right. Cached in "
        f"{out}; every later run of this task and size starts from it."
    )


def build_base(task_name: str, size: str, cache_dir: str, tracking_uri: str, fresh: bool = False) -> Path:
    """The base of (task with default options, size) under the default warm-start settings: the
    cached or pinned one, or (``fresh``) warm-started from scratch in ``cache_dir`` whatever is pinned."""
    from bench.options import build_config
    from bench.registry import TASKS

    task_cls = TASKS.get(task_name)
    task, cfg = task_cls(build_config(task_cls.Config, {}, f"task {task_name!r}")), sized(WarmStartConfig(), size)
    if fresh:
        out = base_dir(cache_dir, task_name, task, size, cfg)
        out.parent.mkdir(parents=True, exist_ok=True)
        return warm_start(task_name, task, size, cfg, out, tracking_uri, progress=False)
    return base_checkpoint(task_name, task, size, cfg, cache_dir, tracking_uri, progress=False)
