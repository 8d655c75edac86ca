"""Benchmark: gradient accumulation by token budget (rl.micro_batch_tokens) against the unsplit update.

    python -m bench.perf.microbatch [--model tiny-2m] [--groups 8] [--group-size 8]
                                    [--budgets 512 1024 2048] [--out results/benchmarks/microbatch]

One rollout batch of ``--groups`` x ``--group-size`` completions with long-tailed lengths (log-normal,
as reasoning completions are: most short, a few up to the budget) after prompts of 20-60 tokens is
scored once, then updated (2 minibatches, lr 0 so both see the same weights) unsplit and under each
budget. For each aggregation mode the report gives the largest difference between the split and
unsplit gradients of every optimizer step, relative to the largest gradient; for each budget the
micro-batches, the padded tokens they run against the real tokens (sorted by length, and packed in
the rows' own order for comparison), and the update's wall time.
"""

from __future__ import annotations

import time

import torch

from bench.config import RLConfig, SamplingConfig
from bench.core import RolloutBatch
from bench.engine import microbatch
from bench.engine.scoring import score_batch
from bench.engine.step import Optimization, update
from bench.errors import CreditBenchError
from bench.models.policy import TINY_SIZES, build_tiny, char_tokenizer
from bench.registry import METHODS
from bench.script import machine, machine_line, md_table, run_script, script_parser, write_report

CASES = {  # aggregation -> (method, options)
    "token-mean": ("dapo", {}),
    "seq-mean-token-mean": ("grpo", {"kl_coef": 0.0}),
    "seq-mean-token-sum": ("grpo", {"kl_coef": 0.0, "aggregation": "seq-mean-token-sum"}),
    "seq-mean-token-sum-norm": ("dr_grpo", {}),
    "token-mean, top-20% entropy tokens": ("entropy_top", {}),
}
MAX_NEW = 256


def rollout_batch(tokenizer, groups: int, g: int, seed: int = 0) -> RolloutBatch:
    gen = torch.Generator().manual_seed(seed)
    B, vocab, pad = groups * g, len(tokenizer), tokenizer.pad_token_id
    P = 60
    prompt_ids, prompt_mask = torch.full((B, P), pad), torch.zeros(B, P, dtype=torch.long)
    for k in range(groups):
        n = int(torch.randint(20, P + 1, (1,), generator=gen))
        prompt_ids[k * g : (k + 1) * g, P - n :] = torch.randint(3, vocab, (n,), generator=gen)
        prompt_mask[k * g : (k + 1) * g, P - n :] = 1
    lengths = (torch.randn(B, generator=gen) * 0.8 + 4.0).exp().round().clamp(4, MAX_NEW).long()
    completion_mask = (torch.arange(MAX_NEW) < lengths[:, None]).long()
    completion_ids = torch.randint(3, vocab, (B, MAX_NEW), generator=gen).masked_fill(completion_mask == 0, pad)
    correct = torch.rand(B, generator=gen) < 0.5
    correct[0::g], correct[1::g] = True, False
    return RolloutBatch(
        prompt_ids=prompt_ids,
        prompt_mask=prompt_mask,
        completion_ids=completion_ids,
        completion_mask=completion_mask,
        group_ids=torch.arange(groups).repeat_interleave(g),
        rewards=correct.float(),
        correct=correct,
        truncated=lengths == MAX_NEW,
        max_new_tokens=MAX_NEW,
    )


class Recorded(torch.optim.SGD):
    """lr 0: keeps each step's gradient and leaves the weights as they were."""

    def __init__(self, params):
        super().__init__(params, lr=0.0)
        self.grads: list[list[torch.Tensor]] = []

    def step(self, closure=None):
        self.grads.append([p.grad.detach().clone() for p in self.param_groups[0]["params"]])
        return super().step(closure)


def one_update(model: str, case: str, groups: int, g: int, budget: int) -> tuple[list[list[torch.Tensor]], float]:
    tok = char_tokenizer()
    policy = build_tiny(model, seed=0, max_positions=512)[0]
    name, options = CASES[case]
    method = METHODS.get(name)(METHODS.get(name).Config(**options))
    rl = RLConfig(
        prompts_per_step=groups,
        group_size=g,
        minibatches=2,
        grad_clip=0.0,
        micro_batch_tokens=budget,
        sampling=SamplingConfig(max_new_tokens=MAX_NEW),
    )
    batch = rollout_batch(tok, groups, g)
    scored = score_batch(
        policy, None, method, batch, rl=RLConfig(**{**rl.__dict__, "micro_batch_tokens": 0}), fused=False
    )
    opt = Recorded([p for p in policy.parameters() if p.requires_grad])
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    torch.manual_seed(7)
    t = time.perf_counter()
    update(policy, method, batch, rl, opt=Optimization(opt, sched), scored=scored)
    return opt.grads, time.perf_counter() - t


