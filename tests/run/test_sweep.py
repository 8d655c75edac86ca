"""Sweeps: a spec is validated before anything starts; a sweep killed mid-run and started again
finds every run exactly once in MLflow, complete, and reports what an uninterrupted sweep does."""

import json
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import yaml
from tiny_sweep import SPEC

from bench.errors import CreditBenchError
from bench.sweep.sweep import load_spec

REPO = Path(__file__).resolve().parents[2]


def write_spec(tmp_path: Path, **changes) -> Path:
    spec = {**SPEC, **changes}
    path = tmp_path / f"{spec['name']}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def sweep_cmd(spec: Path, env: dict) -> list[str]:
    return [sys.executable, "-m", "bench.cli", "sweep", str(spec), "--results-dir", env["RESULTS"], "--uri", env["URI"]]


@pytest.fixture(scope="module")
def env(tmp_path_factory, warm_cache):
    root = tmp_path_factory.mktemp("sweep")
    e = {
        **os.environ,
        "URI": f"sqlite:///{root / 'mlflow.db'}",
        "RESULTS": str(root / "results"),
        "CREDITBENCH_CACHE": warm_cache,
        "ROOT": str(root),
    }
    e["MLFLOW_TRACKING_URI"] = e["URI"]
    return e


# ------------------------------------------------------------------ bad specs fail before any run
@pytest.mark.parametrize(
    "change, message",
    [
        ({"methods": ["grpo", "grpoo"]}, "unknown method 'grpoo'"),
        ({"tasks": ["arithmetik"]}, "unknown task 'arithmetik'"),
        ({"models": ["tiny-3m"]}, "unknown model size 'tiny-3m'"),
        ({"budget": None}, "budget"),
        ({"budget": {"steps": 10}}, "budget must be one of {samples: N} or {tokens: N}"),
        ({"budget": {"samples": -5}}, "budget samples must be a positive integer"),
        ({"eval": {"n": 2, "k": [1, 4]}}, "eval.k must lie in [1, eval.n=2]"),
        ({"baseline": "dapo"}, "baseline 'dapo' is not one of the sweep's method labels"),
        ({"seeds": ["zero"]}, "seeds must be integers"),
        ({"target_of": "best"}, "target_of must be one of gain, final"),
        ({"methodz": ["grpo"]}, "unknown sweep spec"),
        ({"methods": [{"name": "grpo", "options": {"clip": 0.3}}]}, "has no option 'clip'"),
        ({"overrides": {"rl.lr": -1}}, "rl.lr must be > 0"),
        ({"methods": ["grpo", {"name": "grpo"}]}, "used twice"),
    ],
)
def test_bad_spec_fails_before_any_run(tmp_path, change, message):
    spec = {k: v for k, v in {**SPEC, **change}.items() if v is not None}
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(spec))
    with pytest.raises(CreditBenchError) as e:
        load_spec(path)
    assert message in str(e.value)
    assert "\n" not in str(e.value)


def test_bad_spec_on_the_command_line_starts_nothing(tmp_path, env):
    path = write_spec(tmp_path, name="bad", methods=["grpo", "s-trace"])
    results, db = tmp_path / "results", tmp_path / "m.db"
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.cli",
            "sweep",
            str(path),
            "--results-dir",
            str(results),
            "--uri",
            f"sqlite:///{db}",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
    )
    assert p.returncode == 2
    err = p.stderr.strip().splitlines()
    assert len(err) == 1 and "unknown method 's-trace'" in err[0] and "s_trace" in err[0], p.stderr
    assert not results.exists() and not db.exists()


def test_spec_expands_methods_models_seeds(tmp_path):
    path = write_spec(
        tmp_path,
        methods=["all", {"name": "arca", "overrides": {"model.lora.rank": 4}}],
        models=["tiny-500k", "tiny-2m"],
        seeds=[3],
    )
    sweep = load_spec(path)
    from bench.registry import METHODS

    assert sorted(sweep.labels) == sorted(METHODS.names())
    assert len(sweep.runs) == 2 * len(METHODS.names())
    arca = next(r for r in sweep.runs if r.label == "arca")
    assert arca.cfg.model.lora.rank == 4 and arca.cfg.seed == 3
    grpo = next(r for r in sweep.runs if r.label == "grpo")
    assert grpo.cfg.rl.budget_samples == 160 and grpo.cfg.rl.steps == 5  # 160 samples at 4 x 8 per step
    assert grpo.cfg.eval.n == 2 and grpo.cfg.rl.sampling.max_new_tokens == 20
    assert grpo.key == "grpo-arithmetic-tiny-500k-seed3"


