"""Rollout engines: what :class:`RolloutEngine` asks of one, and ``HFRolloutEngine``, which samples with
Hugging Face ``generate`` (KV cache, one batched call for every prompt x sample, each distinct prompt
prefilled once and its KV cache shared by its samples); it is always available and is what the tests
use. The vLLM engine is in :mod:`bench.engine.vllm_engine`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Protocol

import torch
from torch import Tensor

from bench.config import SamplingConfig
from bench.engine.lean_forward import cache_name
from bench.engine.scoring import shared_prefix_cache


@dataclass
class Generation:
    prompt_ids: Tensor  # [B, P] left-padded
    prompt_mask: Tensor  # [B, P]
    completion_ids: Tensor  # [B, T] right-padded with pad
    completion_mask: Tensor  # [B, T] up to and including the first eos
    truncated: Tensor  # [B] no eos within the budget
    texts: list[str]  # decoded completions, special tokens removed
    logprobs: Tensor | None = None  # [B, T] the engine's log-prob of each sampled token (vLLM), else None
    behaviour: Behaviour | None = None  # the sampling policy's log-probs and entropies, where asked for and lean


def rollout_mismatch(trainer_logprobs: Tensor, rollout_logprobs: Tensor, mask: Tensor) -> dict[str, float]:
    """How far the rollout engine's sampled-token log-probs are from the trainer's, over the valid
    tokens of ``mask`` (positions without an engine log-prob, NaN, are skipped): the mean of
    |log pi_trainer - log pi_engine| and the largest probability ratio in either direction,
    exp(max |log pi_trainer - log pi_engine|) (1 when they agree exactly)."""
    diff = (trainer_logprobs.detach().float() - rollout_logprobs.float()).abs()  # [B, T]
    valid = mask.bool() & diff.isfinite()
    if not valid.any():
        return {}
    d = diff[valid]
    return {"rollout/logprob_abs_diff_mean": float(d.mean()), "rollout/prob_ratio_max": float(d.max().exp())}


def completion_mask(completion_ids: Tensor, eos_id: int) -> tuple[Tensor, Tensor]:
    """Mask up to and including the first eos; rows without eos are truncated (all ones)."""
    is_eos = completion_ids == eos_id  # [B, T]
    seen_before = (is_eos.long().cumsum(-1) - is_eos.long()) > 0  # an eos strictly earlier
    return (~seen_before).long(), ~is_eos.any(-1)


class RolloutEngine(Protocol):
    """What the module samples with. An engine that samples from the training policy itself sees every
    update at once; a ``separate`` one holds its own copy of the weights, which ``sync`` refreshes after
    each update (and after a resume), and may free its memory with ``sleep`` from the end of the
    rollouts to the next ``sync``. Both are no-ops for an engine that is not separate."""

    separate: ClassVar[bool]  # holds its own copy of the weights

    def generate(self, prompts: list[str], n: int, sampling: SamplingConfig) -> Generation:
        """``n`` completions for each prompt, as rows p0s0, p0s1, ..., p1s0, ... (grouped)."""
        ...

    def generate_ids(self, sequences: list[Tensor], max_new_tokens: int, sampling: SamplingConfig) -> Generation:
        """One completion for each token-id sequence (e.g. a prompt followed by a forced prefix)."""
        ...

    def sync(self, policy) -> None:
        """Sample from ``policy``'s current weights from now on."""
        ...

    def sleep(self) -> None:
        """Free what the engine holds until the next ``sync`` (the update needs the memory)."""
        ...

    def close(self) -> None:
        """Release the engine for good (its memory and any process-wide state)."""
        ...


