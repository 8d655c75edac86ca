"""Multi-process parity of the RL update: the module's real scoring and update of one fixed global
batch, each of 2 CPU processes (gloo) holding an unequal share of its groups, under DDP or FSDP2,
against one process on the whole batch; and short real runs in 2 processes. tests/engine/test_ddp.py
and tests/engine/test_fsdp.py launch it (so does bench.perf.fsdp, through bench/perf/workers/fsdp.py):

    python -m bench.engine.parity update OUT [--strategy ddp|fsdp] [--devices 1|2] [--cases CASE ...]
    python -m bench.engine.parity train OUT [--strategy ddp|fsdp] [--devices W] [--lora]

Lightning's launcher starts the other ranks by running the same command again, so the 2-process
runs are a command (``__main__``), not functions a test calls. The parts:

- ``batch``: the fixed global batch, its shares, the update cases and the LoRA policy;
- ``processes``: the Lightning trainer of W CPU processes, and the FSDP2 shard plan of the tiny policy;
- ``update``: the fixed-batch update of one case in W processes (W = 1: the single-process reference);
- ``train``: the short runs (DDP, and FSDP with or without LoRA).
"""
