import json
import os
import pickle
import signal
import threading
import time

import pytest
from shared_data import DATA, needs_data

from bench.errors import CreditBenchError
from tasks.grading import math_pool
from tasks.grading.math_grader import MathGrader, grade_one, shutdown_pools
from tasks.grading.math_verdict import MAX_CHARS
from tasks.math_benchmarks import gsm8k_answer


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


def test_gold_with_an_escaped_dollar_is_boxed_not_taken_for_math(grader):
    completions = ["The final answer is \\boxed{\\$40}.", "\\boxed{40}", "\\boxed{41}"]
    out = grader(completions, ["\\$40"] * 3)
    assert [o.correct for o in out] == [True, True, False] and out[0].error is None


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


# GSM8K test rows whose working ends on a number other than the answer (33.333...%, $4.00 + $2.00,
# 3 * 5 points, 28 days / 7), which the lenient last-number fallback took over the "#### N" line
GSM8K_WORKING_DECOYS = {226: "33.333", 258: "4", 876: "5", 1303: "28"}


@needs_data
def test_flexible_verdict_reads_the_gsm8k_answer_marker(grader):
    """Each reference solution grades right (flexible) against its own ``####`` answer and wrong
    against the decoy the fallback used to take from its working. The strict reward, which reads
    only ``\\boxed{}``, grades them all wrong, with the marker or without."""
    rows = (DATA / "gsm8k" / "test.jsonl").read_text().splitlines()
    texts = [json.loads(rows[i])["answer"] for i in GSM8K_WORKING_DECOYS]
    gold = [gsm8k_answer(t) for t in texts]
    assert gold == ["33", "6", "41", "4"]
    right = grader(texts, gold)
    decoy = grader(texts, list(GSM8K_WORKING_DECOYS.values()))
    assert [o.correct_flexible for o in right] == [True] * 4
    assert [o.correct_flexible for o in decoy] == [False] * 4
    assert not any(o.correct for o in right + decoy)


def test_flexible_verdict_falls_back_only_without_a_marker(grader):
    completions = ["So she pays 4 + 2 = 6 dollars.\n#### 6", "So she pays 4 + 2 = 6 dollars.\n#### six", "It is 6."]
    out = grader(completions, ["6"] * 3)
    assert [o.correct_flexible for o in out] == [True, False, True]


# ------------------------------------------------------------- safety: guards, pool, threads
TIMEOUT = 2
BOUND = 3 * TIMEOUT + 5  # seconds; generous, the CPUs may be shared


def pathological() -> list[tuple[str, str]]:
    """(completion, gold) pairs that must all be graded wrong, fast."""
    return [
        ("\\boxed{9^{9^{9^{9}}}}", "3"),
        ("\\boxed{10^{10^{10^{10}}}}", "3"),
        ("\\boxed{2^{2^{2^{2^{2^{2}}}}}}", "3"),
        ("\\boxed{100000!}", "3"),
        ("\\boxed{10000000!}", "3"),  # not guarded: left to the signal timeout
        ("\\boxed{" + "\\frac{" * 10_000 + "1" + "}{2}" * 10_000 + "}", "3"),
        ("{" * 100_000, "3"),
        ("\\boxed{" + "(" * 10_000 + "1}", "3"),
        ("7" * 5_000_000, "7"),
        ("\\boxed{1}" * 555_556, "2"),  # 5 MB
        ("\x00\udcff\ud800 \\boxed{\x00}", "3"),
        ("\x00\xff" * 50, "3"),
    ]


def assert_recovered(grader):
    out = grader(["so \\boxed{\\frac{3}{4}}", "\\boxed{5}"], ["0.75", "4"])
    assert [o.correct for o in out] == [True, False]


@pytest.fixture(scope="module")
def fast():
    return MathGrader(timeout=TIMEOUT)


