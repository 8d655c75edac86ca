"""One run of the TRL comparison, measured in this process: creditbench's GRPO through its Lightning
module, TRL's GRPOTrainer, or the floor (bench/perf/trl.py describes the shared workload and the
settings, and starts every run in a fresh process through :func:`measure`, so that its peak memory
is its own)."""

from __future__ import annotations

import resource
import statistics
import tempfile
import time

# The workload: prompts per step, completions per prompt, new tokens, AdamW's lr, betas and weight decay, the
# grad-norm clip, the seed.
PROMPTS, G, MAX_NEW, LR, BETAS, WD, CLIP, SEED = 16, 8, 32, 1e-4, (0.9, 0.99), 0.0, 1.0, 0
TRAIN_SIZE = 4096  # arithmetic train problems: plenty for 16 x (warm-up + measured) steps, and quick to build
# creditbench's fastest settings on this CPU (measured, see trl.md): its defaults. bf16-mixed is slower here
# (no avx512_bf16/amx: autocast emulates bf16 matmuls), and gradient checkpointing only costs compute.
CREDITBENCH_BEST = {"precision": "32-true", "gradient_checkpointing": False}
CREDITBENCH_MATCHED = {"precision": "32-true", "gradient_checkpointing": False}


def _task():
    from bench.registry import TASKS

    task_cls = TASKS.get("arithmetic")
    return task_cls(task_cls.Config(train_size=TRAIN_SIZE))


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def _sync(device: str) -> None:
    """Wait for the GPU's queued work, so that a step's clock covers it (nothing on the CPU)."""
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


def _summary(times: list[float], tokens: list[int], cpu: list[float], warmup: int) -> dict:
    t, n = times[warmup:], tokens[warmup:]
    return {
        "step_s": statistics.median(t),
        "tokens_per_s": sum(n) / sum(t),
        "tokens_per_step": sum(n) / len(n),
        "cpu_s": statistics.median(cpu[warmup:]),
        "step_times_s": times,
        "step_tokens": tokens,
        "step_cpu_s": cpu,
        "peak_rss_mib": _peak_rss_mib(),
        "peak_gpu_mib": _peak_gpu_mib(),
    }


def _peak_gpu_mib() -> float | None:
    import torch

    return torch.cuda.max_memory_allocated() / 2**20 if torch.cuda.is_initialized() else None


