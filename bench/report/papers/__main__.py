"""``python -m bench.report.papers``."""

from bench.report.papers import main

raise SystemExit(main())
