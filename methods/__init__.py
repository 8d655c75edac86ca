"""Credit-assignment methods, one module each. Importing this package registers them all."""

from methods import (  # noqa: F401
    arca,
    dapo,
    delta,
    dr_grpo,
    entropy_top,
    fipo,
    gcpo,
    grpo,
    grpo_lambda,
    gspo,
    ibpo,
    p_trace,
    s_trace,
    vineppo,
)