def test_inert_credit_is_flagged_at_expansion_and_in_the_report(tmp_path):
    """A label whose credit cannot differ from its twin's under its settings (FIPO in one on-policy
    update) is named at expansion, by `creditbench sweep` in one line, and in the report's table."""
    from bench.report.files import markdown

    fipo_many = {"name": "fipo", "label": "fipo-epochs", "overrides": {"rl.ppo_epochs": 2}}
    path = write_spec(tmp_path, methods=["grpo", "fipo", fipo_many], seeds=[0])
    sweep = load_spec(path)
    assert list(sweep.inert) == ["fipo"] and "single on-policy update" in sweep.inert["fipo"]
    cmd = [sys.executable, "-m", "bench.cli", "sweep", str(path), "--dry_run", "--results-dir", str(tmp_path)]
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert p.returncode == 0, p.stderr
    warned = [line for line in p.stderr.splitlines() if "inert credit" in line]
    assert len(warned) == 1 and "'fipo'" in warned[0] and "rl.ppo_epochs" in warned[0]
    report = json.loads((REPO / "results" / "methods" / "report.json").read_text())
    report["inert"] = {"fipo": sweep.inert["fipo"]}
    text = markdown(report)
    assert "| fipo (inert credit) |" in text and "Inert credit: `fipo`: FIPO's influence" in text
    assert "| dapo (inert credit) |" not in text


# ------------------------------------------------------------------ interrupt and resume
def _sweep_runs(uri: str, sweep: str):
    import mlflow

    client = mlflow.MlflowClient(uri)
    exp = client.get_experiment_by_name("creditbench")
    return client, client.search_runs([exp.experiment_id], f"tags.sweep = '{sweep}'")


def _training(uri: str, sweep: str, done: set[str] = frozenset()) -> bool:
    """Whether a run of the sweep but those in ``done`` is under way (its MLflow run exists and is RUNNING)."""
    try:
        client, runs = _sweep_runs(uri, sweep)
    except Exception:  # the store or the experiment may not exist yet
        return False
    return any(
        r.info.status == "RUNNING" and r.data.tags.get("run_key") not in done
        for r in runs
        if r.data.tags.get("kind") == "rl"
    )


def _comparable(report: dict) -> dict:
    """The report without what legitimately differs between two sweeps: names, run time."""
    rows = []
    for r in report["rows"]:
        metrics = {k: v for k, v in r["metrics"].items() if k != "wall_s"}
        rows.append({**r, "metrics": metrics})
    return {"rows": rows, "credit_maps": report["credit_maps"], "runs": report["runs"]}


