import threading

import pytest

from tasks.math_grader import MathGrader


@pytest.fixture(scope="module")
def grader():
    g = MathGrader()
    yield g
    g.close()


def test_right_wrong_and_malformed_answers(grader):
    completions = [
        "63-11=52,52+48=100,\\boxed{100}",  # right
        "\\boxed{101}",  # wrong
        "the answer is 100",  # no box: strict wrong, flexible right
        "\\boxed{100",  # unclosed box
        "",  # empty
        "}}}{{\\boxed{\\frac{",  # malformed LaTeX
        "\x00\xff" * 50,  # binary junk
        "\\boxed{\\frac{200}{2}}",  # equivalent expression
    ]
    out = grader(completions, ["100"] * len(completions))
    assert [o.correct for o in out] == [True, False, False, False, False, False, False, True]
    assert [o.reward for o in out] == [1.0, 0, 0, 0, 0, 0, 0, 1.0]
    assert out[2].correct_flexible is True
    assert out[0].parsed == "100"


def test_gold_is_first_argument_fractions_and_negatives(grader):
    out = grader(["\\boxed{0.5}", "\\boxed{-3}", "\\boxed{3}"], ["\\frac{1}{2}", "-3", "-3"])
    assert [o.correct for o in out] == [True, True, False]


def test_grading_from_a_worker_thread_does_not_break_on_signal_timeouts(grader):
    results = []
    t = threading.Thread(target=lambda: results.append(grader(["\\boxed{7}", "\\boxed{8}"], ["7", "7"])))
    t.start()
    t.join(60)
    assert [o.correct for o in results[0]] == [True, False]


def test_pathological_answer_is_wrong_not_a_crash(grader):
    out = grader(["\\boxed{" + "9" * 5000 + "}", "\\boxed{2^{2^{2^{2^{2^{2}}}}}}"], ["3", "3"])
    assert [o.correct for o in out] == [False, False]


def test_training_mode_skips_only_the_report_fields(grader):
    completions = ["\\boxed{100}", "the answer is 100", "\\boxed{7}"]
    full = grader(completions, ["100"] * 3)
    fast = grader(completions, ["100"] * 3, flexible=False)
    assert [o.reward for o in fast] == [o.reward for o in full] == [1.0, 0.0, 0.0]
    assert all(o.correct_flexible is None for o in fast) and full[1].correct_flexible is True