class HFRolloutEngine:
    """Samples with the policy's own ``generate``: it sees every update at once, so there is nothing
    to sync, put to sleep or close."""

    separate: ClassVar[bool] = False
    records_behaviour: ClassVar[bool] = True  # generate(behaviour=True) scores what it samples

    def __init__(self, model, tokenizer, lean: bool = True):
        self.model = model
        self.tokenizer = tokenizer
        self.lean = lean  # decode with lean_decode where it applies (the same tokens as generate, less work)

    def sync(self, policy) -> None:
        pass

    def sleep(self) -> None:
        pass

    def close(self) -> None:
        pass

    @torch.no_grad()
    def generate(self, prompts: list[str], n: int, sampling: SamplingConfig, behaviour: bool = False) -> Generation:
        """``n`` completions for each prompt, as rows p0s0, p0s1, ..., p1s0, ... (grouped); with
        ``behaviour``, also the sampling policy's log-prob and entropy at each sampled token
        (``Generation.behaviour``) where the lean decode runs (:func:`lean_applies`), else None."""
        enc = self.tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
        device = next(self.model.parameters()).device
        ids = enc["input_ids"].repeat_interleave(n, 0).to(device)
        mask = enc["attention_mask"].repeat_interleave(n, 0).to(device)
        return self._generate(ids, mask, sampling.max_new_tokens, sampling, behaviour)

    @torch.no_grad()
    def generate_ids(self, sequences: list[Tensor], max_new_tokens: int, sampling: SamplingConfig) -> Generation:
        """One completion for each token-id sequence (e.g. a prompt followed by a forced prefix)."""
        P = max(len(s) for s in sequences)
        pad = self.tokenizer.pad_token_id
        ids = torch.stack([torch.cat([s.new_full((P - len(s),), pad), s]) for s in sequences])
        mask = torch.stack([torch.cat([s.new_zeros(P - len(s)), torch.ones_like(s)]) for s in sequences])
        return self._generate(ids, mask, max_new_tokens, sampling)

    def _prompt_cache(self, ids: Tensor, mask: Tensor):
        """The KV cache of the prompts' first P-1 tokens, computed once per distinct prompt and
        shared by its rows (n samples per prompt), or None (then ``generate`` prefills every row)."""
        if getattr(self.model.generation_config, "cache_implementation", None) is not None:
            return None
        masked = not bool(mask.all())
        position_ids = (mask.long().cumsum(-1) - 1).clamp(min=0) if masked else None
        return shared_prefix_cache(self.model, ids, mask, position_ids, masked)

    def _generate(
        self, ids: Tensor, mask: Tensor, max_new_tokens: int, sampling: SamplingConfig, behaviour: bool = False
    ) -> Generation:
        tok = self.tokenizer
        was_training = self.model.training
        self.model.eval()
        cache = self._prompt_cache(ids, mask)
        record = None
        if cache is not None and self.lean and lean_applies(self.model, sampling):
            eos, pad = tok.eos_token_id, tok.pad_token_id
            record = Behaviour(ids.shape[0], max_new_tokens, sampling, ids.device) if behaviour else None
            out = lean_decode(self.model, ids, mask, cache, max_new_tokens, sampling, eos, pad, record)
        else:
            out = self._hf_generate(ids, mask, cache, max_new_tokens, sampling)
        self.model.train(was_training)
        comp = out[:, ids.shape[1] :]
        cmask, truncated = completion_mask(comp, tok.eos_token_id)
        comp = comp.masked_fill(cmask == 0, tok.pad_token_id)
        texts = tok.batch_decode(comp, skip_special_tokens=True)
        if record is not None:
            record.trim(comp.shape[1], cmask)
        return Generation(ids, mask, comp, cmask, truncated, texts, behaviour=record)

    def _hf_generate(self, ids: Tensor, mask: Tensor, cache, max_new_tokens: int, sampling: SamplingConfig) -> Tensor:
        tok = self.tokenizer
        greedy = sampling.temperature == 0
        return self.model.generate(
            input_ids=ids,
            attention_mask=mask,
            do_sample=not greedy,
            temperature=None if greedy else sampling.temperature,
            top_p=None if greedy else sampling.top_p,
            top_k=None if greedy else sampling.top_k,
            max_new_tokens=max_new_tokens,
            pad_token_id=tok.pad_token_id,
            eos_token_id=tok.eos_token_id,
            use_cache=True,
            # each process generates on its own: under FSDP the weights are gathered whole before the
            # rollouts (ShardPlan.gathered), so no per-token sync between processes is needed
            synced_gpus=False,
            **({} if cache is None else {cache_name(): cache}),
        )


# Generation-config fields whose non-default value makes ``generate`` add a logits processor (or change
# the stopping) that :func:`lean_decode` does not apply: with any of them set, ``generate`` samples.
_PROCESSOR_FIELDS = (
    "repetition_penalty",
    "encoder_repetition_penalty",
    "no_repeat_ngram_size",
    "encoder_no_repeat_ngram_size",
    "bad_words_ids",
    "force_words_ids",
    "min_length",
    "min_new_tokens",
    "forced_bos_token_id",
    "forced_eos_token_id",
    "suppress_tokens",
    "begin_suppress_tokens",
    "sequence_bias",
    "guidance_scale",
    "min_p",
    "typical_p",
    "epsilon_cutoff",
    "eta_cutoff",
    "exponential_decay_length_penalty",
    "renormalize_logits",
    "remove_invalid_values",
    "watermarking_config",
    "stop_strings",
    "max_time",
    "num_beams",
    "num_beam_groups",
    "penalty_alpha",
    "assistant_model",
    "prompt_lookup_num_tokens",
    "compile_config",
    "cache_implementation",
)


