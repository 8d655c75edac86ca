"""Scripts the benchmarks and the engine tests start as processes of their own (Lightning's launcher
starts a multi-process run's other ranks by running the same script again): the DDP worker (ddp.py)
and the FSDP worker (fsdp.py)."""
