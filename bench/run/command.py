"""``creditbench train ARGV`` in this process: the one way a run is started from arguments, shared by
the command line (bench/cli/train.py) and the sweep worker (bench/sweep/worker.py), so that both
accept and refuse the same arguments with the same message -- a bad value in a run YAML is named by
its file and line (tests/run/test_worker.py)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from bench.errors import CreditBenchError

if TYPE_CHECKING:
    from bench.config import RunConfig
    from bench.run.result import RunResult

Writer = Callable[["RunConfig"], "Callable[[RunResult], None] | None"]
"""What a run does with its result besides MLflow, chosen by its config (a sweep's run writes it to
the sweep's folder: :func:`bench.sweep.sweep.result_writer`)."""


def train_command(argv: list[str], writer: Writer | None = None) -> int:
    """Parse ``argv`` (``--config`` files, then flags), check the run (:func:`preflight`), run it and
    print its closing line; the exit status: 0, or 2 after one line ``creditbench: error: ...`` for a
    bad configuration or a refused run. ``--help`` prints every setting and exits."""
    from bench.distributed import rank
    from bench.run.args import from_files, run_config, spell
    from bench.run.resolve import preflight
    from bench.run.train import run, summary_line

    try:
        cfg = run_config(argv)
        try:
            checked = preflight(cfg)
        except CreditBenchError as e:  # a bad value in a run YAML: its file and line
            raise CreditBenchError(from_files(argv, str(e))) from None
        progress = "--no_progress" not in spell(argv)
        res = run(cfg, progress=progress, checked=checked, on_result=writer(cfg) if writer else None)
    except CreditBenchError as e:
        print(f"creditbench: error: {e}", file=sys.stderr)
        return 2
    if rank() > 0:  # the other processes of a multi-process run: rank 0 reports
        return 0
    print(summary_line(res))
    return 0
