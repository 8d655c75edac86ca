"""Math grading: the one math-verify grader every math task uses (math_grader.py), the worker pools
that enforce its time limit by killing a worker (math_pool.py), and what a worker runs to grade one
item (math_verdict.py, started by path: no ``tasks`` package, bench or torch in the worker)."""
