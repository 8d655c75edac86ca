"""``python -m bench.report.plots``."""

from bench.report.plots import main

main()
