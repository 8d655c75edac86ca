"""The credit tasks (chain, decisive, items) and arithmetic's blame: a failed completion's blame is
the offset of its first wrong character, worked out by hand below for each kind of failure."""

import pytest

from bench.cli import main
from bench.errors import CreditBenchError
from bench.registry import TASKS
from tasks.arithmetic import Arithmetic, ArithmeticConfig
from tasks.chain import Chain, ChainConfig
from tasks.decisive import Decisive, DecisiveConfig
from tasks.items import Items, ItemsConfig

CREDIT_TASKS = ["chain", "decisive", "items"]
RL_MAX_NEW_TOKENS = 36  # results/configs/embedded_grpo.yaml: the solution and its eos must fit


def blames(task, row, completions):
    return [o.blame for o in task.verify(completions, [row] * len(completions))]


def test_chain_blame_is_the_first_wrong_running_sum():
    """3+5+4+9: running sums mod 10 are 8, 2 (12), 1 (11), so the solution is 8,2,1,\\boxed{1}.
    Offsets: 0 '8', 2 '2', 4 '1', 6 '\\', 13 the boxed digit, 15 just past the solution."""
    row = {"question": "3+5+4+9", "answer": "1", "solution": "8,2,1,\\boxed{1}"}
    t = Chain(ChainConfig(steps=4))
    got = blames(
        t,
        row,
        [
            "8,2,1,\\boxed{1}",  # correct
            "8,3,4,\\boxed{4}",  # wrong at step 2
            "7,1,0,\\boxed{0}",  # wrong at step 1
            "8,2,1,\\boxed{7}",  # every step right, the answer miscopied
            "8,2,",  # stopped early: blamed at its end
            "garbage",
            "",
            "8,2,1,\\boxed{1}\\boxed{2}",  # the last box counts
        ],
    )
    assert got == [None, 2, 0, 13, 4, 0, 0, 15]
    # graded by the final answer only: a wrong step that comes back right is still correct
    (o,) = t.verify(["8,2,9,\\boxed{1}"], [row])
    assert o.correct and o.reward == 1.0 and o.blame is None
    (o,) = t.verify(["8,2,"], [row])
    assert not o.correct and o.reward == 0.0 and o.parsed is None and o.error == "no answer"


def test_decisive_blame_is_usually_the_choice():
    """4,7,2 sums to 13, so the choice is 3 and a tail of 4 counts on: \\boxed{34567}.
    Offset 7 is the choice (just after '\\boxed{'), 11 the last tail digit."""
    row = {"question": "4,7,2", "answer": "34567", "solution": "\\boxed{34567}"}
    t = Decisive(DecisiveConfig(tail=4))
    got = blames(t, row, ["\\boxed{34567}", "\\boxed{45678}", "\\boxed{34568}", "\\boxed{345", "\\boxed{}", "}{", ""])
    assert got == [None, 7, 11, 10, 7, 0, 0]


def test_items_blame_and_per_item_reward():
    """3+4,5+8,2+2 -> 7,3,4 (13 mod 10 = 3): \\boxed{7,3,4}; the items start at offsets 7, 9, 11."""
    row = {"question": "3+4,5+8,2+2", "answer": "7,3,4", "solution": "\\boxed{7,3,4}"}
    completions = ["\\boxed{7,3,4}", "\\boxed{7,3,5}", "\\boxed{7,2,4}", "\\boxed{7,3}", "\\boxed{7,3,4,1}", "7", ""]
    assert blames(Items(ItemsConfig(items=3)), row, completions) == [None, 11, 9, 10, 12, 0, 0]
    all_or_nothing = Items(ItemsConfig(items=3)).verify(completions, [row] * 7)
    assert [o.reward for o in all_or_nothing] == [1, 0, 0, 0, 0, 0, 0]
    per_item = Items(ItemsConfig(items=3, reward="per_item")).verify(completions, [row] * 7)
    # 2 of 3 right; 2 of 3 right; 2 given of 3; 3 right of 4 given (the extra one is wrong); no answer
    assert [o.reward for o in per_item] == pytest.approx([1, 2 / 3, 2 / 3, 2 / 3, 3 / 4, 0, 0])
    assert [o.correct for o in per_item] == [True] + [False] * 6  # correct still needs every item


def test_arithmetic_blame_is_where_the_scratchpad_departs():
    """63-11=52,52+48=100,\\boxed{100}: the second step's result starts at offset 15."""
    row = {"question": "63-11+48", "answer": "100", "solution": "63-11=52,52+48=100,\\boxed{100}"}
    completions = ["63-11=52,52+48=100,\\boxed{100}", "63-11=52,52+48=90,\\boxed{90}", "63-11=52,", "", "??"]
    outcomes = Arithmetic().verify(completions, [row] * 5)
    assert [o.correct for o in outcomes] == [True, False, False, False, False]
    assert [o.blame for o in outcomes] == [None, 15, 9, 0, 0]
    free_form = Arithmetic(ArithmeticConfig(template="instruct")).verify(completions[1:2], [row])
    assert not free_form[0].correct and free_form[0].blame is None  # no reference scratchpad to depart from