def test_guards_grade_pathological_input_wrong_without_parsing():
    g = MathGrader(timeout=TIMEOUT, workers=0)
    cases = {
        "\\boxed{" + "\\frac{" * 60 + "1" + "}" * 60 + "}": "too deeply nested",
        "{" * 100_000: "too deeply nested",
        "\\boxed{" + "(" * 51 + "1" + ")" * 51 + "}": "too deeply nested",
        "9" * 5_000_000: "number too long",
        "\\boxed{9^{9^{9}}}": "number too large",
        "\\boxed{10^{-10^{9}}}": "number too large",
        "\\boxed{2^{99999999999999999999999}}": "number too large",
    }
    t0 = time.monotonic()
    out = g(list(cases), ["3"] * len(cases))
    assert time.monotonic() - t0 < TIMEOUT  # no math-verify step ran, so none could time out
    assert [o.error for o in out] == list(cases.values())
    assert not any(o.correct or o.correct_flexible for o in out)
    assert all(o.parsed is None for o in out)
    # Ordinary nesting, long numbers and powers still grade, and only the last MAX_CHARS count.
    nested = "\\frac{1}{" * 20 + "2" + "}" * 20
    ok = MathGrader(workers=0)(
        [
            "\\boxed{" + nested + "}",
            "\\boxed{2^{2^{2^{2}}}}",
            "\\boxed{2^{100}}",
            "x" * 100_000 + " \\boxed{12}",
            "\\boxed{12}" + "x" * MAX_CHARS,
            "\ud800 \\boxed{3\x00}",
        ],
        [nested, "65536", str(2**100), "12", "12", "3"],
    )
    assert [o.correct for o in ok] == [True, True, True, True, False, True]
    # Gold answers go through the same guards and parse.
    bad_gold = g(["\\boxed{3}", "\\boxed{3}"], ["{" * 60, ""])
    assert [o.error for o in bad_gold] == ["gold: too deeply nested", "gold did not parse"]


@pytest.mark.parametrize("mode", ["pool", "inline", "thread"])
def test_pathological_answers_are_wrong_within_the_time_bound(mode, fast):
    g = MathGrader(timeout=TIMEOUT, workers=0) if mode == "inline" else fast
    pairs = pathological()
    completions, golds = [c for c, _ in pairs], [a for _, a in pairs]
    results, t0 = [], time.monotonic()
    if mode == "thread":
        t = threading.Thread(target=lambda: results.append(g(completions, golds)))
        t.start()
        t.join(120)
        out = results[0]
    else:
        out = g(completions, golds)
    assert time.monotonic() - t0 < BOUND
    assert not any(o.correct or o.correct_flexible for o in out)
    assert all(o.reward == 0.0 for o in out)
    assert out[4].error == "timeout"  # 10000000! is interrupted by the signal timeout
    assert_recovered(g)


def test_pathological_answers_one_call_each_through_the_pool(fast):
    for completion, gold in pathological():
        t0 = time.monotonic()
        [o] = fast([completion], [gold], flexible=False)
        assert time.monotonic() - t0 < BOUND and not o.correct and o.correct_flexible is None
    assert_recovered(fast)


def test_a_worker_past_its_deadline_is_killed_and_replaced():
    g = MathGrader(timeout=1, workers=2)
    assert_recovered(g)
    pool = math_pool.shared_pool(2)
    before, replaced = pool.pids, pool.replaced
    for pid in before:  # a worker stuck where no signal reaches, as in a C-level hang
        os.kill(pid, signal.SIGSTOP)
    t0 = time.monotonic()
    out = g([f"\\boxed{{{i}}}" for i in range(6)], [str(i) for i in range(6)])
    assert time.monotonic() - t0 < math_pool.deadline_seconds(1) + 30
    assert [o.error for o in out] == ["timeout", "timeout", None, None, None, None]
    assert [o.correct for o in out] == [False, False, True, True, True, True]
    assert out[0].correct_flexible is False and out[0].parsed is None
    assert pool.replaced == replaced + 2 and not set(pool.pids) & set(before)
    for pid in before:
        assert not os.path.exists(f"/proc/{pid}")
    assert_recovered(g)


def test_a_worker_killed_from_outside_is_replaced(fast):
    assert_recovered(fast)
    pool = math_pool.shared_pool(fast.pool_size())
    victim = pool.pids[0]
    os.kill(victim, signal.SIGKILL)
    out = fast([f"\\boxed{{{i}}}" for i in range(20)], [str(i % 10) for i in range(20)])
    assert [o.correct for o in out] == [i < 10 for i in range(20)]
    assert victim not in pool.pids and len(pool.pids) == pool.size


