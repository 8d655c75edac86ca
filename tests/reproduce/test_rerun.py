"""The committed-results check: two reports are the same when everything but the wall times is."""

import pytest

from bench.reproduce.rerun import SCHEDULE_KEYS, TIMING_KEYS, differences


def test_identical_reports_except_wall_times_match():
    a = {"runs": 4, "compute_s": 100.0, "rows": [{"metrics": {"pass_at_1": {"mean": 0.25}, "wall_s": {"mean": 3.0}}}]}
    b = {"runs": 4, "compute_s": 93.5, "rows": [{"metrics": {"pass_at_1": {"mean": 0.25}, "wall_s": {"mean": 9.0}}}]}
    assert differences(a, b) == []


def test_a_moved_number_is_named_by_its_path():
    a = {"rows": [{"metrics": {"pass_at_1": {"mean": 0.25, "lo": None}}}]}
    b = {"rows": [{"metrics": {"pass_at_1": {"mean": 0.25000000000000006, "lo": None}}}]}
    assert differences(a, b) == ["rows[0].metrics.pass_at_1.mean: 0.25 committed != 0.25000000000000006 fresh"]


def test_missing_keys_lengths_and_nan():
    assert differences({"x": 1}, {"y": 1}) == ["x: only in the committed report", "y: only in the fresh report"]
    assert differences({"r": [1, 2]}, {"r": [1]}) == ["r: 2 entries committed, 1 fresh"]
    assert differences({"v": float("nan")}, {"v": float("nan")}) == []


def test_a_labels_rerun_skips_which_run_filled_the_base_eval_cache_but_not_its_values():
    """A rerun of some labels computes a seed's base eval in a run that reused it in the whole sweep: the
    flag moves, the numbers must not."""
    a = {"base_eval_reused": True, "base": {"pass_at_1": 0.25}}
    b = {"base_eval_reused": False, "base": {"pass_at_1": 0.25}}
    assert differences(a, b) == ["base_eval_reused: True committed != False fresh"]  # a whole sweep: it counts
    assert differences(a, b, skip=TIMING_KEYS | SCHEDULE_KEYS) == []
    b["base"]["pass_at_1"] = 0.5
    assert differences(a, b, skip=TIMING_KEYS | SCHEDULE_KEYS) == ["base.pass_at_1: 0.25 committed != 0.5 fresh"]


def test_a_run_that_failed_is_redone_once_and_a_second_failure_stands(tmp_path, capsys):
    from bench.errors import CreditBenchError
    from bench.reproduce.rerun import _rerun

    (tmp_path / "a.log").write_text(
        "Traceback (most recent call last):\nsqlite3.OperationalError: database is locked\n"
    )
    calls = []

    def flaky():
        calls.append(1)
        if len(calls) == 1:
            raise CreditBenchError("1 of 6 runs failed (a); their logs are in x; run the sweep again to redo them")
        return {"runs": 6}

    assert _rerun(tmp_path, flaky) == {"runs": 6} and len(calls) == 2
    assert "database is locked" in capsys.readouterr().err  # the failed run's own words, for CI's output

    def broken():
        raise CreditBenchError("1 of 6 runs failed (a); their logs are in x; run the sweep again to redo them")

    with pytest.raises(CreditBenchError, match="runs failed"):
        _rerun(tmp_path, broken)
    with pytest.raises(CreditBenchError, match="no committed report"):
        _rerun(tmp_path, lambda: (_ for _ in ()).throw(CreditBenchError("no committed report")))


def test_labels_rerun_only_their_committed_runs_and_name_a_moved_number(tmp_path, monkeypatch, capsys):
    """--labels reruns the committed runs of those labels alone (here the rerun hands back the committed
    results, one of them moved) and compares each run's result with its committed one exactly."""
    import json
    import shutil
    from pathlib import Path

    from bench.cli import reproduce
    from bench.errors import CreditBenchError
    from bench.sweep import launch

    repo = Path(__file__).resolve().parents[2]
    committed = repo / "results" / "embedded-control" / "runs"
    ran = []

    def rerun(sweep, report, jobs, results_dir, uri):
        for r in sweep.runs:
            ran.append(r.label)
            dst = Path(results_dir) / sweep.name / "runs" / f"{r.key}.json"
            dst.parent.mkdir(parents=True, exist_ok=True)
            data = json.loads((committed / f"{r.key}.json").read_text())
            data["wall_s"], data["mlflow_run_id"] = 1.0, "fresh"  # a rerun's own timing and id
            if moved and r.key.endswith("seed1"):
                data["final"][next(iter(data["final"]))] = "moved"
            dst.write_text(json.dumps(data))
        return {}

    monkeypatch.setattr(launch, "run_sweep", rerun)
    spec = str(repo / "results" / "sweeps" / "embedded-control.yaml")
    n = len(list(committed.glob("grpo-arithmetic-*.json")))
    args = ["--results-dir", str(repo / "results"), "--keep", str(tmp_path / "a")]
    moved = False
    assert reproduce.main([spec, "--labels", "grpo", *args]) == 0
    assert set(ran) == {"grpo"} and len(ran) == n >= 3
    assert f"{n} runs of grpo (sweep embedded-control) reproduced exactly" in capsys.readouterr().out
    moved = True
    shutil.rmtree(tmp_path / "a")
    assert reproduce.main([spec, "--labels", "grpo", *args]) == 1
    out = capsys.readouterr().out
    assert f"1 difference(s) in {n} runs" in out and "grpo-arithmetic-tiny-500k-seed1: final." in out
    with pytest.raises(CreditBenchError, match="not in sweep embedded-control: grpo, s_trace"):
        reproduce.main([spec, "--labels", "dapo", *args])
    with pytest.raises(CreditBenchError, match="give them with --labels"):
        reproduce.main([spec, "--tuning", *args])