def main(argv: list[str] | None = None) -> int:
    ap = script_parser(__doc__, "python -m bench.perf.microbatch")
    ap.add_argument("--model", default="tiny-2m", help=f"one of {', '.join(TINY_SIZES)}")
    ap.add_argument("--groups", type=int, default=8)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--budgets", type=int, nargs="+", default=[512, 1024, 2048])
    ap.add_argument("--out", default="results/benchmarks/microbatch")
    a = ap.parse_args(argv)
    if a.model not in TINY_SIZES:
        raise CreditBenchError(f"unknown --model {a.model!r}; valid: {', '.join(TINY_SIZES)}")
    batch = rollout_batch(char_tokenizer(), a.groups, a.group_size)
    real = int(microbatch.lengths(batch).sum())
    packing = []
    for budget in a.budgets:
        parts = microbatch.split(batch, budget)
        in_order = torch.arange(batch.size).tensor_split(len(parts))
        packing.append(
            {
                "budget": budget,
                "micro_batches": len(parts),
                "padded_sorted": sum(microbatch.padded_tokens(batch, p) for p in parts),
                "padded_in_order": sum(microbatch.padded_tokens(batch, p) for p in in_order),
            }
        )
    equivalence, timing = [], {}
    for case in CASES:
        ref, t0 = one_update(a.model, case, a.groups, a.group_size, 0)
        timing.setdefault(0, []).append(t0)
        scale = max(float(x.abs().max()) for step in ref for x in step)
        worst = 0.0
        for budget in a.budgets:
            grads, t = one_update(a.model, case, a.groups, a.group_size, budget)
            timing.setdefault(budget, []).append(t)
            diff = max(float((x - y).abs().max()) for sa, sb in zip(ref, grads) for x, y in zip(sa, sb))
            worst = max(worst, diff)
        equivalence.append({"aggregation": case, "max_abs_diff": worst, "max_abs_grad": scale})
    m = machine()
    whole = microbatch.padded_tokens(batch, torch.arange(batch.size))
    lines = [
        "# Gradient accumulation by token budget",
        "",
        f"`python -m bench.perf.microbatch --model {a.model} --groups {a.groups} --group-size {a.group_size} "
        f"--budgets {' '.join(map(str, a.budgets))}` on {machine_line(m)}.",
        "",
        f"One rollout batch of {batch.size} completions (log-normal lengths, 4-{MAX_NEW} tokens, prompts "
        f"20-60): {real:,} real tokens, {whole:,} padded as one forward. 2 minibatches.",
        "",
        "## The split update's gradient against the unsplit one (every budget, every optimizer step)",
        "",
        *md_table(
            "aggregation | max abs grad difference | largest grad | relative",
            [
                [
                    e["aggregation"],
                    f"{e['max_abs_diff']:.1e}",
                    f"{e['max_abs_grad']:.2e}",
                    f"{e['max_abs_diff'] / e['max_abs_grad']:.1e}",
                ]
                for e in equivalence
            ],
            "lrrr",
        ),
        "",
        "## Packing (the whole batch, as the scoring pass splits it)",
        "",
        *md_table(
            "budget (tokens) | micro-batches | padded tokens, sorted | padded tokens, rows in order | update s",
            [
                [
                    p["budget"],
                    p["micro_batches"],
                    f"{p['padded_sorted']:,}",
                    f"{p['padded_in_order']:,}",
                    f"{sum(timing[p['budget']]) / len(timing[p['budget']]):.2f}",
                ]
                for p in packing
            ],
            "rrrrr",
        ),
        "",
        f"Unsplit update: {sum(timing[0]) / len(timing[0]):.2f} s (mean over the {len(CASES)} methods).",
    ]
    data = {
        "machine": m,
        "real_tokens": real,
        "equivalence": equivalence,
        "packing": packing,
        "update_s": {str(k): v for k, v in timing.items()},
    }
    md, _ = write_report(a.out, "\n".join(lines), data)
    print(f"wrote {md}")
    return 0


if __name__ == "__main__":
    run_script(main, "python -m bench.perf.microbatch")
