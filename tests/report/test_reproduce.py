"""The committed-results check: two reports are the same when everything but the wall times is."""

from bench.report.reproduce import differences


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
