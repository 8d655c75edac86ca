"""Bad input gives one clear line naming the valid choices, before any work starts."""

import pytest

from bench.cli import main


def run_cli(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def error_line(err: str) -> str:
    lines = [l for l in err.splitlines() if l.startswith("creditbench: error:")]
    assert len(lines) == 1, err
    return lines[0]


def test_methods_and_tasks_are_listed(capsys):
    from bench.registry import METHODS

    code, out, _ = run_cli(capsys, "methods")
    listed = [line.split()[0] for line in out.splitlines()]
    assert code == 0 and listed == METHODS.names() and "2402.03300" in out
    code, out, _ = run_cli(capsys, "tasks")
    assert code == 0 and "arithmetic" in out and "(v1)" in out


def test_one_entry_lists_its_options_with_defaults_and_docs(capsys):
    code, out, _ = run_cli(capsys, "methods", "grpo_lambda")
    assert code == 0 and out.startswith("method grpo_lambda: ") and "2510.00194" in out
    assert "  lam: float = 0.99" in out and "lambda of the trace" in out  # its own field
    assert "  clip_eps: float = 0.2" in out and "PPO clip range" in out  # and GRPO's, inherited
    code, out, _ = run_cli(capsys, "tasks", "chain")
    assert code == 0 and "  steps: int = 6" in out and "task.options" in out
    code, _, err = run_cli(capsys, "methods", "grpoo")
    assert code != 0 and "Did you mean 'grpo'" in error_line(err)


def test_version_and_field_docs_in_train_help(capsys):
    from importlib.metadata import version

    code, out, _ = run_cli(capsys, "--version")
    assert code == 0 and out.strip() == f"creditbench {version('creditbench')}"
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    out = capsys.readouterr().out
    assert "Peak learning rate (AdamW)." in " ".join(out.split())  # a field's docstring


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["--method.name", "grpoo"], "unknown method 'grpoo'. Did you mean 'grpo'"),
        (["--method.name", "grpoo"], "Valid methods: arca, dapo, delta, dr_grpo"),
        (["--task.name", "arithmetik"], "Did you mean 'arithmetic'"),
        (["--model.name", "tiny-1m"], "Valid model sizes: tiny-2m, tiny-500k, tiny-8m"),
        (["--model.name", "./no/such/model"], "model directory './no/such/model' does not exist"),
        (["--rl.group_size", "1"], "group_size (G) must be >= 2"),
        (["--eval.n", "2", "--eval.k", "[1, 4]"], "unbiased pass@k needs k <= n"),
        (["--method.options", "{clip: 0.3}"], "has no option 'clip'. Did you mean 'clip_eps'?"),
        (["--method.options", "{aggregation: mean}"], "valid: token-mean"),
        (["--precision", "fp8"], "bf16-mixed"),
        (["--rl.stepz", "3"], "stepz"),
        (["--method.name", "arca"], "set model.lora.rank > 0"),
        (["--model.lora.rank", "-1"], "model.lora.rank must be >= 0"),
        (
            ["--method.name", "arca", "--model.lora.rank", "8", "--method.options", "{signal: grad}"],
            "valid: residual, uniform, surprisal, entropy_reduction, policy_divergence",
        ),
        (["--method.name", "grpo_lambda", "--method.options", "{style: old}"], "valid: recent, both"),
        (["--method.name", "ibpo", "--method.options", "{alignment: fuzzy}"], "valid: diff, prefix_suffix"),
    ],
)
def test_bad_training_input(capsys, tmp_path, argv, expected):
    code, _, err = run_cli(capsys, "train", "--tracking.uri", f"sqlite:///{tmp_path}/m.db", *argv)
    assert code != 0
    assert expected in error_line(err)
    assert not (tmp_path / "m.db").exists(), "nothing may be written before the input is validated"


def test_malformed_and_missing_yaml(capsys, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("rl: [steps: 3\n  - ]: :\n")
    code, _, err = run_cli(capsys, "train", "--config", str(bad))
    assert code != 0 and "bad configuration" in error_line(err)
    code, _, err = run_cli(capsys, "train", "--config", str(tmp_path / "missing.yaml"))
    assert code != 0 and "missing.yaml" in error_line(err)


def test_unknown_command(capsys):
    from bench.cli import COMMANDS

    code, out, err = run_cli(capsys, "trian")
    assert code == 2 and not out and "Did you mean 'train'" in error_line(err)
    assert f"Valid commands: {', '.join(sorted(COMMANDS))}." in error_line(err)


def test_every_command_of_the_dispatch_table_is_in_the_help(capsys):
    """bench/cli/__init__.py's COMMANDS is the one list: each name has its module and appears in
    ``creditbench --help`` with that module's summary."""
    from bench.cli import COMMANDS, command

    code, out, _ = run_cli(capsys, "--help")
    assert code == 0
    for name in COMMANDS:
        module = command(name)
        assert callable(module.main) and f"  {name} " in out and module.HELP in out, name
        assert f"creditbench {module.USAGE}" in out, name


def test_every_shipped_config_parses_and_resolves():
    from pathlib import Path

    from bench.run.args import run_config
    from bench.run.resolve import resolve

    configs = sorted(Path(__file__).resolve().parent.parent.glob("results/configs/*.yaml"))
    assert configs
    for path in configs:
        resolve(run_config(["--config", str(path)]))


def test_table_of_an_unknown_sweep_and_ui_of_a_missing_store_refuse(capsys, tmp_path):
    code, _, err = run_cli(capsys, "table", "--paper", "selective_traces", "--sweep", "embeded")
    assert code != 0 and "Did you mean 'embedded'" in error_line(err) and "Sweeps with a report:" in err
    store = tmp_path / "nothing.db"
    code, _, err = run_cli(capsys, "ui", "--uri", f"sqlite:///{store}")
    assert code != 0 and "no MLflow store at" in error_line(err) and not store.exists()


def test_every_command_spells_its_flags_in_snake_case(capsys):
    """One flag style (bench/run/args.py): a command added later with kebab-case flags fails here."""
    import re

    from bench.cli import COMMANDS

    for cmd in sorted(set(COMMANDS) - {"methods", "tasks"}):
        with pytest.raises(SystemExit) as e:
            main([cmd, "--help"])
        assert e.value.code == 0
        flags = set(re.findall(r"(?<![\w-])--[A-Za-z][\w.-]*", capsys.readouterr().out))
        assert flags and not [f for f in flags if "-" in f[2:]], f"creditbench {cmd}: {sorted(flags)}"


def test_the_train_summary_line_says_when_no_problem_changed():
    """z is undefined when the paired differences are all zero (a short run on a few problems)."""
    from bench.run.train import summary_line

    res = {"run_name": "r", "base": {"pass_at_1": 0.0}, "final": {"pass_at_1": 0.0}, "samples": 2, "tokens": 9}
    res |= {"wall_s": 3.0, "mlflow_run_id": "abc", "delta_pass_at_1": {"delta": 0.0, "se": 0.0, "z": float("nan")}}
    assert "z=n/a: no problem changed" in summary_line(res) and "nan" not in summary_line(res)
    res["delta_pass_at_1"] = {"delta": 0.25, "se": 0.1, "z": 2.5}
    assert "(delta +0.250 +/- 0.100 paired SE, z=2.5)" in summary_line(res)
