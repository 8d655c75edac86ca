"""The code benchmarks: every reference solution passes its tests in the sandbox, wrong ones fail,
completions become programs the way the docstring says, and nothing runs without the opt-in.
(The sandbox itself, with hostile programs, is tests/tasks/test_sandbox*.py.)"""

import pytest
from shared_data import DATA, needs_data

from bench.config import RunConfig, TaskSpec
from bench.errors import CreditBenchError
from bench.registry import TASKS
from bench.run.resolve import resolve
from tasks.code_benchmarks import cut_at_stop, fenced_blocks


def task(name, **options):
    cls = TASKS.get(name)
    t = cls(cls.Config(**{"data_dir": str(DATA), **options}))
    t.allow_code_execution()
    return t


@needs_data
def test_humaneval_canonical_solutions_all_pass_and_wrong_ones_fail():
    t = task("humaneval")
    rows = list(t.load("eval"))
    assert len(rows) == 164 and rows[0]["id"] == "HumanEval/0"
    right = t.verify([r["answer"] for r in rows], rows)
    failed = [(r["id"], o.error) for r, o in zip(rows, right) if not o.correct]
    assert not failed, failed
    wrong = t.verify(["    return None\n"] * len(rows), rows)
    assert not any(o.correct for o in wrong)
    assert all(o.reward == 0.0 and o.error for o in wrong)


@needs_data
def test_mbpp_reference_code_of_every_sanitized_task_passes():
    t = task("mbpp")
    rows = list(t.load("eval")) + list(t.load("train"))
    assert len(t.load("eval")) == 257 and len(rows) == 427
    out = t.verify([r["answer"] for r in rows], rows)
    failed = [(r["id"], o.error) for r, o in zip(rows, out) if not o.correct]
    assert not failed, failed
    # a function with the right name and the wrong behaviour fails
    wrong = [f"def {r['entry_point']}(*args, **kwargs):\n    return None\n" for r in rows[:20]]
    assert not any(o.correct for o in t.verify(wrong, rows[:20]))


def test_completions_become_programs():
    he = TASKS.get("humaneval")()
    row = {"question": 'import math\n\ndef f(x):\n    """Double x."""\n', "entry_point": "f"}
    # a base model continues the prompt; Codex's stop sequences end the function
    assert he.program("    return 2 * x\n\ndef g():\n    pass\n", row) == row["question"] + "    return 2 * x\n"
    assert cut_at_stop("    return 1\nprint('x')") == "    return 1"
    # a chat model answers with a fenced block holding the whole function: the prompt's imports go first
    fenced = "Sure!\n```python\ndef f(x):\n    return math.floor(2 * x)\n```\nDone."
    assert he.program(fenced, row) == "import math\ndef f(x):\n    return math.floor(2 * x)\n"
    # a fenced body without the def is appended to the prompt
    assert he.program("```python\n    return 2 * x\n```", row) == row["question"] + "    return 2 * x\n"
    # an unterminated block (truncated completion) still counts
    assert fenced_blocks("```python\ndef f(x):\n    return x") == ["def f(x):\n    return x"]
    mbpp = TASKS.get("mbpp")()
    mrow = {"entry_point": "add"}
    assert (
        mbpp.program("def add(a, b):\n    return a + b\n[DONE] trailing", mrow) == "def add(a, b):\n    return a + b\n"
    )
    two = "```python\nprint(1)\n```\n```python\ndef add(a, b):\n    return a + b\n```"
    assert mbpp.program(two, mrow) == "def add(a, b):\n    return a + b\n"


@needs_data
def test_prompts():
    he, mbpp = task("humaneval"), task("mbpp")
    row = he.load("eval")[0]
    assert he.prompt(row) == row["question"]
    chat = TASKS.get("humaneval")(TASKS.get("humaneval").Config(template="chat")).prompt(row)
    assert "```python" in chat and row["question"] in chat
    mrow = mbpp.load("eval")[0]
    p = mbpp.prompt(mrow)
    assert p.startswith("You are an expert Python programmer, and here is your task: ")
    assert mrow["shown_tests"] in p and mrow["shown_tests"].count("assert") == 3
    with pytest.raises(CreditBenchError, match="valid: instruct, chat"):
        TASKS.get("mbpp")(TASKS.get("mbpp").Config(template="completion"))


@needs_data
def test_hostile_completions_through_the_task_are_graded_wrong():
    t = task("humaneval", cpu_s=2, timeout_s=5.0)
    rows = list(t.load("eval").select(range(2)))
    body = ["    while True:\n        pass\n", "    import sys\n    sys.exit(0)\n"]
    out = t.verify(body, rows)
    assert [o.correct for o in out] == [False, False]
    assert out[0].error.startswith(("timeout", "killed")) and out[1].error.startswith("exited")


def test_code_runs_only_after_the_opt_in(monkeypatch):
    monkeypatch.delenv("CREDITBENCH_ALLOW_CODE_EXECUTION", raising=False)
    cls = TASKS.get("mbpp")
    row = {"entry_point": "f", "test": "assert f() == 1\n"}
    with pytest.raises(CreditBenchError, match="runs model-written code; it only does so when you opt in"):
        cls().verify(["def f():\n    return 1\n"], [row])
    cfg = RunConfig(task=TaskSpec(name="mbpp"))
    with pytest.raises(CreditBenchError, match="allow_code_execution: true"):
        resolve(cfg)
    assert (
        resolve(RunConfig(task=TaskSpec(name="mbpp"), allow_code_execution=True))
        .task.verify(["def f():\n    return 1\n"], [row])[0]
        .correct
    )
    monkeypatch.setenv("CREDITBENCH_ALLOW_CODE_EXECUTION", "1")
    assert cls().verify(["def f():\n    return 1\n"], [row])[0].correct


def test_training_needs_a_train_split():
    with pytest.raises(CreditBenchError, match="task 'humaneval' has no train split"):
        resolve(RunConfig(task=TaskSpec(name="humaneval"), allow_code_execution=True))


@needs_data
def test_prompt_helpers_run_with_the_tests_and_entry_points_may_shadow_builtins():
    he = task("humaneval")
    rows = {r["id"]: r for r in he.load("eval")}
    row = rows["HumanEval/38"]
    assert "def encode_cyclic" in row["test"] and "def decode_cyclic" not in row["test"]
    # redefining the prompt's helper cannot make a wrong decoder pass: the tests use the dataset's
    cheat = "```python\ndef encode_cyclic(s):\n    return s\n\ndef decode_cyclic(s):\n    return s\n```"
    assert not he.verify([cheat], [row])[0].correct
    assert he.verify([row["answer"]], [row])[0].correct
    mbpp = task("mbpp")
    row = next(r for r in mbpp.load("eval") if r["id"] == "mbpp/126")
    assert row["entry_point"] == "sum"  # the tests call the program's sum, not the builtin
    assert mbpp.verify([row["answer"]], [row])[0].correct
    assert not mbpp.verify(["def sum(a, b):\n    return 0\n"], [row])[0].correct
