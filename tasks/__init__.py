"""Tasks: one module per task family (dataset loading, prompt, verifier). Importing this
package registers them all."""

from tasks import arithmetic, chain, code_benchmarks, decisive, items, math_benchmarks  # noqa: F401
