"""Where the tests find the real benchmark files: $CREDITBENCH_DATA, else ../shared/data next to the
repository. Tests that need them are skipped, with the path in the reason, when they are absent."""

import os
from pathlib import Path

import pytest

DATA = Path(os.environ.get("CREDITBENCH_DATA") or Path(__file__).resolve().parents[2] / "shared" / "data")
needs_data = pytest.mark.skipif(not (DATA / "SOURCES.md").is_file(), reason=f"benchmark files not found at {DATA}")