def lean_applies(model, sampling: SamplingConfig) -> bool:
    """Whether :func:`lean_decode` samples exactly what ``generate`` would: plain sampling at a
    temperature (or greedy), no top-k or top-p filter, and a model whose generation config adds no
    other logits processor."""
    from transformers import GenerationConfig

    if sampling.temperature != 0 and (sampling.top_k or sampling.top_p < 1.0):
        return False
    config, default = getattr(model, "generation_config", None), GenerationConfig()
    if config is None:
        return False
    return all(getattr(config, f, None) == getattr(default, f, None) for f in _PROCESSOR_FIELDS)


@torch.no_grad()
def lean_decode(
    model,
    ids: Tensor,
    mask: Tensor,
    cache,
    max_new_tokens: int,
    sampling: SamplingConfig,
    eos: int,
    pad: int,
    record: Behaviour | None = None,
) -> Tensor:
    """``generate``'s sampling loop without its machinery, and without the rows that have finished.

    ``cache`` holds the prompts' first P-1 tokens (:func:`bench.engine.scoring.shared_prefix_cache`);
    each step runs the model (through :mod:`bench.engine.lean_forward` where it applies: the same
    operations without the module machinery) on the rows still generating only (a row's logits do not
    depend on the other rows of the batch), with the inputs ``generate`` gives it (the last token, the attention
    mask so far, the position after the row's last real token). Sampling draws over every row, the
    finished ones with a placeholder distribution, so the generator advances exactly as in
    ``generate``: the same seed gives the same tokens (tests/engine/test_lean.py). Returns the
    prompts followed by the completions, a finished row padded with ``pad``, as ``generate`` does.

    Few ops a step (each is a kernel launch on a GPU, where a small model's step is bound by them): the
    attention mask is built once and sliced (:class:`_DecodeMask`); one read of the count of rows still
    generating decides both whether to stop and whether to drop rows; and until a row finishes, nothing
    is done for finished rows. ``record``: where given, each step's sampled tokens are scored from the
    same logits (:class:`Behaviour`)."""
    from bench.engine import lean_forward

    lean = lean_forward.supports(model)
    call = (lambda **kw: lean_forward.forward(model, **kw)) if lean else model
    B = ids.shape[0]
    positions = mask.long().cumsum(-1) - 1
    step_ids, step_pos = ids[:, -1:], positions[:, -1:]
    attn = _DecodeMask(mask, max_new_tokens, prebuilt=lean)
    rows = torch.arange(B, device=ids.device)  # the rows still generating, in batch order
    unfinished = torch.ones(B, dtype=torch.bool, device=ids.device)
    out, past = [ids], {cache_name(): cache}  # the cache's keyword, looked up once
    for t in range(max_new_tokens):
        logits = (
            call(
                input_ids=step_ids,
                attention_mask=attn.step(t),
                position_ids=step_pos,
                use_cache=True,
                logits_to_keep=1,
                **past,
            )
            .logits[:, -1]
            .float()
        )
        every = len(rows) == B  # no row has finished
        tokens = _next_tokens(logits, sampling, rows, unfinished, pad, every)
        if record is not None:
            record.add(t, logits, tokens if every else tokens[rows], None if every else rows)
        out.append(tokens[:, None])
        if t == max_new_tokens - 1:  # the budget's last token: no step follows to stop or shrink
            break
        unfinished = unfinished & (tokens != eos)
        keep = unfinished if every else unfinished[rows]  # a finished row is not in rows: any() is keep.any()
        left = int(keep.sum())
        if left == 0:
            break
        if left < len(rows):
            kept = torch.nonzero_static(keep, size=left).squeeze(-1)  # its size known: no wait for the device
            cache.batch_select_indices(kept)
            rows, step_pos = rows[kept], step_pos[kept]
            attn.keep(kept, rows)
        step_ids, step_pos = (tokens if len(rows) == B else tokens[rows])[:, None], step_pos + 1
    return torch.cat(out, dim=-1)


