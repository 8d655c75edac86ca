"""Scripts the benchmarks start as processes of their own (Lightning's launcher starts a
multi-process run's other ranks by running the same script again): the DDP and FSDP parity runs
(ddp.py, fsdp.py: bench.engine.parity's command under one strategy) and the flagship run
(flagship_run.py)."""
