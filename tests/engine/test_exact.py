"""The exact objective J (bench.engine.exact): the batched teacher-forced J against a plain loop of
full forwards, one token at a time; its gradient against autograd through that loop and a finite
difference; and J logged beside pass@1 at every eval point of a run on a task with references
(``eval/<task>/ref_prob``), and not at all for a task without them."""

import math

import mlflow
import pytest
import torch

from bench.config import (
    EvalConfig,
    MethodSpec,
    ModelConfig,
    RLConfig,
    RunConfig,
    SamplingConfig,
    TaskSpec,
    TrackingConfig,
)
from bench.engine.exact import exact_objective, objective_gradient, references
from bench.engine.module import RLVRModule
from bench.models.policy import build_tiny
from bench.registry import TASKS
from bench.run.train import run
from tests.engine.test_blame import NoCapitals

TEMPERATURE = 0.7


class LenientChain(TASKS.get("chain")):
    """Chain's problems and references, graded as no-capitals (tests/engine/test_blame.py) so that a
    random policy's groups mix and GRPO moves it between eval points."""

    verify = NoCapitals.verify


if "lenient-chain" not in TASKS.names():
    TASKS.register("lenient-chain")(LenientChain)


def _task(name: str, **options):
    return TASKS.get(name)(TASKS.get(name).Config(**{"eval_size": 4, "train_size": 10} | options))


@pytest.fixture(scope="module")
def double_policy():
    """A random tiny-500k policy in float64: the looped J below is then exact to rounding, and what
    the batched J differs by is its own float32 log-softmax (bench.numerics.token_logprobs)."""
    model, tok = build_tiny("tiny-500k", seed=0)
    return model.double().eval(), tok


def chain_rows() -> tuple:
    """Chain with 2 and 3 digits, two problems each: prompts and references of two lengths, so the
    batch pads both; short enough that a random policy's p (about (1/99)^14) stays a float32 normal."""
    rows = [r for steps in (2, 3) for r in list(_task("chain", steps=steps).load("eval"))[:2]]
    return _task("chain", steps=2), rows


