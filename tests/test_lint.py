"""ruff's lint rules and formatting (configured in pyproject.toml, pinned in the test extra) hold for
the whole tree, so the style is checked wherever the tests run, not only in CI."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    "args", [["check", "--output-format", "concise"], ["format", "--check"]], ids=["lint", "format"]
)
def test_ruff(args):
    proc = subprocess.run(
        [sys.executable, "-m", "ruff", *args, "."], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, (
        f"ruff {' '.join(args)} (fix with: ruff check --fix . && ruff format .):\n"
        + (proc.stdout + proc.stderr)[-4000:]
    )
