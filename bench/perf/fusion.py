"""What fusing would buy a flagship update: one training forward and backward of a flagship minibatch,
eager and under ``torch.compile`` (inductor), for bench.perf.flagship_cost's notes."""

from __future__ import annotations

import time


def probe(size: str, rows: int = 64, widths: tuple[int, ...] = (50, 53, 56)) -> dict[str, float]:
    """What fusing would buy the update: one training forward and backward of a flagship minibatch
    (``rows`` rows, each of ``widths`` positions, the last 33 with logits) eager and under
    ``torch.compile`` (inductor, dynamic shapes), CPU milliseconds each, and the compile's seconds."""
    import torch

    from bench.engine import lean_forward
    from bench.models.policy import build_tiny

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model, _ = build_tiny(size)

    def eager(x):
        return lean_forward.forward(model, x, logits_to_keep=33).logits

    def step(f, x):
        f(x).square().mean().backward()

    xs = [torch.randint(3, 90, (rows, n)) for n in widths]
    t = time.perf_counter()
    compiled = torch.compile(eager, dynamic=True)
    step(compiled, xs[0])
    out = {"compile_s": time.perf_counter() - t}
    for name, f in (("eager_ms", eager), ("compiled_ms", compiled)):
        for x in xs:
            step(f, x)
        t = time.process_time()
        for _ in range(3):
            for x in xs:
                step(f, x)
        out[name] = (time.process_time() - t) / (3 * len(xs)) * 1000
    torch.set_num_threads(threads)
    return out
