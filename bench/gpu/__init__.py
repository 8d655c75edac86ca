"""The GPU harness's Python: the plan of bench/perf/gpu_check.sh (checks) and where a benchmark's model runs
its forwards (placement)."""
