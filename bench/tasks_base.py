"""Re-exports the task contract, which lives in :mod:`bench.core` beside the method contract.

Task packages outside this repository import ``Task``, ``TaskConfig``, ``Outcome`` and the opt-in
to run model-written code from here; this module keeps that import path working. New code
imports from ``bench.core``.
"""

from bench.core import (
    CODE_EXECUTION_ENV,
    Outcome,
    Task,
    TaskConfig,
    code_execution_allowed,
    code_execution_refused,
)

__all__ = ["CODE_EXECUTION_ENV", "Outcome", "Task", "TaskConfig", "code_execution_allowed", "code_execution_refused"]
