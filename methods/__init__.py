"""Credit-assignment methods, one module each. Importing this package registers them all."""

from methods import grpo  # noqa: F401
