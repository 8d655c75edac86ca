"""``creditbench judge``'s spec (bench.sweep.judge): every credit method against its credit-off twin, and
its placebo where its credit selects or weights tokens, with the template's design; bad input refused in
one line with nothing left behind; a second judge of the same thing resumes, another is refused."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from shared_data import DATA, needs_data

from bench.cli import judge as judge_cli
from bench.errors import CreditBenchError
from bench.registry import METHODS
from bench.sweep.judge import KEPT, judged, spec, write_spec
from bench.sweep.sweep import load_spec

ROOT = Path(__file__).resolve().parents[2]
CREDIT = [n for n in METHODS.names() if METHODS.get(n).twin_options is not None]


@pytest.fixture
def template(tmp_path) -> Path:
    """The flagship's spec in a sweeps folder of its own (its base config named by absolute path)."""
    d = yaml.safe_load((ROOT / "results/sweeps/embedded.yaml").read_text())
    d["base"] = str(ROOT / "results/configs/embedded_grpo.yaml")
    path = tmp_path / "sweeps" / "embedded.yaml"
    path.parent.mkdir()
    path.write_text(yaml.safe_dump(d))
    return path


def test_the_credit_methods_are_the_ones_with_a_twin():
    credit = {"arca", "delta", "entropy_top", "fipo", "gcpo", "grpo_lambda", "p_trace", "s_trace", "vineppo"}
    assert set(CREDIT) == credit
    placebo = {n for n in CREDIT if METHODS.get(n).placebo_control}
    assert placebo == {"arca", "delta", "entropy_top", "gcpo", "s_trace", "vineppo"}  # traces: 1 at ratio 1


@pytest.mark.parametrize("name", CREDIT)
def test_every_credit_method_is_set_against_its_twin_and_placebo(name, template):
    cls = METHODS.get(name)
    j = judged(name)
    path, written = write_spec(j, template)
    assert written and path == template.parent / f"judge-{name}.yaml"
    sweep = load_spec(path, template.parent.parent / "results")
    controls = ["twin", "placebo"] if cls.placebo_control else ["twin"]
    assert sorted({r.label for r in sweep.runs}) == sorted([name, *(f"{name}-{c}" for c in controls)])
    assert sweep.spec.analysis.credit_controls == {name: [f"{name}-{c}" for c in controls]}
    twin = next(r.cfg for r in sweep.runs if r.label == f"{name}-twin")
    assert {k: twin.method.options[k] for k in cls.twin_options} == cls.twin_options  # the method's own off switch
    assert twin.method.name == name and not twin.method.placebo
    if "placebo" in controls:
        placebo = next(r.cfg for r in sweep.runs if r.label == f"{name}-placebo")
        assert placebo.method.placebo and placebo.method.options == {}
    assert {(r.cfg.model.name, r.cfg.task.name) for r in sweep.runs} == {("tiny-500k", "chain")}
    assert {r.cfg.model.lora.rank for r in sweep.runs} == {16 if name == "arca" else 0}  # ARCA under LoRA


def test_the_spec_keeps_the_templates_design(template):
    j = judged("grpo_lambda", {"lam": 0.9}, label="lam09", sizes=("tiny-2m", "tiny-8m"))
    d, t = spec(j, template), yaml.safe_load(template.read_text())
    assert {k: d[k] for k in KEPT if k in t} == {k: t[k] for k in KEPT if k in t} and "credit_probe" not in d
    assert d["name"] == "judge-lam09" and d["tasks"] == ["chain"] and d["models"] == ["tiny-2m"]
    assert d["methods"] == [
        {"name": "grpo_lambda", "credit_controls": ["twin"], "label": "lam09", "options": {"lam": 0.9}}
    ]
    assert d["baseline"] == "lam09-twin" and d["analysis"]["pilot"] == "embedded"
    assert "pilot" not in spec(judged("grpo_lambda", task="arithmetic"), template)["analysis"]  # another task's


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["grpo"], "grpo has no credit-off twin .* judge compares a credit method with its twin: arca, delta"),
        (["nosuch"], "unknown method 'nosuch'. Valid methods: arca, dapo"),
        (["entropy_top", "--options", "{rhoo: 0.5}"], "no option 'rhoo'. Did you mean 'rho'"),
        (["entropy_top", "--options", "[1, 2]"], "--options must be a YAML mapping"),
        (["entropy_top", "--options", "{a: [}"], "--options is not YAML"),
        (["entropy_top", "--controls", "placebo"], "--controls must name twin"),
        (["entropy_top", "--label", "a/b"], "--label must be letters"),
        (["entropy_top", "--sizes", ","], "--sizes needs at least one"),
        (["entropy_top", "--jobs", "0"], "--jobs must be >= 1"),
        (["entropy_top", "--rates", "{a: [}"], "--rates is not YAML"),
        (["entropy_top", "--rates", "{tiny-2m: {lr: 1.0e-4, lrs: [1.0e-4]}}"], "--rates names size 'tiny-2m'"),
        (["entropy_top", "--rates", "{tiny-500k: {lr: 0, lrs: [1.0e-4]}}"], "--rates: tiny-500k must be"),
        (
            ["entropy_top", "--rates", "{tiny-500k: {lr: 1.0e-4, lrs: [1.0e-4], until: done}}"],
            "--rates: tiny-500k's until must be one of decided, resolved, got 'done'",
        ),
        (["entropy_top", "--template", "nope.yaml"], "--template nope.yaml not found"),
    ],
)
def test_bad_input_fails_in_one_line(args, message, template):
    args = [*args, "--dry_run"] + ([] if "--template" in args else ["--template", str(template)])
    with pytest.raises(CreditBenchError, match=message):
        judge_cli.main(args)
    assert sorted(p.name for p in template.parent.iterdir()) == ["embedded.yaml"]  # nothing written