def loop_logprobs(model, tok, task, rows, temperature: float) -> torch.Tensor:
    """log p(r_i | x_i) of each row ``[N]``, one full forward per reference token:
    sum_t log softmax(logits(x_i, r_i,<t) / temperature)[r_i,t], eos last."""
    out = []
    for row in rows:
        ids = tok(task.prompt(row, tok), add_special_tokens=False)["input_ids"]
        ref = tok(task.reference(row), add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        logp = torch.zeros((), dtype=torch.float64)
        for token in ref:
            logits = model(input_ids=torch.tensor([ids])).logits[0, -1] / temperature  # [V]
            logp = logp + torch.log_softmax(logits.double(), -1)[token]
            ids = ids + [token]
        out.append(logp)
    return torch.stack(out)


def test_j_is_the_product_of_the_reference_token_probabilities(double_policy):
    """Each p(r_i | x_i) and J equal the loop's product of token probabilities to 2e-5 relative: the
    batched log-softmax is float32 (about 5e-7 of rounding a token, 12-14 tokens), the loop's float64;
    an off-by-one position or a missing eos would be off by a factor of about 99. J draws no random
    number."""
    model, tok = double_policy
    task, rows = chain_rows()
    rng = torch.get_rng_state()
    j, p = exact_objective(model, references(task, rows, tok), TEMPERATURE)
    assert torch.equal(torch.get_rng_state(), rng)
    with torch.no_grad():
        expected = loop_logprobs(model, tok, task, rows, TEMPERATURE).exp()
    assert len({len(task.reference(r)) for r in rows}) == 2 and float(expected.min()) > 1e-30
    assert p.tolist() == pytest.approx(expected.tolist(), rel=2e-5, abs=0)
    assert j == pytest.approx(float(expected.mean()), rel=2e-5, abs=0)


def test_objective_gradient_is_autograd_of_the_loop_and_a_finite_difference(double_policy):
    """dJ/dtheta equals autograd through the looped J on every parameter (to the float32 rounding of
    the batched log-softmax), and the central difference (J(theta + h e) - J(theta - h e)) / 2h on
    the entry with the largest gradient (h = 1e-3: J moves by about 1e-2 of itself, 1e4 times its
    rounding). Neither draws a random number."""
    model, tok = double_policy
    task, rows = chain_rows()
    refs = references(task, rows, tok)
    rng = torch.get_rng_state()
    grads = objective_gradient(model, refs, TEMPERATURE)
    assert torch.equal(torch.get_rng_state(), rng)
    params = [p for p in model.parameters() if p.requires_grad]
    direct = torch.autograd.grad(loop_logprobs(model, tok, task, rows, TEMPERATURE).exp().mean(), params)
    scale = max(float(g.abs().max()) for g in direct)
    for g, d in zip(grads, direct):
        torch.testing.assert_close(g, d, rtol=1e-4, atol=1e-5 * scale)

    i = max(range(len(params)), key=lambda k: float(grads[k].abs().max()))
    flat, at, h = params[i].data.view(-1), int(grads[i].abs().argmax()), 1e-3
    with torch.no_grad():
        flat[at] += h
        j_up = exact_objective(model, refs, TEMPERATURE)[0]
        flat[at] -= 2 * h
        j_down = exact_objective(model, refs, TEMPERATURE)[0]
        flat[at] += h
    assert (j_up - j_down) / (2 * h) == pytest.approx(float(grads[i].view(-1)[at]), rel=1e-3)


@pytest.fixture(scope="module")
def chain_run(policy_dir, tmp_path_factory):
    """Two GRPO steps from a random policy on lenient-chain, evaluated at steps 0, 1 and 2 in batches
    of 3 of its 6 problems, on chain (the same problems and references) and on arithmetic's free-form
    (instruct) template, which has no reference; and at each eval point J recomputed by
    :func:`exact_objective` on chain's eval rows."""
    root = tmp_path_factory.mktemp("exact")
    chain = {"steps": 2, "eval_size": 6, "train_size": 50}
    cfg = RunConfig(
        model=ModelConfig(name=str(policy_dir)),
        task=TaskSpec(name="lenient-chain", options=chain),
        method=MethodSpec(name="grpo"),
        rl=RLConfig(steps=2, prompts_per_step=4, group_size=4, lr=1e-2, sampling=SamplingConfig(max_new_tokens=4)),
        eval=EvalConfig(
            every=1,
            n=2,
            k=[1],
            num_problems=6,
            batch_problems=3,
            sampling=SamplingConfig(temperature=TEMPERATURE, max_new_tokens=12),
            tasks=[
                TaskSpec(name="chain", options=chain),
                TaskSpec(name="arithmetic", options={"template": "instruct", "eval_size": 3}),
            ],
        ),
        tracking=TrackingConfig(uri=f"sqlite:///{root / 'mlflow.db'}", cache_dir=str(root / "cache")),
        threads=1,
    )
    recomputed = []
    end = RLVRModule.on_validation_epoch_end

    def recording(module):
        end(module)
        rows = [dict(r) for r in module.trainer.datamodule.eval_sets[1]]
        refs = references(module.eval_tasks["chain"], rows, module.tokenizer)
        recomputed.append(exact_objective(module.policy, refs, TEMPERATURE)[0])

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(RLVRModule, "on_validation_epoch_end", recording)
        result = run(cfg, progress=False)
    return result, recomputed, mlflow.MlflowClient(cfg.tracking.uri)


def test_a_run_logs_j_beside_pass_at_1_at_every_eval_point(chain_run):
    """eval/<task>/ref_prob at steps 0, 1, 2, equal to J recomputed on the eval rows (to the float32
    rounding of a forward over 3 rows rather than 6), in MLflow and in the result's history."""
    result, recomputed, client = chain_run
    for task in ("chain", "lenient-chain"):
        logged = client.get_metric_history(result["mlflow_run_id"], f"eval/{task}/ref_prob")
        history = [point["eval"][task] for point in result["history"]]
        assert [m.step for m in logged] == [point["step"] for point in result["history"]] == [0, 1, 2]
        assert [m.value for m in logged] == pytest.approx(recomputed, rel=1e-5, abs=0)
        assert [h["ref_prob"] for h in history] == pytest.approx(recomputed, rel=1e-5, abs=0)
        assert all(h["ref_prob"] > 0 and math.isfinite(h["ref_prob_se"]) and "pass_at_1" in h for h in history)
        assert not any(k.startswith("per_problem") for h in history for k in h)  # kept out of the JSON
    assert result["final"]["ref_prob"] == result["history"][-1]["eval"]["lenient-chain"]["ref_prob"]
    assert recomputed[0] != pytest.approx(recomputed[-1], rel=1e-3, abs=0)  # the policy moved between eval points


def test_a_task_without_references_logs_no_j(chain_run):
    result, _, client = chain_run
    assert all("pass_at_1" in p["eval"]["arithmetic"] for p in result["history"])
    assert not any("ref_prob" in p["eval"]["arithmetic"] for p in result["history"])
    assert not client.get_metric_history(result["mlflow_run_id"], "eval/arithmetic/ref_prob")