def test_an_item_under_which_two_workers_die_is_graded_worker_died(fast):
    assert_recovered(fast)
    pool = math_pool.shared_pool(fast.pool_size())
    kills, done = [], threading.Event()

    def killer():  # SIGKILL whichever worker is grading item 0, twice
        while len(kills) < 2 and not done.is_set():
            for w in list(pool.workers):
                chunk, pos = w.chunk, w.pos  # read while the grading thread updates them
                busy_with_0 = chunk and pos < len(chunk) and chunk[pos] == 0
                if w.ready and busy_with_0 and w.pid not in kills:
                    time.sleep(0.2)
                    kills.append(w.pid)
                    os.kill(w.pid, signal.SIGKILL)
            time.sleep(0.02)

    t = threading.Thread(target=killer)
    t.start()
    try:
        out = MathGrader(timeout=3)(["\\boxed{10000000!}", "\\boxed{1}"], ["3", "1"])
    finally:
        done.set()
        t.join(10)
    assert len(kills) == 2
    assert (out[0].correct, out[0].error) == (False, "worker died") and out[1].correct
    assert_recovered(fast)


def mixed_batch(n: int, offset: int = 0) -> tuple[list[str], list[str], list[bool]]:
    completions, golds, expected = [], [], []
    for i in range(n):
        v = i + offset
        kind = i % 5
        if kind == 0:
            completions.append(f"So \\boxed{{{v}}}.")
        elif kind == 1:
            completions.append(f"\\boxed{{\\frac{{{2 * v}}}{{2}}}}")
        elif kind == 2:
            completions.append(f"\\boxed{{{v + 1}}}")
        elif kind == 3:
            completions.append(f"the answer is {v}")  # no box: strict wrong
        else:
            completions.append("{" * 80 + f"\\boxed{{{v}}}")  # guarded
        golds.append(str(v))
        expected.append(kind in (0, 1))
    return completions, golds, expected


def test_batch_results_keep_input_order(fast):
    completions, golds, expected = mixed_batch(50)
    out = fast(completions, golds)
    assert [o.correct for o in out] == expected
    assert [o.parsed for o in out[0::5]] == [str(i) for i in range(0, 50, 5)]
    assert [o.correct_flexible for o in out[3::5]] == [True] * 10


def test_two_threads_grading_at_once_get_their_own_results(fast):
    batches = [mixed_batch(40, offset=0), mixed_batch(40, offset=1000)]
    results: dict[int, list] = {0: [], 1: []}
    barrier = threading.Barrier(2)

    def run(k):
        completions, golds, _ = batches[k]
        barrier.wait()
        for _ in range(3):
            results[k].append(fast(completions, golds))

    threads = [threading.Thread(target=run, args=(k,)) for k in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    for k in (0, 1):
        completions, golds, expected = batches[k]
        assert len(results[k]) == 3
        for out in results[k]:
            assert [o.correct for o in out] == expected
            assert [o.parsed for o in out[0::5]] == [str(int(g)) for g in golds[0::5]]


def test_inline_mode_and_grade_one_from_any_thread():
    inline = MathGrader(timeout=TIMEOUT, workers=0)
    assert inline.pool_size() == 0
    assert [o.correct for o in inline(["\\boxed{4}", "\\boxed{5}"], ["4", "4"])] == [True, False]
    assert grade_one("\\boxed{4}", "4").correct
    seen = []

    def work():
        seen.append(inline.pool_size())
        seen.append([o.correct for o in inline(["\\boxed{4}", "\\boxed{5}"], ["4", "4"])])
        seen.append(grade_one("\\boxed{4}", "4", flexible=False))

    t = threading.Thread(target=work)
    t.start()
    t.join(120)
    assert seen[0] == 1 and seen[1] == [True, False]
    assert seen[2].correct and seen[2].correct_flexible is None


def test_grader_is_picklable_and_close_leaves_the_shared_pool(fast):
    assert_recovered(fast)
    copy = pickle.loads(pickle.dumps(fast))
    assert (copy.timeout, copy.workers) == (fast.timeout, fast.workers)
    pool = math_pool.shared_pool(fast.pool_size())
    copy.close()
    assert_recovered(copy)
    assert math_pool.shared_pool(fast.pool_size()) is pool
    assert MathGrader().pool_size() == min(2, os.cpu_count())
    with pytest.raises(CreditBenchError):
        MathGrader(workers=-1)
    with pytest.raises(CreditBenchError):
        MathGrader(timeout=0)


def test_shutdown_pools_ends_every_worker_process(fast):
    assert_recovered(fast)
    assert_recovered(MathGrader(timeout=TIMEOUT, workers=1))
    pids = [pid for pool in list(math_pool._POOLS.values()) for pid in pool.pids]
    assert len(pids) >= 3
    shutdown_pools()
    assert not math_pool._POOLS
    for pid in pids:
        assert not os.path.exists(f"/proc/{pid}")
    assert_recovered(fast)  # a fresh pool starts on next use