# ---------------------------------------------------------------------------------------- creditbench
def measure_creditbench(
    model_dir: str, steps: int, warmup: int, settings: dict | None = None, device: str = "cpu"
) -> dict:
    """creditbench's GRPO (beta 0) through RLVRModule for warmup + steps RL steps (on ``device``)."""
    import lightning as L
    import torch

    from bench.config import EvalConfig, RLConfig, SamplingConfig
    from bench.engine.data import PromptDataModule
    from bench.engine.fit import MemoryLogger
    from bench.engine.module import RLVRModule
    from bench.models.policy import enable_gradient_checkpointing, load_policy
    from bench.registry import METHODS

    settings = settings or CREDITBENCH_MATCHED
    total = warmup + steps
    task = _task()
    method_cls = METHODS.get("grpo")
    method = method_cls(method_cls.Config(kl_coef=0.0))
    L.seed_everything(SEED, verbose=False)
    model, tok = load_policy(model_dir)
    if settings.get("gradient_checkpointing"):
        enable_gradient_checkpointing(model)
    rl = RLConfig(
        steps=total,
        prompts_per_step=PROMPTS,
        group_size=G,
        lr=LR,
        betas=BETAS,
        weight_decay=WD,
        grad_clip=CLIP,
        sampling=SamplingConfig(temperature=1.0, max_new_tokens=MAX_NEW),
    )
    module = RLVRModule(model, tok, method, task, "arithmetic", rl, EvalConfig(every=10**6))
    times: list[float] = []
    tokens: list[int] = []
    cpu: list[float] = []

    class Clock(L.Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            self.t0, self.c0, self.n0 = time.perf_counter(), time.process_time(), pl_module.tokens

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            _sync(device)
            times.append(time.perf_counter() - self.t0)
            cpu.append(time.process_time() - self.c0)
            tokens.append(pl_module.tokens - self.n0)

    logger = MemoryLogger()
    trainer = L.Trainer(
        accelerator="gpu" if device == "cuda" else "cpu",
        devices=1,
        max_steps=total,
        logger=logger,
        callbacks=[Clock()],
        precision=settings.get("precision", "32-true"),
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        limit_val_batches=0,
    )
    trainer.fit(module, datamodule=PromptDataModule(task, PROMPTS, EvalConfig(), SEED))
    out = _summary(times, tokens, cpu, warmup)
    rows = [r for r in logger.rows if "time/step_s" in r][warmup:]
    out["breakdown_s"] = {
        k: statistics.median(r[k] for r in rows)
        for k in ("time/rollout_s", "time/verify_s", "time/score_s", "time/update_s", "time/step_s")
    }
    out["torch_threads"] = torch.get_num_threads()
    return out


# ---------------------------------------------------------------------------------------- TRL
def creditbench_adamw() -> str:
    """TRL's name for the AdamW implementation ``RLVRModule`` builds (the fused kernel or the per-tensor
    loop), so that the matched setting runs the same optimizer code on both sides."""
    from bench.config import EvalConfig, RLConfig
    from bench.engine.module import RLVRModule
    from bench.models.policy import build_tiny
    from bench.registry import METHODS

    model, tok = build_tiny("tiny-500k")
    grpo = METHODS.get("grpo")
    module = RLVRModule(
        model,
        tok,
        grpo(grpo.Config(kl_coef=0.0)),
        _task(),
        "arithmetic",
        RLConfig(steps=1, lr=LR, betas=BETAS, weight_decay=WD),
        EvalConfig(),
    )
    opt = module.configure_optimizers()[0][0]
    return "adamw_torch_fused" if opt.defaults.get("fused") else "adamw_torch"


def trl_args(setting: str, steps: int, out_dir: str, optim: str = "adamw_torch", device: str = "cpu"):
    """GRPOConfig of ``setting``: "matched" (fp32, no checkpointing, loss_type grpo, ``optim`` -- creditbench's
    AdamW implementation --, constant lr) or "defaults" (TRL's own defaults at the same workload)."""
    from trl import GRPOConfig

    workload = {
        "output_dir": out_dir,
        "max_steps": steps,
        "per_device_train_batch_size": PROMPTS * G,
        "gradient_accumulation_steps": 1,
        "num_generations": G,
        "max_completion_length": MAX_NEW,
        "num_iterations": 1,
        "beta": 0.0,
        "temperature": 1.0,
        "learning_rate": LR,
        "adam_beta1": BETAS[0],
        "adam_beta2": BETAS[1],
        "weight_decay": WD,
        "max_grad_norm": CLIP,
        "use_cpu": device == "cpu",
        "report_to": "none",
        "save_strategy": "no",
        "seed": SEED,
        "disable_tqdm": True,
        "dataloader_num_workers": 0,
    }
    if setting == "matched":
        return GRPOConfig(
            **workload,
            bf16=False,
            gradient_checkpointing=False,
            loss_type="grpo",
            scale_rewards="group",
            epsilon=0.2,
            optim=optim,
            lr_scheduler_type="constant",
            model_init_kwargs={"dtype": "float32"},
        )
    if setting == "defaults":
        return GRPOConfig(**workload)
    raise ValueError(f"unknown TRL setting {setting!r}")


def measure_trl(
    model_dir: str, steps: int, warmup: int, setting: str = "matched", optim: str | None = None, device: str = "cpu"
) -> dict:
    """TRL's GRPOTrainer for warmup + steps optimizer steps (one generation batch each). ``optim``: the
    matched setting's AdamW implementation (default: creditbench's, see ``creditbench_adamw``)."""
    import torch
    from transformers import AutoTokenizer, TrainerCallback
    from trl import GRPOTrainer

    total = warmup + steps
    task = _task()
    rows = task.load("train").select(range(PROMPTS * (total + 2)))
    columns = rows.column_names
    data = rows.map(lambda r: {"prompt": task.prompt(r)})
    counted: list[int] = []

    def reward(prompts, completions, completion_ids, **kw):
        counted.append(sum(len(c) for c in completion_ids))
        problems = [{c: kw[c][i] for c in columns} for i in range(len(completions))]
        return [o.reward for o in task.verify(completions, problems, details=False)]

    times: list[float] = []
    tokens: list[int] = []
    cpu: list[float] = []

    class Clock(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            self.t0, self.c0, self.n0 = time.perf_counter(), time.process_time(), len(counted)

        def on_step_end(self, args, state, control, **kw):
            _sync(device)
            times.append(time.perf_counter() - self.t0)
            cpu.append(time.process_time() - self.c0)
            tokens.append(sum(counted[self.n0 :]))

    tok = AutoTokenizer.from_pretrained(model_dir)
    tok.padding_side = "left"
    with tempfile.TemporaryDirectory() as out_dir:
        args = trl_args(
            setting,
            total,
            out_dir,
            optim or (creditbench_adamw() if setting == "matched" else "adamw_torch"),
            device,
        )
        trainer = GRPOTrainer(
            model=model_dir,
            reward_funcs=reward,
            args=args,
            train_dataset=data,
            processing_class=tok,
            callbacks=[Clock()],
        )
        trainer.train()
    out = _summary(times, tokens, cpu, warmup)
    out["torch_threads"] = torch.get_num_threads()
    out["trl_loss_type"] = trainer.args.loss_type
    out["trl_bf16"] = bool(trainer.args.bf16)
    out["trl_optim"] = str(getattr(trainer.args.optim, "value", trainer.args.optim))
    return out


# ---------------------------------------------------------------------------------------- floor
def measure_floor(model_dir: str, steps: int, warmup: int, device: str = "cpu") -> dict:
    """Bare generate of the batch + one forward/backward + AdamW step over the same tokens (fp32, on ``device``)."""
    import torch

    from bench.models.policy import load_policy

    task = _task()
    rows = task.load("eval")
    model, tok = load_policy(model_dir)
    model.to(device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=BETAS, weight_decay=WD)
    torch.manual_seed(SEED)
    times, tokens, cpu = [], [], []
    for i in range(warmup + steps):
        prompts = [task.prompt(rows[(PROMPTS * i + j) % len(rows)]) for j in range(PROMPTS)]
        t0, c0 = time.perf_counter(), time.process_time()
        enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False).to(device)
        ids, mask = enc["input_ids"].repeat_interleave(G, 0), enc["attention_mask"].repeat_interleave(G, 0)
        with torch.no_grad():
            seq = model.generate(
                input_ids=ids,
                attention_mask=mask,
                do_sample=True,
                top_k=0,
                max_new_tokens=MAX_NEW,
                pad_token_id=tok.pad_token_id,
                eos_token_id=tok.eos_token_id,
            )
        comp = seq[:, ids.shape[1] :]
        is_eos = comp == tok.eos_token_id
        cmask = ((is_eos.long().cumsum(-1) - is_eos.long()) == 0).float()  # up to and including the first eos
        T = comp.shape[1]
        logits = model(input_ids=seq, attention_mask=torch.cat([mask, cmask.long()], 1), logits_to_keep=T + 1).logits
        logp = torch.log_softmax(logits[:, :-1].float(), -1).gather(-1, comp.unsqueeze(-1)).squeeze(-1)
        (-(logp * cmask).sum() / cmask.sum()).backward()
        opt.step()
        opt.zero_grad()
        _sync(device)
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        tokens.append(int(cmask.sum()))
    out = _summary(times, tokens, cpu, warmup)
    out["torch_threads"] = torch.get_num_threads()
    return out


def measure(
    framework: str,
    setting: str,
    model_dir: str,
    steps: int,
    warmup: int,
    trl_optim: str | None = None,
    device: str = "cpu",
) -> dict:
    """One run's figures (in this process): step_s (median after warm-up), tokens_per_s, peak_rss_mib, ..."""
    if framework == "creditbench":
        settings = CREDITBENCH_BEST if setting == "best" else CREDITBENCH_MATCHED
        return measure_creditbench(model_dir, steps, warmup, settings, device)
    if framework == "trl":
        return measure_trl(model_dir, steps, warmup, setting, trl_optim, device)
    if framework == "floor":
        return measure_floor(model_dir, steps, warmup, device)
    raise ValueError(f"unknown framework {framework!r}")