@pytest.mark.parametrize(
    "make, expected",
    [
        (lambda: ChainConfig(steps=1), "steps must be in [2, 14], got 1"),
        (lambda: ChainConfig(steps=15), "steps must be in [2, 14], got 15"),
        (lambda: DecisiveConfig(tail=-1), "tail must be in [0, 26], got -1"),
        (lambda: DecisiveConfig(tail=27), "tail must be in [0, 26], got 27"),
        (lambda: DecisiveConfig(digits=1), "digits must be in [2, 8], got 1"),
        (lambda: ItemsConfig(items=0), "items must be in [1, 14], got 0"),
        (lambda: ItemsConfig(reward="some"), "unknown reward 'some'; valid: all, per_item"),
        (lambda: ItemsConfig(template="chat"), "valid: compact, instruct"),
        (lambda: Chain().load("test"), "unknown split 'test' for task chain; valid: train, eval"),
    ],
)
def test_bad_knobs_fail_in_one_line_naming_the_range(make, expected):
    with pytest.raises(CreditBenchError) as e:
        make()
    assert expected in str(e.value) and "\n" not in str(e.value)


def check_row(name: str, row: dict) -> None:
    """The row's answer recomputed from its question, independently of the task's generator."""
    q = row["question"]
    if name == "chain":
        total, sums = int(q[0]), []
        for d in q.split("+")[1:]:
            total = (total + int(d)) % 10
            sums.append(str(total))
        assert row["answer"] == sums[-1] and row["solution"] == ",".join(sums) + "," + f"\\boxed{{{sums[-1]}}}"
    elif name == "decisive":
        choice = sum(map(int, q.split(","))) % 10
        assert row["answer"][0] == str(choice)
        assert all(int(b) == (int(a) + 1) % 10 for a, b in zip(row["answer"], row["answer"][1:]))
    else:
        assert row["answer"].split(",") == [str(eval(p) % 10) for p in q.split(",")]  # noqa: S307 - digits and +
    assert row["solution"].endswith(f"\\boxed{{{row['answer']}}}")


@pytest.mark.parametrize("name", CREDIT_TASKS)
def test_splits_are_fixed_disjoint_and_their_solutions_verify(name):
    cls = TASKS.get(name)
    t = cls(cls.Config(train_size=2000))
    train, ev = t.load("train"), t.load("eval")
    assert len(ev) == 200 and len(train) == 2000 and len(set(ev["id"])) == 200
    assert set(train["id"]).isdisjoint(ev["id"])
    again = cls(cls.Config(train_size=2000))
    assert again.load("eval")["id"] == ev["id"] and again.load("train")["id"][:50] == train["id"][:50]
    assert cls(cls.Config(train_size=2000, seed=7)).load("eval")["id"] != ev["id"]
    rows = list(train)
    for r in rows[:300] + list(ev):
        check_row(name, r)
    outcomes = t.verify([r["solution"] for r in rows], rows)
    assert all(o.correct and o.reward == 1.0 and o.blame is None for o in outcomes)
    prompt = t.prompt(ev[0])
    assert prompt == ev[0]["question"] + "; \\boxed{}:"
    assert "\\boxed{}" in cls(cls.Config(template="instruct")).prompt(ev[0])


@pytest.mark.parametrize(
    "config", [ChainConfig(), ChainConfig(steps=14), DecisiveConfig(), DecisiveConfig(tail=26), ItemsConfig(items=14)]
)
def test_solutions_fit_the_rl_budget(config):
    task = {ChainConfig: Chain, DecisiveConfig: Decisive, ItemsConfig: Items}[type(config)](config)
    rows = task.load("eval")
    assert max(len(s) for s in rows["solution"]) + 1 <= RL_MAX_NEW_TOKENS


def test_registered_and_listed(capsys):
    assert set(CREDIT_TASKS) <= set(TASKS.names())
    assert main(["tasks"]) == 0
    listed = {line.split()[0] for line in capsys.readouterr().out.splitlines()}
    assert set(CREDIT_TASKS) <= listed


@pytest.mark.slow
@pytest.mark.parametrize(
    "name, options",
    [
        ("chain", {"steps": 4}),
        ("decisive", {"tail": 4}),
        pytest.param(
            "items",
            {"items": 3},
            marks=pytest.mark.xfail(
                strict=True,
                reason="the warm-start does not teach tiny-500k items in its 3,000 steps (base pass@1 0.000): "
                "the boxed answers have no scratchpad to copy the operands next to (docs/tasks.md)",
            ),
        ),
    ],
)
def test_grpo_learns_the_task_from_its_warm_started_base(name, options, tmp_path, warm_cache):
    """Warm-start tiny-500k on an easy setting of the task, train it with GRPO for a few steps
    through the real runner, and find its eval pass@1 above the base's."""
    from bench.config import EvalConfig, MethodSpec, ModelConfig, RLConfig, RunConfig, TaskSpec, TrackingConfig
    from bench.run.train import run

    cfg = RunConfig(
        model=ModelConfig(name="tiny-500k"),
        task=TaskSpec(name=name, options={**options, "train_size": 50_000}),
        method=MethodSpec(options={"kl_coef": 0.0}),
        rl=RLConfig(steps=30, prompts_per_step=16, group_size=8, lr=1e-4),
        eval=EvalConfig(every=30, n=4, k=[1], num_problems=100),
        tracking=TrackingConfig(uri=f"sqlite:///{tmp_path / 'm.db'}", cache_dir=warm_cache, results_dir=str(tmp_path)),
    )
    result = run(cfg, progress=False)
    base, final = result["base"]["pass_at_1"], result["final"]["pass_at_1"]
    assert final > base, f"{name}: pass@1 {base:.3f} -> {final:.3f}"