class Behaviour:
    """The sampling policy's log-prob of each sampled token and the entropy of its distribution, at the
    temperature the trainer scores with (``sampling.temperature``, 1 when greedy), from the logits the
    decode step sampled from: ``logprobs`` and ``entropy`` [B, T], 0 past each row's completion. The
    scoring pass's quantities (bench.numerics), on a decode step's logits (its KV cache) in place of a
    whole-sequence forward's: equal to float rounding."""

    def __init__(self, B: int, max_new_tokens: int, sampling: SamplingConfig, device) -> None:
        self.temperature = sampling.temperature or 1.0
        self.logprobs = torch.zeros(B, max_new_tokens, device=device)
        self.entropy = torch.zeros(B, max_new_tokens, device=device)

    def add(self, t: int, logits: Tensor, tokens: Tensor, rows: Tensor | None) -> None:
        """Step ``t``: ``logits`` [r, V] of ``rows`` (None: every row), the ``tokens`` [r] they drew: one
        log-softmax gives both the token's log-prob and the entropy."""
        logp = torch.log_softmax(logits.float() / self.temperature, -1)  # [r, V]
        lp = logp.gather(-1, tokens[:, None])[:, 0]
        ent = -(logp.exp() * logp).sum(-1)  # bench.numerics.entropy_from_logits, from the same log-softmax
        if rows is None:
            self.logprobs[:, t], self.entropy[:, t] = lp, ent
        else:
            self.logprobs[rows, t], self.entropy[rows, t] = lp, ent

    def trim(self, T: int, mask: Tensor) -> None:
        """To the completions' ``T`` columns, 0 outside their ``mask``."""
        keep = mask[:, :T].to(self.logprobs.dtype)
        self.logprobs, self.entropy = self.logprobs[:, :T] * keep, self.entropy[:, :T] * keep


class _DecodeMask:
    """The attention mask of each decode step, for the rows still generating.

    Where the model runs through :mod:`bench.engine.lean_forward` (SDPA, full attention), it is what the
    model's ``create_causal_mask`` makes of the 2D mask for one query after the cache: None when no row
    is padded (SDPA needs no mask), else each row's padding mask as [rows, 1, 1, kv] bool (causally every
    key is visible). Built once for every step and sliced, it spares each step the mask's construction
    (up to ~30 ops) and its host sync (tests/engine/test_lean.py holds it equal to the model's). Else it
    is the 2D mask, which the model turns into its own."""

    def __init__(self, mask: Tensor, max_new_tokens: int, prebuilt: bool):
        self.P = mask.shape[1]
        full = torch.cat([mask, mask.new_ones(mask.shape[0], max_new_tokens)], dim=-1)  # [B, P + max_new]
        self.padded_rows = (mask == 0).any(-1) if prebuilt else None  # [B]
        self.mask: Tensor | None = full
        if prebuilt:
            self.mask = full.bool()[:, None, None, :] if bool(self.padded_rows.any()) else None

    def step(self, t: int) -> Tensor | None:
        """The mask of decode step ``t`` (keys: the P prompt columns and the t tokens sampled before)."""
        return None if self.mask is None else self.mask[..., : self.P + t]

    def keep(self, kept: Tensor, rows: Tensor) -> None:
        """Keep the mask's rows ``kept``, which are the batch's ``rows`` (the model's is None once no
        padded row is left)."""
        if self.mask is None:
            return
        self.mask = self.mask[kept]
        if self.padded_rows is not None and not bool(self.padded_rows[rows].any()):
            self.mask = None


def _next_tokens(
    logits: Tensor, sampling: SamplingConfig, rows: Tensor, unfinished: Tensor, pad: int, every: bool
) -> Tensor:  # [B]
    """Every row's next token from the logits of ``rows`` ([len(rows), V], all of them when ``every``):
    greedy or sampled; a finished row gets ``pad``, having drawn from a placeholder distribution."""
    B = unfinished.shape[0]
    if sampling.temperature == 0:
        picked = torch.argmax(logits, dim=-1)
        if every:
            return picked
        tokens = torch.full((B,), pad, dtype=picked.dtype, device=picked.device)
        tokens[rows] = picked
        return tokens
    scores = logits if sampling.temperature == 1.0 else logits / sampling.temperature
    if every:
        return torch.multinomial(torch.nn.functional.softmax(scores, dim=-1), num_samples=1).squeeze(1)
    # a finished row draws from a placeholder distribution, so every row draws as in generate
    V = scores.shape[-1]
    probs = torch.full((B, V), 1.0 / V, dtype=scores.dtype, device=scores.device)
    probs[rows] = torch.nn.functional.softmax(scores, dim=-1)
    tokens = torch.multinomial(probs, num_samples=1).squeeze(1)
    return torch.where(unfinished, tokens, torch.full_like(tokens, pad))