@pytest.mark.slow  # two sweeps, one interrupted (about 90 s): CI runs it (-m slow)
def test_interrupted_sweep_resumes_to_the_same_report(tmp_path, env):
    whole = write_spec(tmp_path, name="whole", seeds=[0])
    p = subprocess.run(sweep_cmd(whole, env), capture_output=True, text=True, cwd=REPO, env=env, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    reference = json.loads((Path(env["RESULTS"]) / "whole" / "report.json").read_text())
    again = subprocess.run(sweep_cmd(whole, env), capture_output=True, text=True, cwd=REPO, env=env, timeout=300)
    assert again.returncode == 0 and "2 finished, 0 to run" in again.stdout, again.stderr[-2000:]

    # the same sweep against another store is refused before either store or the results are touched
    results = Path(env["RESULTS"]) / "whole"
    files = {p: p.read_bytes() for p in results.rglob("*") if p.is_file() and p.name != ".lock"}
    client, runs_before = _sweep_runs(env["URI"], "whole")
    other = Path(env["ROOT"]) / "other.db"
    cmd = [*sweep_cmd(whole, env)[:-1], f"sqlite:///{other}"]
    refused = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=env, timeout=300)
    assert refused.returncode != 0 and "rerun with --uri" in refused.stderr, refused.stderr[-2000:]
    assert len(refused.stderr.strip().splitlines()) == 1 and not other.exists()
    assert {p: p.read_bytes() for p in results.rglob("*") if p.is_file() and p.name != ".lock"} == files
    _, runs_after = _sweep_runs(env["URI"], "whole")
    assert [(r.info.run_id, r.info.status) for r in runs_after] == [(r.info.run_id, r.info.status) for r in runs_before]

    spec = write_spec(tmp_path, name="cut", seeds=[0])
    runs_dir = Path(env["RESULTS"]) / "cut" / "runs"
    # open the store once now (imports, schema check: seconds): in a sweep worker the second run
    # trains for a few seconds only, and each poll below must see it in time
    _training(env["URI"], "whole")
    proc = subprocess.Popen(
        sweep_cmd(spec, env),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=REPO,
        env=env,
        start_new_session=True,
    )
    try:
        deadline = time.time() + 600
        while time.time() < deadline:  # kill once one run finished and the next one is training
            done = {p.stem for p in runs_dir.glob("*.json")}
            if done and _training(env["URI"], "cut", done):
                break
            assert proc.poll() is None, "the sweep ended before it could be interrupted"
            time.sleep(0.5)
        time.sleep(1)
        os.kill(proc.pid, signal.SIGKILL)  # the sweep process only: its run dies with it
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    finished = len(list(runs_dir.glob("*.json")))
    time.sleep(5)
    assert len(list(runs_dir.glob("*.json"))) == finished, "a run outlived the killed sweep"
    assert finished == 1, f"the kill should land in the second run, {finished} of 2 runs had finished"
    client, before = _sweep_runs(env["URI"], "cut")
    assert any(r.info.status == "RUNNING" for r in before if r.data.tags.get("kind") == "rl"), (
        "the interrupted run should be left RUNNING in the store"
    )

    p = subprocess.run(sweep_cmd(spec, env), capture_output=True, text=True, cwd=REPO, env=env, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "1 finished, 1 to run" in p.stdout

    client, after = _sweep_runs(env["URI"], "cut")
    children = [r for r in after if r.data.tags.get("kind") == "rl"]
    parents = [r for r in after if r.data.tags.get("kind") == "sweep"]
    keys = sorted(r.data.tags["run_key"] for r in children)
    assert keys == ["grpo-arithmetic-tiny-500k-seed0", "gspo-arithmetic-tiny-500k-seed0"], keys  # each once
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    for r in children:
        assert r.info.status == "FINISHED"
        assert r.data.tags["mlflow.parentRunId"] == parents[0].info.run_id
        steps = int(r.data.metrics["train/samples"]) // 32
        train = [m.step for m in client.get_metric_history(r.info.run_id, "train/reward")]
        assert train == list(range(1, steps + 1)), train  # every step once
        evals = [m.step for m in client.get_metric_history(r.info.run_id, "eval/arithmetic/pass_at_1")]
        assert evals == [0, 2, 4, 5], evals
    cut = json.loads((Path(env["RESULTS"]) / "cut" / "report.json").read_text())
    assert _comparable(cut) == _comparable(reference)
    assert {a.path for a in client.list_artifacts(parents[0].info.run_id, "report")} >= {
        "report/report.json",
        "report/summary.md",
        "report/summary.csv",
        "report/pass1_vs_samples.png",
    }
    # the report rewritten from the finished runs is the same, and goes to the parent run again
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.cli",
            "summarize",
            "--sweep",
            "cut",
            "--results-dir",
            env["RESULTS"],
            "--uri",
            env["URI"],
            "--no-plots",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=300,
    )
    assert p.returncode == 0 and parents[0].info.run_id in p.stdout, p.stderr[-2000:]
    again = json.loads((Path(env["RESULTS"]) / "cut" / "report.json").read_text())
    assert _comparable(again) == _comparable(cut)
    local = client.download_artifacts(parents[0].info.run_id, "report/summary.md", str(tmp_path))
    assert Path(local).read_text() == (Path(env["RESULTS"]) / "cut" / "summary.md").read_text()