@needs_data
def test_a_task_without_reference_completions_fails_before_anything_runs(template, monkeypatch):
    monkeypatch.setenv("CREDITBENCH_DATA", str(DATA))
    with pytest.raises(CreditBenchError, match="task 'gsm8k' has no reference completion"):
        judge_cli.main(["grpo_lambda", "--task", "gsm8k", "--dry_run", "--template", str(template)])
    assert sorted(p.name for p in template.parent.iterdir()) == ["embedded.yaml"]  # its spec removed again


def test_a_second_judge_resumes_and_other_settings_are_refused(template):
    path, written = write_spec(judged("delta"), template)
    text = path.read_text()
    assert written and text.startswith("# creditbench judge delta")
    assert write_spec(judged("delta"), template) == (path, False)  # the same: resumed
    with pytest.raises(CreditBenchError, match="judge-delta.yaml exists with other settings: give another --label"):
        write_spec(judged("delta", {"lam_min": 0.5}), template)
    assert path.read_text() == text  # not overwritten
    other, _ = write_spec(judged("delta", {"lam_min": 0.5}, label="delta-05"), template)
    assert other.name == "judge-delta-05.yaml"


def test_a_sizes_own_rates_reach_its_probe_and_a_probe_at_other_rates_is_refused(template, tmp_path):
    """``--rates``: the probe at that size trains its reference trajectories at the size's rate and updates
    its arms at the size's rates; a size not named keeps the template's; resuming a probe made at other
    rates is refused in one line."""
    import json

    from bench.cli import credit_probe

    j = judged("grpo_lambda", sizes=("tiny-500k", "tiny-2m"))
    path, _ = write_spec(j, template)
    a = judge_cli.parser().parse_args(["grpo_lambda", "--sizes", "tiny-500k,tiny-2m", "--rates",
                                       "{tiny-2m: {lr: 5.0e-5, lrs: [2.5e-5, 5.0e-5]}}"])  # fmt: skip
    rates = judge_cli._rates(a, j)
    args = {s: judge_cli._probe_args(str(path), j, s, str(tmp_path), [], rates=rates) for s in j.sizes}
    assert args["tiny-2m"][-6:] == ["--lrs", "2.5e-05,5e-05", "--trajectory_lr", "5e-05", "--model", "tiny-2m"]
    plan = credit_probe.planned(args["tiny-2m"])[1]
    assert plan.options.trajectory_lr == 5e-5 and {x.rl.lr for x in plan.labels.values()} == {5e-5}
    assert plan.rates == {"grpo_lambda": [2.5e-5, 5e-5], "grpo_lambda-twin": [2.5e-5, 5e-5]}
    assert "the reference trajectories train at lr 5e-05 (trajectory_lr)" in plan.notes
    first = credit_probe.planned(args["tiny-500k"])[1]  # not named: the template's rates, the label's own
    assert first.options.trajectory_lr is None and {x.rl.lr for x in first.labels.values()} == {1e-4}
    out = tmp_path / "probe"
    assert not judge_cli._resumed(out, rates["tiny-2m"])
    out.mkdir()
    (out / "updates.json").write_text(json.dumps({"plan": {"options": {"lrs": [1e-4, 2e-4], "trajectory_lr": None}}}))
    with pytest.raises(CreditBenchError, match="holds a probe at other rates .* move it away"):
        judge_cli._resumed(out, rates["tiny-2m"])
    assert judge_cli._resumed(out, None)  # no rates asked: its records are the probe's
    (out / "updates.json").write_text(json.dumps({"plan": {"options": {"lrs": [2.5e-5, 5e-5], "trajectory_lr": 5e-5}}}))
    assert judge_cli._resumed(out, rates["tiny-2m"])
    # until: resolved reaches the probe; a probe run until decided holds it (more rounds), not the reverse
    a = judge_cli.parser().parse_args(["grpo_lambda", "--sizes", "tiny-500k,tiny-2m", "--rates",
                                       "{tiny-2m: {lr: 5.0e-5, lrs: [2.5e-5, 5.0e-5], until: resolved}}"])  # fmt: skip
    stopping = judge_cli._rates(a, j)
    args = judge_cli._probe_args(str(path), j, "tiny-2m", str(tmp_path), [], rates=stopping)
    assert args[-4:] == ["--until", "resolved", "--model", "tiny-2m"]
    assert credit_probe.planned(args)[1].options.until == "resolved"
    assert judge_cli._resumed(out, stopping["tiny-2m"])
    early = {"lrs": [2.5e-5, 5e-5], "trajectory_lr": 5e-5, "until": "resolved"}
    (out / "updates.json").write_text(json.dumps({"plan": {"options": early}}))
    assert judge_cli._resumed(out, stopping["tiny-2m"])
    with pytest.raises(CreditBenchError, match="holds a probe at other rates"):
        judge_cli._resumed(out, rates["tiny-2m"])


