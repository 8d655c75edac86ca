"""Rerunning committed results and comparing them: the rerun of a sweep's labels (rerun) and the statistical
check between two reports on different numerics (agreement)."""