# ------------------------------------------------------------------ credit controls and one eval grid
def test_credit_controls_expand_to_twins_and_placebos_compared_first(tmp_path):
    spec = write_spec(
        tmp_path,
        methods=["grpo", "entropy_top", {"name": "grpo_lambda", "credit_controls": ["twin"]}],
        credit_controls=["twin", "placebo"],
    )
    sweep = load_spec(spec)
    labels = list(dict.fromkeys(r.label for r in sweep.runs))
    assert labels == [
        "grpo",
        "entropy_top",
        "entropy_top-twin",
        "entropy_top-placebo",
        "grpo_lambda",
        "grpo_lambda-twin",
    ]
    cfg = {r.label: r.cfg for r in sweep.runs if r.cfg.seed == 0}
    assert cfg["entropy_top-twin"].method.options == {"rho": 1.0} and not cfg["entropy_top-twin"].method.placebo
    assert cfg["entropy_top-placebo"].method.placebo and cfg["entropy_top-placebo"].method.options == {}
    assert cfg["grpo_lambda-twin"].method.options == {"lam": 0.0}
    twin, method = cfg["entropy_top-twin"], cfg["entropy_top"]  # the twin's run differs in its options alone
    assert {**vars(twin), "method": None, "tracking": None} == {**vars(method), "method": None, "tracking": None}
    assert sweep.spec.analysis.credit_controls == {
        "entropy_top": ["entropy_top-twin", "entropy_top-placebo"],
        "grpo_lambda": ["grpo_lambda-twin"],
    }
    assert {r.cfg.eval.every_samples for r in sweep.runs} == {2 * 4 * 8}  # eval.every 2 batches of 32 samples


@pytest.mark.slow
def test_every_label_is_evaluated_at_the_same_sample_counts_and_no_budget_is_passed(tmp_path, env):
    """DAPO's dynamic sampling refills its steps (more samples a step, fewer steps), yet its runs are
    evaluated where GRPO's are and stop at the budget exactly; the report says so."""
    spec = write_spec(tmp_path, name="grid", methods=["grpo", "entropy_top"], seeds=[0], credit_controls=["twin"])
    subprocess.run(sweep_cmd(spec, env), env=env, check=True, capture_output=True, timeout=600)
    report = json.loads((Path(env["RESULTS"]) / "grid" / "report.json").read_text())
    rows = report["budgets"]
    assert {r["label"] for r in rows} == {"grpo", "entropy_top", "entropy_top-twin"}
    assert all(r["samples"] == [160, 160] and r["same_grid"] for r in rows)
    assert {tuple(r["eval_samples"]) for r in rows} == {(0, 64, 128, 160)}
    assert min(r["steps"][0] for r in rows if r["label"] != "grpo") < 5  # refills took fewer steps
    family = report["analysis"]["credit"]["assessment"]["comparisons"]
    assert [(c["baseline"], list(c["diffs"])) for c in family] == [("entropy_top-twin", ["entropy_top"])]


# ------------------------------------------------------------------ learning rates tuned with an equal budget
def test_tuning_runs_every_label_on_its_own_seeds_and_problems(tmp_path):
    tune = {"lr": [5.0e-4, 1.0e-3], "seeds": [10, 11], "knobs": {"entropy_top": {"rho": [0.1, 0.2]}}}
    spec = write_spec(tmp_path, methods=["grpo", "entropy_top"], credit_controls=["twin"], tune=tune)
    tuned, sweep = load_spec(spec, tmp_path, tuning=True), load_spec(spec, tmp_path)
    per_label = defaultdict(int)
    for r in tuned.runs:
        per_label[r.label.split("@")[0]] += 1
    # every label the same runs: the knob's points, or as many on a finer lr grid (GRPO, the twin)
    assert dict(per_label) == {"grpo": 8, "entropy_top": 8, "entropy_top-twin": 8}  # 4 points x 2 seeds
    twin = [r.cfg for r in tuned.runs if r.label.startswith("entropy_top-twin@")]
    assert {c.method.options["rho"] for c in twin} == {1.0}  # the twin stays the twin
    assert sorted({c.rl.lr for c in twin}) == pytest.approx(list(np.geomspace(5.0e-4, 1.0e-3, 4)))  # a finer grid
    assert {r.cfg.seed for r in tuned.runs} == {10, 11} and {r.cfg.seed for r in sweep.runs} == {0, 1}
    assert all(r.cfg.eval.validation for r in tuned.runs) and not any(r.cfg.eval.validation for r in sweep.runs)
    assert {r.cfg.rl.budget_samples for r in tuned.runs} == {r.cfg.rl.budget_samples for r in sweep.runs}
    with pytest.raises(CreditBenchError, match=r"tune.seeds must be disjoint from seeds .* \[1\]"):
        load_spec(write_spec(tmp_path, tune={**tune, "seeds": [1, 12]}))
    knobs = {"entropy_top": {"rho": [0.1, 0.2]}, "s_trace": {"rho": [0.1, 0.2, 0.5]}}
    with pytest.raises(CreditBenchError, match="tune.knobs must all list the same number of values"):
        load_spec(write_spec(tmp_path, tune={**tune, "knobs": knobs}), tmp_path, tuning=True)


