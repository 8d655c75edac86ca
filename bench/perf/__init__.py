"""Speed and memory benchmarks: step, methods, engines, verifier, TRL, scale, FSDP, LM head, op counts."""
