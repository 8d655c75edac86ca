"""Benchmark scripts and tools: step, methods, engines, verifier, TRL, scale, gold check, UI screenshots."""