def test_a_choice_at_the_grids_edge_is_flagged(tmp_path):
    """A label whose best learning rate is the grid's least or largest (of three or more) is marked in the
    report, which asks for a wider grid; one inside the grid is not."""
    from bench.sweep import tuning

    spec = write_spec(tmp_path, methods=["grpo", "gspo"], tune={"lr": [1.0e-4, 2.0e-4, 4.0e-4], "seeds": [7]})
    tuned = load_spec(spec, tmp_path, tuning=True)
    scores = {"grpo": [0.1, 0.2, 0.3], "gspo": [0.1, 0.3, 0.2]}  # grpo best at 4e-4 (the edge), gspo at 2e-4
    runs = []
    for r in tuned.runs:
        label, _, _ = r.label.partition("@")
        mean = scores[label][[1.0e-4, 2.0e-4, 4.0e-4].index(r.cfg.rl.lr)]
        runs.append(SimpleNamespace(label=r.label, seed=r.cfg.seed, final={"pass_at_1": mean}, samples=64, wall_s=1.0))
    choice = tuning.select(load_spec(spec, tmp_path).spec, runs)
    assert choice["labels"]["grpo"]["edge"] and not choice["labels"]["gspo"]["edge"]
    text = "\n".join(tuning.markdown_lines(choice))
    assert "| grpo | lr 0.0004 (grid edge) | – |" in text and "| gspo | lr 0.0002 | – |" in text  # 1 seed: no margin
    assert "At the grid's edge (grpo)" in text


@pytest.mark.slow
def test_tuning_chooses_on_its_runs_and_the_sweep_runs_at_the_choice(tmp_path, env):
    """The whole protocol on a tiny sweep: the tuning sweep runs first, each label keeps its best point,
    the evaluation seeds' runs use it, and the report shows the choice; the verdict's runs only."""
    tune = {"lr": [1.0e-4, 1.0e-3], "seeds": [7]}
    spec = write_spec(tmp_path, name="tuned", methods=["grpo", "gspo"], seeds=[0], tune=tune, budget={"samples": 64})
    subprocess.run(sweep_cmd(spec, env), env=env, check=True, capture_output=True, timeout=600)
    results = Path(env["RESULTS"])
    choice = json.loads((results / "tuned" / "tuning.json").read_text())
    assert choice["runs"] == 4 and set(choice["labels"]) == {"grpo", "gspo"}
    for label, v in choice["labels"].items():
        best = max(v["grid"], key=lambda t: t["mean"])
        assert v["chosen"] == best["point"]
        run = json.loads((results / "tuned" / "runs" / f"{label}-arithmetic-tiny-500k-seed0.json").read_text())
        assert run["seed"] == 0
    report = json.loads((results / "tuned" / "report.json").read_text())
    assert report["tuning"] == choice and report["runs"] == 2
    assert "## Tuning" in (results / "tuned" / "summary.md").read_text()
    lrs = {r.label: r.cfg.rl.lr for r in load_spec(spec, results).runs}
    assert lrs == {label: v["chosen"]["lr"] for label, v in choice["labels"].items()}
