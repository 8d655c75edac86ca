"""Credit-assignment methods, one module each. Importing this package registers them all."""

from methods import arca, dapo, dr_grpo, entropy_top, grpo, grpo_lambda, gspo, ibpo, p_trace, s_trace  # noqa: F401
