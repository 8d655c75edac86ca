"""``python -m bench.cli``: the ``creditbench`` command."""

from bench.cli import main

raise SystemExit(main())
