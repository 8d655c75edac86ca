"""Credit-assignment methods, one module each. Importing this package registers them all."""

from methods import arca, dr_grpo, grpo, gspo  # noqa: F401
