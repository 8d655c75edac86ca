import pytest

from bench.errors import CreditBenchError
from bench.registry import TASKS
from tasks.arithmetic import Arithmetic, ArithmeticConfig


def test_splits_are_fixed_by_seed_and_disjoint():
    t = Arithmetic(ArithmeticConfig(train_size=2000))
    train, ev = t.load("train"), t.load("eval")
    assert len(ev) == 200 and len(train) == 2000
    assert set(train["id"]).isdisjoint(ev["id"])
    again = Arithmetic(ArithmeticConfig(train_size=2000))
    assert again.load("eval")["id"] == ev["id"] and again.load("train")["id"][:50] == train["id"][:50]
    other = Arithmetic(ArithmeticConfig(train_size=2000, seed=7))
    assert other.load("eval")["id"] != ev["id"]


def test_problems_are_correct_and_their_solutions_verify():
    t = Arithmetic(ArithmeticConfig(train_size=300))
    rows = list(t.load("train"))
    for r in rows:
        assert eval(r["question"]) == int(r["answer"]) >= 0  # noqa: S307 - digits and +/- only
    outcomes = t.verify([r["solution"] for r in rows], rows)
    assert all(o.correct for o in outcomes)
    wrong = t.verify([r["solution"].replace("boxed{", "boxed{1") for r in rows], rows)
    assert not any(o.correct for o in wrong)


def test_prompt_asks_for_a_boxed_answer():
    t = Arithmetic()
    row = t.load("eval")[0]
    for template in ("compact", "instruct"):
        p = Arithmetic(ArithmeticConfig(template=template)).prompt(row)
        assert row["question"] in p and "\\boxed{}" in p


def test_bad_task_input():
    with pytest.raises(CreditBenchError, match="Did you mean 'arithmetic'"):
        TASKS.get("arithmetc")
    with pytest.raises(CreditBenchError, match="compact"):
        ArithmeticConfig(template="chat")
    with pytest.raises(CreditBenchError, match="valid: train, eval"):
        Arithmetic().load("test")
    # a range so small that every problem is an eval problem: an error, not an endless search
    with pytest.raises(CreditBenchError, match="too few problems outside the eval split"):
        Arithmetic(ArithmeticConfig(num_operands=2, low=0, high=2, eval_size=50, train_size=10)).load("train")