def test_the_specs_probe_design_is_the_probes_and_a_flag_overrides_it(template, capsys):
    """A template's credit_probe section travels into the judge's spec, and the probe reads it."""
    from bench.cli import credit_probe

    t = yaml.safe_load(template.read_text())
    template.write_text(yaml.safe_dump({**t, "credit_probe": {"first": 3, "cap": 3, "lrs": [1.0e-4]}}))
    path, _ = write_spec(judged("grpo_lambda"), template)
    assert yaml.safe_load(path.read_text())["credit_probe"] == {"first": 3, "cap": 3, "lrs": [1.0e-4]}
    credit_probe.main([str(path), "--dry_run"])
    assert "at the cap (3 trajectories per pair)" in capsys.readouterr().out
    credit_probe.main([str(path), "--dry_run", "--cap", "6"])
    assert "at the cap (6 trajectories per pair)" in capsys.readouterr().out
    bad = template.parent / "bad.yaml"
    bad.write_text(yaml.safe_dump({**yaml.safe_load(path.read_text()), "name": "bad", "credit_probe": {"capp": 3}}))
    with pytest.raises(CreditBenchError, match="credit_probe has no option 'capp'; valid: batches"):
        credit_probe.main([str(bad), "--dry_run"])


def test_a_judges_probe_costs_grow_with_the_size_and_the_cap(template, tmp_path):
    """What the credit table's dry run sums: each probe's first round and cap in core seconds, at each size
    (the pace scaled by the model's matrix parameters)."""
    from bench.models.policy import tiny_matrix_params

    t = yaml.safe_load(template.read_text())
    template.write_text(yaml.safe_dump({**t, "credit_probe": {"first": 3, "cap": 9}}))
    args = ["p_trace", "--sizes", "tiny-500k,tiny-2m", "--template", str(template), "--results_dir", str(tmp_path)]
    costs = judge_cli.probe_costs(args)  # no probe done there yet
    assert list(costs) == ["tiny-500k", "tiny-2m"]
    (small, small_cap), (big, big_cap) = costs.values()
    assert 0 < small and small_cap == pytest.approx(3 * small)  # every pair at 9 trajectories against 3
    ratio = tiny_matrix_params("tiny-2m") / tiny_matrix_params("tiny-500k")
    assert big == pytest.approx(ratio * small, rel=0.5) and big > 2 * small


def test_a_probe_already_done_costs_nothing_in_the_dry_run(template, tmp_path, capsys):
    """A size whose probe has its records (at the rates asked for) is only reported again: the dry run says
    so and the table's sum counts 0 core seconds for it, the other size its cost."""
    import json

    results = tmp_path / "results"
    out = results / "probes" / "judge-p_trace"  # the first size's folder
    out.mkdir(parents=True)
    (out / "updates.json").write_text(json.dumps({"plan": {"options": {"lrs": [1e-4, 2e-4], "trajectory_lr": None}}}))
    args = ["p_trace", "--sizes", "tiny-500k,tiny-2m", "--template", str(template), "--results_dir", str(results)]
    assert judge_cli.main([*args, "--per_update_only", "--dry_run"]) == 0
    printed = capsys.readouterr().out
    assert f"credit probe at tiny-500k: done ({out}), its report only" in printed
    assert printed.count("credit probe of judge-p_trace:") == 1  # tiny-2m's cost only
    costs = judge_cli.probe_costs(args)
    assert costs["tiny-500k"] == (0.0, 0.0) and costs["tiny-2m"][0] > 0
