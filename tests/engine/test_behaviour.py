"""The two update options that move bits (bench.config.RLConfig): ``old_logprobs: rollout`` takes the
behaviour log-probs and entropies from the decode steps, and ``packed_update`` runs the update's forward
and backward on the valid positions only. Each is held against the path it replaces: the same tokens,
the same quantities to float rounding, an update whose weights agree to float rounding; where the
rollout cannot give them (a forced prefix), the batch is rescored; and a run's identity keeps the
committed runs' where the options are off."""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
from pathlib import Path

import pytest
import torch

from bench.config import RLConfig, RunConfig, SamplingConfig
from bench.core import RolloutBatch
from bench.engine import scoring
from bench.engine.checkpoint_dir import LATER, config_hash
from bench.engine.rollout import HFRolloutEngine
from bench.engine.sampling import BEHAVIOUR, RolloutSampler, records_behaviour
from bench.engine.scoring import score, score_batch
from bench.engine.step import Optimization, make_optimizer, update
from bench.errors import CreditBenchError
from bench.models.policy import build_tiny
from bench.registry import METHODS
from bench.run.args import run_config
from bench.run.resolve import resolve
from tests.engine.test_step import G

PROMPTS = ["12+34=", "7*8+1=", "9+9=", "5+3+2="]


class _Task:
    """A verifier that calls every completion with an even length correct."""

    def prompt(self, row, tokenizer):
        return row["prompt"]

    def verify(self, texts, rows, details=False):
        @dataclasses.dataclass
        class Outcome:
            reward: float
            correct: bool
            parsed: str = ""
            correct_flexible: bool = False

        return [Outcome(float(len(t) % 2 == 0), len(t) % 2 == 0) for t in texts]


@pytest.fixture(scope="module")
def tiny():
    model, tok = build_tiny("tiny-500k", seed=0)
    return model.eval(), tok


def _rollout(model, tok, temperature: float, behaviour: bool, max_new_tokens: int = 24) -> RolloutBatch:
    sampling = SamplingConfig(temperature=temperature, top_p=1.0, top_k=0, max_new_tokens=max_new_tokens)
    sampler = RolloutSampler(HFRolloutEngine(model, tok), tok, _Task(), sampling, policy=model)
    torch.manual_seed(3)
    batch, _ = sampler.rollout([{"prompt": p} for p in PROMPTS], G, sampling, details=False, behaviour=behaviour)
    return batch


@pytest.mark.parametrize("temperature", [1.0, 0.7, 0.0])
def test_the_rollout_scores_what_it_sampled_as_the_scoring_pass_does(tiny, temperature):
    model, tok = tiny
    plain, batch = _rollout(model, tok, temperature, False), _rollout(model, tok, temperature, True)
    assert torch.equal(plain.completion_ids, batch.completion_ids)  # recording draws nothing
    assert set(BEHAVIOUR) <= set(batch.extra) and not set(BEHAVIOUR) & set(plain.extra)
    lp, ent = (batch.extra[k] for k in BEHAVIOUR)
    mask = batch.completion_mask.bool()
    lengths = batch.completion_mask.sum(-1)
    assert lengths.min() < lengths.max() or temperature == 0.0  # rows finished at different steps
    with torch.no_grad():
        ref = score(model, batch.prompt_ids, batch.prompt_mask, batch.completion_ids, batch.completion_mask,
                    temperature or 1.0, with_entropy=True)  # fmt: skip
    assert float((lp - ref.logprobs)[mask].abs().max()) < 1e-5
    assert float((ent - ref.entropy)[mask].abs().max()) < 1e-5
    assert bool((lp[~mask] == 0).all()) and bool((ent[~mask] == 0).all())
    assert float(lp[mask].max()) <= 0.0 and float(lp[mask].min()) < -0.1  # real log-probs, not a constant


def _rl(**kw) -> RLConfig:
    kw = {"old_logprobs": "rescore", "packed_update": False, **kw}  # the paths the options replace
    return RLConfig(prompts_per_step=len(PROMPTS), group_size=G, minibatches=2, lr=1e-3, grad_clip=0.0, **kw)


def test_scoring_takes_the_rollouts_log_probs_and_runs_no_pass_of_the_policy(tiny, monkeypatch):
    model, tok = tiny
    batch = _rollout(model, tok, 1.0, True)
    method = METHODS.get("grpo")(METHODS.get("grpo").Config(kl_coef=0.0))
    calls = []
    forward = scoring.forward
    monkeypatch.setattr(scoring, "forward", lambda *a, **k: calls.append(1) or forward(*a, **k))
    score_batch(model, None, method, batch, rl=_rl(old_logprobs="rollout"))
    assert calls == [] and batch.old_logprobs is batch.extra[BEHAVIOUR[0]]
    assert batch.entropy is batch.extra[BEHAVIOUR[1]]
    # rescore computes them, and so does a batch with a row the rollout did not sample whole
    again = _rollout(model, tok, 1.0, True)
    score_batch(model, None, method, again, rl=_rl())
    assert calls == [1] and again.old_logprobs is not again.extra[BEHAVIOUR[0]]
    forced = _rollout(model, tok, 1.0, True)
    forced.extra[BEHAVIOUR[0]][0, 0] = float("nan")  # what complete() leaves for a forced prefix
    score_batch(model, None, method, forced, rl=_rl(old_logprobs="rollout"))
    assert calls == [1, 1] and bool(torch.isfinite(forced.old_logprobs).all())


