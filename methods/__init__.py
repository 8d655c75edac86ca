"""Credit-assignment methods, one module each. Importing this package registers them all."""

from methods import arca, dapo, dr_grpo, entropy_top, grpo, gspo  # noqa: F401
