"""The DDP parity run (bench.engine.parity under DDP on gloo, CPU) as a script of its own; Lightning's
launcher starts the other ranks by running this script again with the same arguments.

    python bench/perf/workers/ddp.py update OUT [--devices 1|2] [--cases CASE ...]
    python bench/perf/workers/ddp.py train OUT [--devices W]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # run as a script: the repository root

from bench.engine.parity.__main__ import main  # noqa: E402

if __name__ == "__main__":
    main([*sys.argv[1:], "--strategy", "ddp"])