def test_a_forced_prefix_leaves_the_completed_rows_unknown(tiny):
    model, tok = tiny
    sampling = SamplingConfig(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=16)
    sampler = RolloutSampler(HFRolloutEngine(model, tok), tok, _Task(), sampling, policy=model)
    batch = _rollout(model, tok, 1.0, True, max_new_tokens=16)
    index = torch.tensor([0, 3])
    out = sampler.complete(batch, index, [batch.completion_ids[0, :2], batch.completion_ids[3, :1]])
    assert bool(out.extra[BEHAVIOUR[0]].isnan().all())
    merged = RolloutBatch.concat([batch, out])
    grpo, rl = METHODS.get("grpo")(METHODS.get("grpo").Config(kl_coef=0.0)), _rl(old_logprobs="rollout")
    assert scoring._from_rollout(grpo, batch, rl) and not scoring._from_rollout(grpo, merged, rl)  # rescored whole


def _updated(model, batch: RolloutBatch, rl: RLConfig):
    policy = copy.deepcopy(model).train()
    method = METHODS.get("grpo")(METHODS.get("grpo").Config(kl_coef=0.0))
    opt, sched = make_optimizer(policy, rl)
    with torch.random.fork_rng():
        torch.manual_seed(7)
        scored = score_batch(policy, None, method, batch, rl=rl)
        stats = update(policy, method, batch, rl, opt=Optimization(opt, sched), scored=scored)
    return policy.state_dict(), stats


def _close(a: dict, b: dict, tol: float) -> float:
    """The largest difference of two state dicts relative to the largest change of any weight."""
    return max(float((a[k] - b[k]).abs().max()) for k in a) / tol


@pytest.mark.parametrize("options", [{"old_logprobs": "rollout"}, {"packed_update": True}])
def test_an_update_with_the_option_is_the_update_without_it_to_float_rounding(tiny, options):
    model, tok = tiny
    batch = _rollout(model, tok, 1.0, True)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    plain, plain_stats = _updated(model, copy.deepcopy(batch), _rl())
    other, other_stats = _updated(model, copy.deepcopy(batch), _rl(**options))
    moved = sum(float((plain[k] - before[k]).double().square().sum()) for k in plain) ** 0.5
    apart = sum(float((plain[k] - other[k]).double().square().sum()) for k in plain) ** 0.5
    assert moved > 1e-2  # the update moves the weights (lr 1e-3, two optimizer steps)
    assert apart < 1e-3 * moved
    assert plain_stats["train/clip_frac"] == pytest.approx(other_stats["train/clip_frac"], abs=1e-6)


def _first_minibatch(model, batch: RolloutBatch, name: str, rl: RLConfig) -> dict[str, float]:
    """The credit diagnostics of ``name``'s first minibatch (the gradient on each token's log-prob, before
    any step), and the loss."""
    policy = copy.deepcopy(model).train()
    method = METHODS.get(name)(METHODS.get(name).Config())
    opt, sched = make_optimizer(policy, rl)
    with torch.random.fork_rng():
        torch.manual_seed(7)
        scored = score_batch(policy, None, method, batch, rl=rl)
        stats = update(policy, method, batch, rl, opt=Optimization(opt, sched), scored=scored)
    return {k: v for k, v in stats.items() if k.startswith("credit/")}


def test_the_first_minibatch_is_on_policy_to_the_bit_with_the_rollouts_log_probs(tiny):
    """P-trace's current-token clip ties its two branches at ratio 1 and takes the traced one, so the
    history gets its gradient; the rollout's log-probs are off by rounding, which would break the tie
    either way token by token. The first minibatch takes its own forward's instead: the same credit,
    to the bit, as with a scoring pass."""
    model, tok = tiny
    batch = _rollout(model, tok, 1.0, True)
    batch.rewards = torch.arange(batch.size, dtype=torch.float32) % 3  # mixed rewards in every group
    rescored = _first_minibatch(model, copy.deepcopy(batch), "p_trace", _rl())
    rolling = copy.deepcopy(batch)
    rolled = _first_minibatch(model, rolling, "p_trace", _rl(old_logprobs="rollout"))
    assert rescored and rescored == rolled
    assert rolling.old_logprobs is rolling.extra[BEHAVIOUR[0]]  # the batch keeps the rollout's for later epochs
    lp = batch.extra[BEHAVIOUR[0]]
    with torch.no_grad():
        s = score(model, batch.prompt_ids, batch.prompt_mask, batch.completion_ids, batch.completion_mask, 1.0)
    assert bool((lp != s.logprobs)[batch.completion_mask.bool()].any())  # the rollout's are not the pass's bits


