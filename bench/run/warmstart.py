"""The supervised warm-start: a tiny policy learns the task's solution format until its sampled
accuracy reaches a target, leaving room for RL. It is itself a Lightning run logged to MLflow,
deterministic for its seed, and cached per (task, task version, task options, size, settings):
every RL run of that task and size starts from the same base checkpoint."""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import json
import shutil
import time
from pathlib import Path

import lightning as L
import torch
from torch.utils.data import DataLoader

from bench.config import SamplingConfig, WarmStartConfig
from bench.core import Task
from bench.engine.policy import build_tiny, num_parameters
from bench.engine.rollout import HFRolloutEngine
from bench.errors import CreditBenchError
from bench.run.progress import duration

RECIPE_VERSION = "1"  # bump when a code change alters what the warm-start produces: it invalidates the cache
CHECK_ROWS = 200  # held-out train rows used for the accuracy check (not trained on here)


class SFTModule(L.LightningModule):
    def __init__(self, model, tokenizer, task: Task, cfg: WarmStartConfig, check_rows: list[dict]):
        super().__init__()
        self.model, self.tokenizer, self.task, self.cfg, self.check_rows = model, tokenizer, task, cfg, check_rows
        self.engine = HFRolloutEngine(model, tokenizer)
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
        if step % self.cfg.check_every == 0:
            self.last_accuracy = self.accuracy()
            self.log("warmstart/check_accuracy", self.last_accuracy, prog_bar=True)
            if self.last_accuracy >= self.cfg.target_accuracy:
                self.trainer.should_stop = True

    @torch.no_grad()
    def accuracy(self) -> float:
        prompts = [self.task.prompt(r, self.tokenizer) for r in self.check_rows]
        gen = self.engine.generate(prompts, 1, SamplingConfig(max_new_tokens=64))
        outcomes = self.task.verify(gen.texts, self.check_rows, details=False)
        return sum(o.correct for o in outcomes) / len(outcomes)

    def configure_optimizers(self):
        opt = torch.optim.AdamW(self.model.parameters(), lr=self.cfg.lr, betas=(0.9, 0.98), weight_decay=0.0)
        warm = self.cfg.warmup_steps
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / max(1, warm)))
        return [opt], [{"scheduler": sched, "interval": "step"}]


def base_dir(cache_dir: str, task_name: str, task: Task, size: str, cfg: WarmStartConfig) -> Path:
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
    """The cached base checkpoint for (task, size), built by a warm-start run if missing. The run
    announces itself in one line (:func:`announcement`); a process that finds another one building
    the same checkpoint says so and waits for it."""
    out = base_dir(cache_dir, task_name, task, size, cfg)
    if (out / "warmstart.json").exists():
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
        if (out / "warmstart.json").exists():
            return out
        rows = task.load("train")
        if "solution" not in rows.column_names:
            raise CreditBenchError(
                f"task {task_name!r} has no reference solutions, so a tiny model cannot be "
                "warm-started on it; give a trained checkpoint as model.name"
            )
        print(announcement(task_name, size, cfg, out), flush=True)
        check_rows = [rows[i] for i in range(len(rows) - CHECK_ROWS, len(rows))]
        train_rows = rows.select(range(len(rows) - CHECK_ROWS))
        L.seed_everything(cfg.seed, verbose=False)
        model, tokenizer = build_tiny(size, seed=cfg.seed)
        module = SFTModule(model, tokenizer, task, cfg, check_rows)
        loader = DataLoader(
            train_rows,
            batch_size=cfg.batch_size,
            shuffle=True,
            collate_fn=lambda b: b,
            generator=torch.Generator().manual_seed(cfg.seed),
            drop_last=True,
        )
        from bench.run.lineage import log_task_data
        from bench.run.progress import optimizer_steps, step_progress
        from bench.run.tracking import flatten, git_commit, log_dict, make_logger

        logger = make_logger(
            tracking_uri,
            "creditbench-warmstart",
            f"warmstart-{task_name}-{size}-seed{cfg.seed}",
            {
                "task": task_name,
                "task_version": task.VERSION,
                "model": size,
                "seed": str(cfg.seed),
                "git_commit": git_commit(),
                "kind": "warmstart",
            },
        )
        logger.log_hyperparams({f"warmstart.{k}": v for k, v in flatten(cfg).items()})
        log_task_data(logger, task_name, task, "train", train_rows, "training")
        trainer = L.Trainer(
            accelerator="cpu",
            devices=1,
            max_steps=cfg.max_steps,
            max_epochs=-1,
            logger=logger,
            enable_checkpointing=False,
            enable_model_summary=False,
            log_every_n_steps=25,
            gradient_clip_val=1.0,
            enable_progress_bar=progress,
            callbacks=[step_progress("warm-start", cfg.max_steps, optimizer_steps, bar=progress)],
        )
        t0 = time.perf_counter()
        trainer.fit(module, loader)
        wall = time.perf_counter() - t0
        tmp = out.with_name(out.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        info = {
            "task": task_name,
            "size": size,
            "params": num_parameters(model),
            "steps": trainer.global_step,
            "check_accuracy": module.last_accuracy,
            "wall_s": round(wall, 1),
            "seed": cfg.seed,
            "mlflow_run_id": logger.run_id,
        }
        (tmp / "warmstart.json").write_text(json.dumps(info, indent=2))
        log_dict(logger, info, "warmstart.json")
        logger.end("success")
        shutil.rmtree(out, ignore_errors=True)
        tmp.rename(out)
        return out


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
