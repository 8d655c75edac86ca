"""Benchmark: the chunked LM head (bench.engine.lm_head) against the whole head, in memory and time.

    python -m bench.perf.lm_head [--model Qwen/Qwen3-0.6B] [--layers 28] [--rows 8] [--pass-rows 4]
                                 [--tokens 512] [--prompt 64] [--chunk-elements 67108864]
                                 [--out results/benchmarks/lm_head]

A randomly initialised float32 model of ``--model``'s architecture (bench.models.hub_archs: its width
and its 151,936-word vocabulary; ``--layers`` of its decoder layers) scores completions of ``--tokens``
tokens after ``--prompt``-token prompts twice, as an RL step does: the scoring pass (log-probs
and entropies, no gradient) and the training pass (log-probs and entropies, then the backward of a
weighted sum of the log-probs into every parameter), both through bench.engine.scoring.score, once with
the whole head (``chunk_elements=0``) and once in chunks. Each of the two parts below runs in a process
of its own, and the peak resident memory of each pass is read from the kernel (VmHWM, reset before the
pass), less what was resident when it began:

- ``head``: the LM head alone, on the [rows x tokens, hidden] last hidden states (with gradient): the
  whole head's logits, log-softmax and entropy against bench.engine.lm_head.logprobs_entropy;
- ``pass``: the whole model's scoring and training passes of ``--pass-rows`` completions, in which the
  head is one part (4 by default: with 8, the whole head's training pass of the 28-layer model needs
  more memory than a 24 GB machine has).

Both modes' log-probs and gradients are compared (largest difference relative to the largest value).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import torch

from bench.script import machine, machine_line, md_table, run_script, script_parser, write_report

MARK = "LM_HEAD_RESULT "
MODES = ("whole", "chunked")
PARTS = ("head", "pass")


def _rss_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))


def _peak(fn):
    """(fn's result, its wall seconds, the peak resident MB above what was resident when it began)."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM to the current RSS
    base = _rss_kb("VmRSS")
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start, (_rss_kb("VmHWM") - base) / 1024


def _model(a):
    from transformers import AutoModelForCausalLM

    from bench.models.hub_archs import architecture

    torch.manual_seed(0)
    config = architecture(a.model, num_hidden_layers=a.layers)
    return AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()


def _inputs(a, vocab: int):
    g = torch.Generator().manual_seed(1)
    B = a.pass_rows
    prompt = torch.randint(3, vocab, (B, a.prompt), generator=g)
    completion = torch.randint(3, vocab, (B, a.tokens), generator=g)
    ones = torch.ones(B, a.prompt, dtype=torch.long), torch.ones(B, a.tokens, dtype=torch.long)
    weights = torch.randn(B, a.tokens, generator=g)
    return prompt, ones[0], completion, ones[1], weights


def _child_pass(a, mode: str) -> dict:
    """The scoring and training passes of the whole model in ``mode``."""
    from bench.engine.scoring import score

    model = _model(a)
    prompt, pmask, completion, cmask, weights = _inputs(a, model.config.vocab_size)
    elements = 0 if mode == "whole" else a.chunk_elements
    args = (model, prompt, pmask, completion, cmask, 1.0)

    def scoring():
        with torch.no_grad():
            return score(*args, with_entropy=True, chunk_elements=elements).logprobs

    def training():
        s = score(*args, with_entropy=True, chunk_elements=elements)
        (s.logprobs * weights).sum().backward()
        return s.logprobs.detach()

    old, t_score, m_score = _peak(scoring)
    new, t_train, m_train = _peak(training)
    grads = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    torch.save({"logprobs": new, "old": old, "grads": grads}, os.path.join(a.scratch, f"pass-{mode}.pt"))
    return {"score_s": t_score, "score_mb": m_score, "train_s": t_train, "train_mb": m_train}


def _child_head(a, mode: str) -> dict:
    """The LM head alone (the scoring and training passes over fixed last hidden states) in ``mode``."""
    from torch.nn import functional as F

    from bench.engine import lm_head
    from bench.numerics import entropy_from_logits, token_logprobs

    model = _model(a)
    weight = model.lm_head.weight.detach().clone().requires_grad_(True)
    del model
    N, H = a.rows * a.tokens, weight.shape[1]
    hidden = torch.randn(N, H, generator=torch.Generator().manual_seed(2)).requires_grad_(True)
    tokens = torch.randint(3, weight.shape[0], (N,), generator=torch.Generator().manual_seed(3))
    chunk = lm_head.chunk_tokens(N, weight.shape[0], a.chunk_elements) or N  # as score() would chunk them

    def head():
        if mode == "chunked":
            return lm_head.logprobs_entropy(hidden, weight, tokens, 1.0, chunk, True)[0]
        logits = F.linear(hidden, weight)  # as the scoring module's whole head: log-probs, then entropy
        logprobs = token_logprobs(logits, tokens)
        with torch.no_grad():
            entropy_from_logits(logits.detach().float())
        return logprobs

    def scoring():
        with torch.no_grad():
            return head()

    def training():
        lp = head()
        lp.sum().backward()
        return lp.detach()

    _, t_score, m_score = _peak(scoring)
    _, t_train, m_train = _peak(training)
    return {"score_s": t_score, "score_mb": m_score, "train_s": t_train, "train_mb": m_train, "chunk_tokens": chunk}


def _child(a) -> None:
    torch.set_num_threads(a.threads)
    part, mode = a.child
    result = (_child_pass if part == "pass" else _child_head)(a, mode)
    print(MARK + json.dumps(result), flush=True)


def _spawn(a, part: str, mode: str) -> dict:
    cmd = [sys.executable, "-m", "bench.perf.lm_head", "--child", part, mode, "--scratch", a.scratch]
    cmd += ["--model", a.model, "--layers", str(a.layers), "--rows", str(a.rows), "--pass-rows", str(a.pass_rows)]
    cmd += ["--tokens", str(a.tokens)]
    cmd += ["--prompt", str(a.prompt), "--chunk-elements", str(a.chunk_elements), "--threads", str(a.threads)]
    p = subprocess.run(cmd, capture_output=True, text=True)
    lines = [line for line in p.stdout.splitlines() if line.startswith(MARK)]
    if p.returncode or not lines:
        raise RuntimeError(f"{part} {mode} failed (exit {p.returncode}):\n{p.stderr[-4000:]}")
    result = json.loads(lines[-1][len(MARK) :])
    print(f"{part:5s} {mode:8s} {result}", flush=True)
    return result


def _agreement(scratch: str) -> dict:
    """Largest differences of the two modes' log-probs and gradients, relative to the largest value."""
    w, c = (torch.load(os.path.join(scratch, f"pass-{m}.pt")) for m in MODES)

    def rel(x, y):
        return float((x - y).abs().max() / x.abs().max().clamp_min(1e-30))

    grads = max(rel(w["grads"][n], c["grads"][n]) for n in w["grads"])
    return {"logprobs": max(rel(w["logprobs"], c["logprobs"]), rel(w["old"], c["old"])), "grads": grads}


def _seconds(r: dict) -> float:
    return r["score_s"] + r["train_s"]


def _report(a, results: dict, agree: dict) -> str:
    def row(part, label, key_mb, key_s):
        w, c = results[part]["whole"], results[part]["chunked"]
        return [
            label,
            f"{w[key_mb]:,.0f}",
            f"{c[key_mb]:,.0f}",
            f"{w[key_mb] / max(c[key_mb], 1):.1f}x",
            f"{w[key_s]:.1f}",
            f"{c[key_s]:.1f}",
            f"{c[key_s] / w[key_s] - 1:+.0%}",
        ]

    head_time, pass_time = (_seconds(results[part]["chunked"]) / _seconds(results[part]["whole"]) for part in PARTS)
    chunk = results["head"]["chunked"]["chunk_tokens"]
    lines = [
        "# The chunked LM head: memory and time",
        "",
        f"`python -m bench.perf.lm_head --model {a.model} --layers {a.layers} --rows {a.rows} --pass-rows "
        f"{a.pass_rows} --tokens {a.tokens} --prompt {a.prompt} --chunk-elements {a.chunk_elements}` on "
        f"{machine_line(results['machine'])}.",
        "",
        f"A randomly initialised float32 model of {a.model}'s architecture ({a.layers} layers, "
        f"{results['vocab']:,}-word vocabulary, {results['params'] / 1e6:,.0f}M parameters) scores completions of "
        f"{a.tokens} tokens after {a.prompt}-token prompts: the scoring pass (log-probs and entropies, no "
        "gradient), then the training pass (the same with gradient, and the backward of a weighted sum of the "
        f"log-probs). The head alone takes {a.rows} completions' last hidden states ({a.rows * a.tokens:,} "
        f"tokens), the whole model {a.pass_rows} completions. Chunks of {chunk} tokens. Peak: resident memory "
        "above what was resident when the pass began "
        "(VmHWM), in MB; each part in a process of its own.",
        "",
        *md_table(
            "pass | whole head, MB | chunked, MB | lower by | whole, s | chunked, s | time",
            [
                row("head", "LM head alone: scoring", "score_mb", "score_s"),
                row("head", "LM head alone: training", "train_mb", "train_s"),
                row("pass", "whole model: scoring", "score_mb", "score_s"),
                row("pass", "whole model: training", "train_mb", "train_s"),
            ],
            "lrrrrrr",
        ),
        "",
        f"Time, scoring and training together: the head alone {head_time - 1:+.0%}, the whole model "
        f"{pass_time - 1:+.0%}. The chunked backward recomputes each chunk's logits (one more matmul of the "
        "head per training pass), but every pass over the vocabulary (log-sum-exp, entropy, softmax) runs on a "
        "chunk that stays in cache.",
        "",
        f"Agreement of the two modes over the whole model: log-probs within {agree['logprobs']:.1e}, every "
        f"parameter's gradient within {agree['grads']:.1e} of its largest value.",
    ]
    return "\n".join(lines)


def main() -> int:
    p = script_parser(__doc__, "python -m bench.perf.lm_head")
    p.add_argument("--model", default="Qwen/Qwen3-0.6B")
    p.add_argument("--layers", type=int, default=28)
    p.add_argument("--rows", type=int, default=8)
    p.add_argument("--pass-rows", type=int, default=4)
    p.add_argument("--tokens", type=int, default=512)
    p.add_argument("--prompt", type=int, default=64)
    p.add_argument("--chunk-elements", type=int, default=2**26)
    p.add_argument("--threads", type=int, default=torch.get_num_threads())
    p.add_argument("--out", default="results/benchmarks/lm_head")
    p.add_argument("--child", nargs=2, metavar=("PART", "MODE"), help=argparse.SUPPRESS)
    p.add_argument("--scratch", default=None, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        _child(a)
        return 0
    from transformers import AutoModelForCausalLM

    from bench.models.hub_archs import architecture

    config = architecture(a.model, num_hidden_layers=a.layers)
    with tempfile.TemporaryDirectory() as scratch:
        a.scratch = scratch
        results = {part: {mode: _spawn(a, part, mode) for mode in MODES} for part in PARTS}
        agree = _agreement(scratch)
    with torch.device("meta"):
        params = sum(p.numel() for p in AutoModelForCausalLM.from_config(config).parameters())
    results.update(machine=machine(a.threads), vocab=config.vocab_size, params=params)
    md, _ = write_report(
        a.out, _report(a, results, agree), {"args": vars(a) | {"scratch": None}, **results, "agreement": agree}
    )
    print(f"wrote {md}")
    return 0


if __name__ == "__main__":
    run_script(main, "python -m bench.perf.lm_head")