def test_the_packed_forward_gives_the_same_log_probs_and_input_gradients(tiny):
    model, tok = tiny
    batch = _rollout(model, tok, 1.0, False)
    policy = copy.deepcopy(model).train()
    args = (batch.prompt_ids, batch.prompt_mask, batch.completion_ids, batch.completion_mask)
    grads = []
    for packed in (False, True):
        policy.zero_grad()
        s = score(policy, *args, with_entropy=False, packed=packed)
        (s.logprobs * batch.completion_mask).sum().backward()
        grads.append({n: p.grad.clone() for n, p in policy.named_parameters()})
        if not packed:
            padded = s.logprobs.detach()
    assert torch.equal(padded * batch.completion_mask, s.logprobs.detach() * batch.completion_mask)
    for n in grads[0]:
        scale = float(grads[0][n].abs().max()) or 1.0
        assert float((grads[0][n] - grads[1][n]).abs().max()) <= 1e-5 * scale, n


def test_the_options_are_checked_in_one_line():
    with pytest.raises(CreditBenchError, match="old_logprobs.*rescore.*rollout"):
        run_config({"rl": {"old_logprobs": "cached"}})
    cfg = run_config({"rl": {"old_logprobs": "rollout", "minibatches": 2}, "rollout": {"engine": "vllm"}})
    with pytest.raises(CreditBenchError, match=r"rl.old_logprobs rollout .*\(rollout.engine hf\)"):
        resolve(cfg)
    assert resolve(run_config({"rl": {"minibatches": 2}, "rollout": {"engine": "vllm"}}))  # auto: rescored


def test_auto_records_where_the_update_is_not_fused_and_the_engine_can():
    hf = HFRolloutEngine(None, None)

    class Other:
        separate = False

    auto = {"old_logprobs": "auto"}
    assert records_behaviour(hf, RLConfig(minibatches=2, **auto)) and records_behaviour(
        hf, RLConfig(ppo_epochs=2, **auto)
    )
    assert not records_behaviour(hf, RLConfig(**auto))  # fused: the training forward gives them
    assert records_behaviour(hf, RLConfig(minibatches=2))  # the default is auto
    assert not records_behaviour(hf, RLConfig(minibatches=2, old_logprobs="rescore"))
    assert not records_behaviour(Other(), RLConfig(minibatches=2, **auto))


def test_a_run_made_before_the_options_keeps_its_identity():
    """A run with the options at what runs did before them hashes as it did then (its config without
    them), and any other setting is another run; the committed runs' identities are the ones their
    specs give now."""
    cfg = RunConfig()
    before = dataclasses.replace(cfg, rl=dataclasses.replace(cfg.rl, old_logprobs="rescore", packed_update=False))
    d = dataclasses.asdict(before)
    d["tracking"] = {k: v for k, v in d["tracking"].items() if k in ("uri", "experiment", "run_name", "sweep")}
    for key in ("checkpoint", "threads"):
        d.pop(key)
    for key in ("micro_batch_tokens", "lm_head_chunk_elements", *LATER):
        d["rl"].pop(key)
    for key in ("oracle", "oracle_rollouts"):  # the method's oracle, added later, off
        d["method"].pop(key)
    d["warmstart"]["lr"] = 1e-3  # null since the sizes' own rates: tiny-500k's, 1e-3, as runs had before
    assert config_hash(before) == hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:16]
    settings = [{"old_logprobs": o, "packed_update": p} for o, p in
                (("rescore", False), ("rollout", False), ("rescore", True), ("auto", True))]  # fmt: skip
    hashes = {config_hash(dataclasses.replace(cfg, rl=dataclasses.replace(cfg.rl, **o))) for o in settings}
    assert len(hashes) == 4
    oracle = dataclasses.replace(cfg, method=dataclasses.replace(cfg.method, oracle=True))
    assert config_hash(oracle) != config_hash(cfg)
    from bench.sweep.sweep import load_spec

    sweep = load_spec("results/sweeps/embedded.yaml")
    committed = Path("results/embedded/runs")
    checked = 0
    for r in sweep.runs:
        path = committed / f"{r.key}.json"
        if path.exists():
            assert json.loads(path.read_text())["tags"]["config_hash"] == r.config_hash, r.key
            checked += 1
    assert checked >= 20
