"""One checkpoint's paired updates: every arm takes one RL step's update from the checkpoint's weights and
AdamW state on exactly the same rollout batch, and J is scored after each.

The pairing, held by ``tests/paired/test_paired.py``: the arms' batches come from one shared sampler
(the same prompts, samples, rewards), each arm's augment and update run with the same seeds (the same
minibatch order and draws), and :func:`check_pairing` refuses a batch on which a pair's arms trained on
different samples. A method against itself, or a twin against a copy of itself, differs by exactly 0.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import torch

from bench.config import RunConfig
from bench.core import Method, RolloutBatch
from bench.engine.exact import exact_objective, objective_gradient, references
from bench.engine.microbatch import SCORED
from bench.engine.scoring import REFERENCE_NEEDS, Scored, score_batch
from bench.engine.seeding import seeded
from bench.engine.step import FirstGradient, Optimization, make_optimizer, update
from bench.errors import CreditBenchError
from bench.paired.batches import RowStream, SeededSampler, batch_digest, stream_seed
from bench.paired.plan import Arm, Pair
from bench.paired.trajectory import Checkpoint


@dataclass
class Workspace:
    """What the paired updates from one checkpoint (of a trajectory, bench.paired.trajectory) share: the
    checkpoint's policy (sampled from, never trained), a scratch copy that each arm trains in turn, the
    KL reference policy where a method needs one, the arms' methods, J's reference completions and J and
    its gradient at the checkpoint."""

    checkpoint: Checkpoint
    policy: Any
    scratch: Any
    ref_policy: Any
    tokenizer: Any
    task: Any
    methods: dict[str, Method]
    train_rows: Any
    j_completions: Any  # J's reference completions, one per eval problem (bench.engine.exact.references)
    temperature: float
    j0: float
    grad: list[torch.Tensor]
    probe_seed: int
    oracle_rollouts: int | None = None  # K of the oracle arms' values; None: the probe has no oracle
    truths: dict[str, torch.Tensor] = field(default_factory=dict)  # batch digest -> its true advantages

    @classmethod
    def build(cls, cfg: RunConfig, checkpoint: Checkpoint, arms: list[Arm], problems: int, probe_seed: int):
        """From ``cfg`` (the trajectory's run configuration: base, task, eval split) and the checkpoint."""
        from bench.engine.data import load_split
        from bench.run.resolve import resolve
        from bench.run.train import base_policy

        r = resolve(cfg)
        methods = {arm.key: resolve(arm.cfg).method for arm in arms}
        policy, tokenizer, ref, _, _ = base_policy(cfg, r)
        if ref is None and any(m.required & REFERENCE_NEEDS for m in methods.values()):
            ref = copy.deepcopy(policy).requires_grad_(False).eval()  # the base, as a run's KL reference
        policy.load_state_dict(checkpoint.weights)
        eval_rows = load_split(r.task, "eval")
        rows = [eval_rows[i] for i in range(min(problems, len(eval_rows)))]
        j_completions = references(r.task, rows, tokenizer)
        temperature = cfg.eval.sampling.temperature or 1.0
        j0, _ = exact_objective(policy, j_completions, temperature)
        grad = objective_gradient(policy, j_completions, temperature)
        oracles = [arm.cfg.method.oracle_rollouts for arm in arms if arm.cfg.method.oracle]
        ws = cls(
            checkpoint=checkpoint,
            policy=policy,
            scratch=copy.deepcopy(policy),
            ref_policy=ref,
            tokenizer=tokenizer,
            task=r.task,
            methods=methods,
            train_rows=load_split(r.task, "train"),
            j_completions=j_completions,
            temperature=temperature,
            j0=j0,
            grad=grad,
            probe_seed=probe_seed,
            oracle_rollouts=oracles[0] if oracles else None,
        )
        for m in methods.values():
            if getattr(m, "oracle", False):
                m.estimates = ws.truth  # every oracle arm of a batch takes one estimate
        return ws

    def seed(self, *parts: object) -> int:
        return stream_seed(self.probe_seed, self.checkpoint.name, *parts)

    def sampler(self, policy, cfg: RunConfig, seed: int, shared: bool) -> SeededSampler:
        return SeededSampler(policy, self.tokenizer, self.task, cfg.rl.sampling, seed, shared)

    def truth(self, batch: RolloutBatch, sampler: SeededSampler) -> torch.Tensor:
        """Each completion token's Monte-Carlo step advantage on ``batch`` under the checkpoint's policy
        (bench.engine.oracle), estimated once per batch with the batch's own seed: the same whichever arm
        asks first. A sampler of another policy (a segment's arm) estimates afresh, in the caller's seed."""
        from bench.engine.oracle import true_advantages

        K, steps = self.oracle_rollouts or 1, self.task.step_delimiter
        if sampler.policy is not self.policy:
            return true_advantages(batch, sampler, K, steps)
        key = batch_digest(batch)
        if key not in self.truths:
            with seeded(self.seed("oracle", key)):
                self.truths[key] = true_advantages(batch, sampler, K, steps)
        return self.truths[key].clone()

    def reset(self) -> None:
        """The scratch policy back at the checkpoint's weights."""
        self.scratch.load_state_dict(self.policy.state_dict())

    def optimization(self, arm: Arm) -> Optimization:
        """AdamW over the scratch policy with the checkpoint's state (none at the base), at ``arm``'s rate."""
        opt, schedule = make_optimizer(self.scratch, arm.cfg.rl)
        if self.checkpoint.optimizer is not None:
            opt.load_state_dict(copy.deepcopy(self.checkpoint.optimizer))
        for group in opt.param_groups:  # the trajectory's rate is in its saved state: the arm's replaces it
            group["lr"] = group["initial_lr"] = arm.lr
        return Optimization(opt, schedule)

    def alignment(self, before: list[torch.Tensor]) -> dict[str, float]:
        """How the scratch policy's change from ``before`` aligns with grad J at the checkpoint: the
        first-order improvement grad J . d theta (in points of J), its cosine and |d theta|."""
        after = [p.detach() for p in self.scratch.parameters() if p.requires_grad]
        dot = sum(float((g.double() * (a - b).double()).sum()) for g, a, b in zip(self.grad, after, before))
        step = sum(float(((a - b).double() ** 2).sum()) for a, b in zip(after, before)) ** 0.5
        gnorm = sum(float((g.double() ** 2).sum()) for g in self.grad) ** 0.5
        return {"first_order": 100 * dot, "cos": dot / (step * gnorm) if step and gnorm else 0.0, "step_norm": step}


class SharedScores:
    """The scoring passes of one checkpoint's batch, shared by its arms: the scratch policy is at the
    checkpoint's weights whenever an arm scores, so two arms whose batches hold the same samples
    (:func:`batch_digest`), whose methods ask for the same passes and whose options score alike get the
    same scores. The first computes them; the others get copies of the fields scoring wrote."""

    def __init__(self) -> None:
        self.kept: dict[tuple, tuple[Scored, dict[str, Any], dict[str, Any]]] = {}

    def score(self, ws: Workspace, arm: Arm, batch: RolloutBatch) -> Scored:
        method, rl = ws.methods[arm.key], arm.cfg.rl
        options = (rl.sampling.temperature, rl.micro_batch_tokens, rl.lm_head_chunk_elements, rl.ppo_epochs,
                   rl.minibatches, rl.old_logprobs)  # fmt: skip
        key = (batch_digest(batch), bytes(batch.prompt_mask.cpu().numpy()), frozenset(method.required), options)
        if key not in self.kept:
            extra = set(batch.extra)
            scored = score_batch(ws.scratch, ws.ref_policy, method, batch, rl=rl)
            fields = {name: getattr(batch, name) for name in SCORED}
            self.kept[key] = (scored, fields, {k: v for k, v in batch.extra.items() if k not in extra})
            return scored
        scored, fields, extra = self.kept[key]
        for name, value in fields.items():
            setattr(batch, name, None if value is None else value.clone())
        batch.extra.update({k: v.clone() for k, v in extra.items()})
        return scored


def rl_step(
    ws: Workspace, arm: Arm, batch: RolloutBatch, opt: Optimization, seed: int, scores: SharedScores | None = None
) -> dict[str, float]:
    """Score ``batch`` for ``arm``'s method (or take the scores another arm computed on it, from ``scores``)
    and apply its update to the scratch policy, seeded."""
    method, rl = ws.methods[arm.key], arm.cfg.rl
    with seeded(seed):  # the minibatch order, a method's own draws
        if scores is None:
            scored = score_batch(ws.scratch, ws.ref_policy, method, batch, rl=rl)
        else:
            scored = scores.score(ws, arm, batch)
        return update(ws.scratch, method, batch, rl, opt=opt, scored=scored)


def draw(
    ws: Workspace, arm: Arm, sampler: SeededSampler, seed: int, augmented: dict | None = None
) -> tuple[RolloutBatch, RolloutBatch]:
    """``arm``'s batch from ``sampler`` as drawn (the prompts of the stream ``seed``, refilled from it where
    the method drops groups) and as it trains on it, with what the method adds (``augment``, seeded). With
    ``augmented`` (a batch's cache), arms whose methods augment alike (one recipe at several rates, a method
    and its placebo) on the same drawn batch take a copy of the first one's: the same seed, batch and policy
    give the same values (VinePPO's continuations, IBPO's revisions)."""
    from bench.engine.sampling import train_rollouts

    method, rl = ws.methods[arm.key], arm.cfg.rl
    stream = RowStream(ws.train_rows, stream_seed(seed, "rows"))
    drawn = train_rollouts(sampler, method, stream.refill(rl.prompts_per_step), rl, stream.refill)
    raw = copy.deepcopy(drawn.batch)
    inner = getattr(method, "method", method)  # a placebo augments as its method does
    key = (type(inner).__name__, repr(getattr(inner, "config", None)), getattr(method, "oracle", False),
           batch_digest(raw), bytes(raw.prompt_mask.cpu().numpy()))  # fmt: skip
    if augmented is not None and key in augmented:
        return raw, copy.deepcopy(augmented[key])
    with seeded(stream_seed(seed, "augment")):
        out = method.augment(drawn.batch, sampler)
    if augmented is not None:
        augmented[key] = copy.deepcopy(out)
    return raw, out


def paired_batch(
    ws: Workspace,
    arms: list[Arm],
    index: int,
    pairs: list[Pair],
    blame: bool = True,
    share: bool = True,
    oracle: bool = True,
) -> list[dict[str, Any]]:
    """Batch ``index`` of the checkpoint: one update per arm from the checkpoint on the shared batch; one
    record per arm (with each label's blame alignment where ``blame``, and its credit quality against the
    true advantages where the probe has oracle arms and ``oracle``: else the oracle arms sit the batch
    out). With ``share`` the arms share
    what they compute alike: the scoring passes (:class:`SharedScores`) and, among one label's rates, the
    first minibatch's gradient (:class:`bench.engine.step.FirstGradient`); the records are the same to
    the bit either way (tests/paired/test_paired.py)."""
    seed = ws.seed("batch", index)
    sampler = ws.sampler(ws.policy, arms[0].cfg, seed, shared=True)
    before = [p.detach().clone() for p in ws.policy.parameters() if p.requires_grad]
    out, aligned = [], {}
    scores = SharedScores() if share else None
    augmented: dict | None = {} if share else None
    first: dict[str, FirstGradient] = {}
    truth = oracle and ws.oracle_rollouts is not None
    for arm in [a for a in arms if truth or not a.cfg.method.oracle]:
        raw, batch = draw(ws, arm, sampler, seed, augmented)
        if blame and arm.label not in aligned:  # the credit at the checkpoint (ratio 1) is the same at any rate
            aligned[arm.label] = blame_alignment(ws, arm, raw, sampler, truth)
        ws.reset()
        opt = ws.optimization(arm)
        if share:  # a label's arms differ only in the rate, which acts after the first gradient
            opt.first_gradient = first.setdefault(f"{arm.label}/{batch_digest(batch)}", FirstGradient())
        stats = rl_step(ws, arm, batch, opt, stream_seed(seed, "update"), scores)
        j1, _ = exact_objective(ws.scratch, ws.j_completions, ws.temperature)
        out.append(
            {
                **ws.checkpoint.info(),
                "batch": index,
                "label": arm.label,
                "lr": arm.lr,
                "j_before": ws.j0,
                "j_after": j1,
                "dj": 100 * (j1 - ws.j0),
                **ws.alignment(before),
                "samples": batch.size,
                "loss": stats.get("loss/total"),
                "skipped": stats["train/skipped_updates"],
                "fingerprint": batch_digest(batch),  # the key on disk: the batch digest
                **aligned.get(arm.label, {}),
            }
        )
    check_pairing(out, pairs)
    return out


def blame_alignment(
    ws: Workspace, arm: Arm, batch: RolloutBatch, sampler: SeededSampler, truth: bool = False
) -> dict[str, float | None]:
    """How much of the method's effective credit on the (drawn, not augmented) batch's failed completions
    lands on the token where each first went wrong (bench.engine.blame), under the checkpoint's policy:
    ``blame_share`` (uniform credit gives ``blame_uniform_share``), ``blame_rank_frac`` (0.5 is chance),
    over ``blame_n`` rows; with ``truth``, the same credit against the batch's true advantages
    (bench.engine.credit_quality): ``quality_rank_corr``, ``quality_worst_share`` and so on."""
    from bench.engine.blame import alignment, blame_tokens
    from bench.engine.credit_map import effective_credit
    from bench.engine.credit_quality import credit_quality

    method = ws.methods[arm.key]
    b, credit = effective_credit(ws.policy, ws.ref_policy, method, sampler, arm.cfg.rl, batch, [])
    tokens = blame_tokens(sampler, b)
    rows = [i for i, t in enumerate(tokens) if t is not None]
    a = alignment(credit, b.completion_mask, rows, [tokens[i] for i in rows])
    keys = ("share", "rank_frac", "uniform_share", "n")
    out = {f"blame_{k}": a.get(k) for k in keys}
    if truth:  # the drawn batch's digest is every arm's of the label: one estimate for all of them
        n = batch.size  # the method's own rows (effective_credit's augment) come after the drawn ones
        q = credit_quality(credit[:n], ws.truth(batch, sampler), b.completion_mask[:n], b.correct[:n])
        out |= {f"quality_{k}": (None if v != v else v) for k, v in q.items()}  # NaN: no completion defines it
    return out


def check_pairing(records: list[dict[str, Any]], pairs: list[Pair]) -> None:
    """Refuse a batch on which the arms of a pair trained on different samples: their difference would
    carry the batch's noise, not only the credit's effect."""
    seen: dict[str, set[str]] = {}
    for r in records:
        seen.setdefault(r["label"], set()).add(r["fingerprint"])
    for p in pairs:
        digests = seen.get(p.method, set()) | seen.get(p.control, set())
        if len(digests) > 1:
            raise CreditBenchError(
                f"the pairing is broken: {p.method} and {p.control} trained on different batches at "
                f"trajectory {records[0]['reference']} seed {records[0]['seed']} phase {records[0]['phase']} batch "
                f"{records[0]['batch']} (batch digests {sorted(digests)})"
            )
