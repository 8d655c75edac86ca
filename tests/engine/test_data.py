"""The prompts a run trains and is evaluated on (bench.engine.data)."""

import pytest

from bench.config import EvalConfig
from bench.engine.data import PromptDataModule
from bench.errors import CreditBenchError
from bench.registry import TASKS


def _task(train_size=300):
    cls = TASKS.get("chain")
    return cls(cls.Config(train_size=train_size))


def test_a_tuning_run_s_validation_split_is_held_out_of_training_and_disjoint_from_the_eval_problems():
    verdict = PromptDataModule(_task(), 4, EvalConfig(num_problems=50), 0)
    tuning = PromptDataModule(_task(), 4, EvalConfig(num_problems=50, validation=True), 0)
    verdict.setup(), tuning.setup()
    questions = lambda rows: {r["question"] for r in rows}  # noqa: E731
    validation, eval_problems = questions(tuning.eval_rows), questions(verdict.eval_rows)
    assert len(tuning.eval_rows) == 50 and len(tuning.train_rows) == len(verdict.train_rows) - 50
    assert not validation & eval_problems
    assert not validation & questions(tuning.train_rows)
    assert validation <= questions(verdict.train_rows)  # the verdict's runs train on all of it, as before


def test_too_small_a_train_split_for_a_validation_split_is_one_line():
    data = PromptDataModule(_task(train_size=60), 4, EvalConfig(num_problems=50, validation=True), 0)
    with pytest.raises(CreditBenchError, match="too few to hold out 50"):
        data.setup()
