"""Benchmark: how soon a running run's step metrics can be read from MLflow, and what logging them live costs.

    python -m bench.perf.live_metrics [--steps 12] [--checkpoint-every 4] [--poll 0.1] [--threads 2]
                                      [--out results/benchmarks]

One run (tiny-500k from its cached warm-started base on the default arithmetic task, built first if
the cache lacks it; ``--steps`` RL steps of 4 prompts x 4 samples; a checkpoint every
``--checkpoint-every`` steps; evaluations at step 0 and at the end) trains in this process into a
scratch SQLite store, while a
second thread reads the store every ``--poll`` seconds through its own client, as the UI does. For
each RL step: when ``train/reward`` was measured (the timestamp it was logged with), when the reader
first saw it, and the difference (it includes up to one poll interval of the reader's own waiting).
Beside it, what holding metrics back until the checkpoint of their step (the earlier design) would
have given: a step became visible when the next checkpoint at or after it was written, measured here
as the logged timestamp of that checkpoint's step (the checkpoint's own write time is left out, so
this understates the old delay). The time the run spends in logging (``MetricSink.log`` and
``.table``, every call timed) is reported against its training-step time.
"""

from __future__ import annotations

import math
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.script import machine, machine_line, md_table, run_script, script_parser, write_outputs


def timed_sink(spent: list[tuple[str, float]]) -> None:
    """Add (method, wall time) of every MetricSink.log / .table call to ``spent``."""
    from bench.engine.checkpoint import MetricSink

    for name in ("log", "table"):
        original = getattr(MetricSink, name)

        def wrapper(self, *args, _original=original, **kwargs):
            t = time.perf_counter()
            try:
                return _original(self, *args, **kwargs)
            finally:
                spent.append((_original.__name__, time.perf_counter() - t))

        setattr(MetricSink, name, wrapper)


def measure(steps: int, every: int, poll: float, threads: int, scratch: Path) -> dict[str, Any]:
    from mlflow.tracking import MlflowClient

    from bench.config import (
        CheckpointConfig,
        EvalConfig,
        ModelConfig,
        RLConfig,
        RunConfig,
        SamplingConfig,
        TaskSpec,
        TrackingConfig,
    )
    from bench.run.train import run

    uri = f"sqlite:///{scratch / 'mlflow.db'}"
    short = SamplingConfig(max_new_tokens=16)
    cfg = RunConfig(
        model=ModelConfig(name="tiny-500k"),
        task=TaskSpec(),
        rl=RLConfig(steps=steps, prompts_per_step=4, group_size=4, sampling=short),
        eval=EvalConfig(every=steps, n=2, k=[1, 2], num_problems=16, sampling=short),
        checkpoint=CheckpointConfig(every=every, dir=str(scratch / "ckpt")),
        tracking=TrackingConfig(uri=uri),  # the default cache of warm-started bases
        threads=threads,
    )
    client, seen, done, spent = MlflowClient(uri), {}, threading.Event(), []

    def reader() -> None:
        while not done.is_set():
            for exp in client.search_experiments():
                for r in client.search_runs([exp.experiment_id], "tags.kind = 'rl'"):
                    for m in client.get_metric_history(r.info.run_id, "train/reward"):
                        seen.setdefault(m.step, time.time())
            done.wait(poll)

    timed_sink(spent)
    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    started = time.time()
    try:
        res = run(cfg, progress=False)
    finally:
        ended = time.time()
        done.set()
        thread.join()
    history = {m.step: m.timestamp / 1000 for m in client.get_metric_history(res["mlflow_run_id"], "train/reward")}
    step_s = [m.value for m in client.get_metric_history(res["mlflow_run_id"], "time/step_s")]
    rows = []
    for step in sorted(history):
        held = history.get(min(math.ceil(step / every) * every, steps))  # the checkpoint (or last) step's time
        rows.append(
            {
                "step": step,
                "measured_s": round(history[step] - started, 2),
                "seen_s": round(seen[step] - started, 2) if step in seen else None,
                "delay_s": round(seen[step] - history[step], 3) if step in seen else None,
                "held_back_delay_s": round(held - history[step], 2) if held is not None else None,
            }
        )
    delays = [r["delay_s"] for r in rows if r["delay_s"] is not None]
    return {
        "steps": steps,
        "checkpoint_every": every,
        "poll_s": poll,
        "run_wall_s": round(ended - started, 1),
        "seen_before_end": sum(1 for s, t in seen.items() if t < ended),
        "delay_median_s": round(statistics.median(delays), 3),
        "delay_max_s": round(max(delays), 3),
        "held_back_delay_median_s": round(statistics.median(r["held_back_delay_s"] for r in rows), 2),
        "logging_s": round(sum(s for _, s in spent), 3),
        "logging_calls": len(spent),
        "logging_max_s": {k: round(max(s for n, s in spent if n == k), 3) for k in ("log", "table")},
        "train_step_s": round(sum(step_s), 3),
        "rows": rows,
    }


def markdown(r: dict[str, Any], m: dict[str, Any]) -> str:
    lines = [
        "# Live metrics: how soon a running run's steps are in MLflow",
        "",
        f"Machine: {machine_line(m, 'mlflow')}. Made by `python -m bench.perf.live_metrics` (see its docstring).",
        "",
        f"One run of {r['steps']} RL steps (tiny-500k, arithmetic, 4 prompts x 4 samples), a checkpoint every "
        f"{r['checkpoint_every']} steps, the store read every {r['poll_s']} s by a second thread. Times are "
        "seconds from the run's start; delay = seen - measured (it includes the reader's polling).",
        "",
        *md_table(
            "step | measured | seen by the reader | delay | held until its checkpoint (earlier design)",
            [(x["step"], x["measured_s"], x["seen_s"], x["delay_s"], x["held_back_delay_s"]) for x in r["rows"]],
            "rrrrr",
        ),
        "",
        f"- {r['seen_before_end']} of {r['steps']} steps were read from the store before the run ended "
        f"(it took {r['run_wall_s']} s, evaluations and set-up included).",
        f"- Delay from measurement to a reader: median {r['delay_median_s']} s, at most {r['delay_max_s']} s; "
        f"held back until the checkpoint it would have been a median {r['held_back_delay_median_s']} s "
        "(without the checkpoint's write time).",
        f"- Logging cost: {r['logging_calls']} calls took {r['logging_s']} s in all (the slowest metrics call "
        f"{r['logging_max_s']['log']} s, table {r['logging_max_s']['table']} s), against {r['train_step_s']} s "
        "of training steps.",
    ]
    return "\n".join(lines)


def main() -> int:
    ap = script_parser(__doc__, "python -m bench.perf.live_metrics")
    ap.add_argument("--steps", type=int, default=12, help="RL steps of the run")
    ap.add_argument("--checkpoint-every", type=int, default=4, help="checkpoint every this many steps")
    ap.add_argument("--poll", type=float, default=0.1, help="seconds between the reader's reads of the store")
    ap.add_argument("--threads", type=int, default=2, help="torch threads of the run")
    ap.add_argument("--out", default="results/benchmarks", help="where live_metrics.md and .json go")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="creditbench-live-") as scratch:
        r = measure(a.steps, a.checkpoint_every, a.poll, a.threads, Path(scratch))
    m = machine(a.threads, packages=("mlflow",))
    md, js = write_outputs(a.out, "live_metrics", markdown(r, m), {"machine": m, **r})
    print(md.read_text())
    return 0


if __name__ == "__main__":
    run_script(main, "python -m bench.perf.live_metrics")
