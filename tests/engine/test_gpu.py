"""The RL step on a CUDA device (pytest -m gpu): Lightning places the policy and its reference on the GPU,
bf16 autocast trains with finite losses, and the GPU's log-probs agree with the CPU's."""

import math

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def _module(kl_coef: float):
    import lightning as L

    from bench.config import EvalConfig, RLConfig
    from bench.engine.module import RLVRModule
    from bench.models.policy import build_tiny
    from bench.registry import METHODS, TASKS

    L.seed_everything(0, verbose=False)
    task = TASKS.get("arithmetic")()
    grpo = METHODS.get("grpo")
    model, tok = build_tiny("tiny-500k", seed=0)
    ref = build_tiny("tiny-500k", seed=0)[0] if kl_coef else None
    rl = RLConfig(steps=3, prompts_per_step=4, group_size=4, lr=1e-3)
    module = RLVRModule(
        model, tok, grpo(grpo.Config(kl_coef=kl_coef)), task, "arithmetic", rl, EvalConfig(), ref_policy=ref
    )
    return module, task, rl


@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed"])
def test_rl_steps_train_on_the_gpu(precision):
    from bench.config import EvalConfig
    from bench.engine.fit import fit_logged

    module, task, rl = _module(kl_coef=0.04)
    seen, step = [], module.training_step

    def training_step(*args, **kwargs):  # where the policy and its reference are while a step runs
        seen.append({next(m.parameters()).device.type for m in (module.policy, module.ref_policy)})
        return step(*args, **kwargs)

    module.training_step = training_step
    rows = fit_logged(module, task, rl, EvalConfig(num_problems=4), accelerator="gpu", precision=precision)
    steps = [r for r in rows if "loss/total" in r]
    assert len(steps) == rl.steps
    assert all(math.isfinite(r[k]) for r in steps for k in ("loss/total", "train/grad_norm"))
    assert seen == [{"cuda"}] * rl.steps, seen  # Lightning moves the module back to the CPU after fit
    assert all(torch.isfinite(p).all() for p in module.policy.parameters())


def test_gpu_log_probs_match_the_cpu():
    from bench.engine.scoring import score
    from bench.models.policy import build_tiny

    model, tok = build_tiny("tiny-2m", seed=0)
    model.eval()
    enc = tok(["12+7=", "3*(4+5)="], return_tensors="pt", padding=True, add_special_tokens=False)
    gen = torch.Generator().manual_seed(0)
    comp = torch.randint(3, len(tok), (2, 12), generator=gen)
    cmask = torch.ones_like(comp)
    args = (enc["input_ids"], enc["attention_mask"], comp, cmask)
    with torch.no_grad():
        cpu = score(model, *args, with_entropy=False).logprobs
        model.cuda()
        gpu = score(model, *(t.cuda() for t in args), with_entropy=False).logprobs.cpu()
    assert torch.allclose(cpu, gpu, atol=1e-3, rtol=1e-3), (cpu - gpu).abs().max()
