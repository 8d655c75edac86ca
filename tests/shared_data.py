"""Where the tests find the real benchmark files: $CREDITBENCH_DATA, else shared/data beside the
repository (``../shared/data``), else beside the repository this one was cloned from (a fresh
clone elsewhere of a checkout that sits next to shared/). Tests that need the files are skipped,
with the paths tried in the reason, only when none of these holds them."""

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _candidates() -> list[Path]:
    found = [Path(os.environ["CREDITBENCH_DATA"])] if os.environ.get("CREDITBENCH_DATA") else []
    found.append(ROOT.parent / "shared" / "data")
    try:
        origin = subprocess.run(
            ["git", "config", "--get", "remote.origin.url"], cwd=ROOT, capture_output=True, text=True, timeout=5
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        origin = ""
    if origin and "://" not in origin and Path(origin).is_dir():  # a clone of a local checkout
        found.append(Path(origin).resolve().parent / "shared" / "data")
    return found


CANDIDATES = _candidates()
DATA = next((p for p in CANDIDATES if (p / "SOURCES.md").is_file()), CANDIDATES[0])
needs_data = pytest.mark.skipif(
    not (DATA / "SOURCES.md").is_file(), reason=f"benchmark files not found at {', '.join(map(str, CANDIDATES))}"
)
