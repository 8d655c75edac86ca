"""Tasks: one module per task family (dataset loading, prompt, verifier). Importing this
package registers them all."""

from tasks import arithmetic, code_benchmarks, math_benchmarks  # noqa: F401
