"""The sweep spec's typed form (bench/sweep/spec.py): shorthands, defaults and the one-line errors of
values jsonargparse refuses. The bad specs a user writes are tests/run/test_sweep.py's and
tests/bad_input/test_bad_input_sweep.py's."""

import re
from pathlib import Path

import pytest
import yaml

from bench.errors import CreditBenchError
from bench.sweep.spec import TARGETS, MethodEntry, ModelEntry, SweepSpec, read_spec


def write(tmp_path: Path, **spec) -> Path:
    path = tmp_path / "spec.yaml"
    path.write_text(
        yaml.safe_dump(
            {"name": "s", "methods": ["grpo"], "models": ["tiny-500k"], "seeds": [0], "budget": {"samples": 64}, **spec}
        )
    )
    return path


def test_shorthands_and_defaults(tmp_path):
    """A list key given one entry is that entry's list; an entry given by its name is {name: NAME};
    the report's settings default to grpo, 0.9 of its gain."""
    spec = read_spec(
        write(
            tmp_path,
            methods="gspo",
            models={"name": "tiny-2m", "overrides": {"rl.lr": 1e-3}},
            seeds=3,
            eval_tasks="gsm8k",
            overrides=None,
        )
    )
    assert spec.methods == [MethodEntry("gspo")]
    assert spec.models == [ModelEntry("tiny-2m", {"rl.lr": 1e-3})]
    assert spec.seeds == [3] and [t.name for t in spec.eval_tasks] == ["gsm8k"] and spec.overrides == {}
    assert spec.budget.as_dict() == {"samples": 64} and spec.tasks is None
    assert (spec.baseline, spec.target, spec.target_of) == ("grpo", 0.9, "gain")
    assert (SweepSpec.baseline, SweepSpec.target, SweepSpec.target_of) == ("grpo", 0.9, "gain")
    assert TARGETS == ("gain", "final")


def test_method_entries_expand_all_and_merge_overrides(tmp_path):
    from bench.registry import METHODS

    spec = read_spec(
        write(
            tmp_path,
            methods=["all", {"name": "grpo", "label": "grpo-lr", "overrides": {"rl.lr": 2}}],
            method_overrides={"grpo": {"rl.lr": 1, "rl.steps": 3}},
        )
    )
    entries = {m.label: m for m in spec.method_entries()}
    assert set(entries) == {*METHODS.names(), "grpo-lr"}
    assert entries["grpo"].overrides == {"rl.lr": 1, "rl.steps": 3}
    assert entries["grpo-lr"].overrides == {"rl.lr": 2, "rl.steps": 3}  # the entry's own over the method's


@pytest.mark.parametrize(
    "change, message",
    [
        ({"threads": "two"}, "threads must be an integer, got 'two'"),
        ({"target": "high"}, "target must be a number, got 'high'"),
        ({"budget": {"tokens": 0}}, "budget tokens must be a positive integer, got 0"),
        ({"budget": {"samples": 1, "tokens": 2}}, "budget must be one of {samples: N} or {tokens: N}"),
        ({"budget": 64}, "budget must be one of {samples: N} or {tokens: N}"),
        ({"eval": [1, 2]}, "eval must be a mapping, got [1, 2]"),
        ({"tasks": []}, "tasks must list at least one entry"),
        ({"methods": [{"name": "grpo", "label": 7}]}, "method 'grpo': label must be a string, got 7"),
        ({"models": [{"name": "tiny-2m", "overrides": [1]}]}, "model 'tiny-2m': overrides must be a mapping, got [1]"),
        ({"tasks": [{"name": "arithmetic", "optons": {}}]}, "a tasks entry is a name or {name, options}: unknown key"),
    ],
)
def test_refused_values_name_the_file_and_the_key(tmp_path, change, message):
    path = write(tmp_path, **change)
    with pytest.raises(CreditBenchError) as e:
        read_spec(path)
    assert re.match(rf"sweep spec {re.escape(str(path))}:\d+: ", str(e.value)) and message in str(e.value)
    assert "\n" not in str(e.value)


def test_a_credit_control_is_a_placebo_by_its_flag_not_its_label(tmp_path):
    """Expanded or written by hand, a credit control is a placebo where its entry sets ``placebo`` (the
    flag its run config carries), else a twin; a label that controls nothing is neither."""
    spec = read_spec(write(tmp_path, methods=["grpo", "entropy_top"], credit_controls=["twin", "placebo"]))
    control = spec.analysis.control
    assert [control(x) for x in ("entropy_top-twin", "entropy_top-placebo", "entropy_top", "grpo")] == [
        "twin", "placebo", None, None,
    ]  # fmt: skip
    methods = ["grpo", "entropy_top", {"name": "entropy_top", "label": "shuffled", "placebo": True},
               {"name": "entropy_top", "label": "flat", "options": {"rho": 1.0}}]  # fmt: skip
    spec = read_spec(
        write(tmp_path, methods=methods, analysis={"credit_controls": {"entropy_top": ["flat", "shuffled"]}})
    )
    assert (spec.analysis.control("shuffled"), spec.analysis.control("flat")) == ("placebo", "twin")
