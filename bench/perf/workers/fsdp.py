"""The FSDP2 parity run (bench.engine.parity in 2 CPU processes under Lightning's ModelParallelStrategy
on gloo, each decoder layer one fully_shard unit) as a script of its own, for bench.perf.fsdp;
Lightning's launcher starts the other rank by running this script again with the same arguments.

    python bench/perf/workers/fsdp.py update OUT [--cases CASE ...]
        Every case of bench.engine.parity.batch.CASES and the LoRA case unless --cases names some,
        fused and in micro-batches (3 on one process, 6 on the other); rank 0 saves the statistics
        and the whole gradients (gathered from the shards) the update left.

    python bench/perf/workers/fsdp.py train OUT [--lora]
        A short real run; rank 0 saves what the processes ended with, and the saved policy.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # run as a script: the repository root

from bench.engine.parity.__main__ import main  # noqa: E402

if __name__ == "__main__":
    main([*sys.argv[1:], "--strategy", "fsdp"])
