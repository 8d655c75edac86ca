"""bench/requirements.lock pins the environment the committed results were made in (bench/bootstrap.sh
installs it with pip install --require-hashes --no-deps), so it has to stay a lock pip accepts in that
mode, leave torch to the bootstrap, and keep up with pyproject.toml: a dependency added there, or a
range moved past its pin, fails here until the lock is regenerated (creditbench lock)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import InvalidVersion, Version

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "bench" / "requirements.lock"
PIN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*==[^\s;=]+")
HASH = re.compile(r"--hash=sha256:[0-9a-f]{64}")


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirements() -> list[tuple[str, list[str]]]:
    """Each requirement of the lock as ``(name==version, [its options])``, continuation lines joined."""
    text = LOCK.read_text().replace("\\\n", " ")
    return [(line.split()[0], line.split()[1:]) for line in text.splitlines() if line.strip() and line[0] != "#"]


def pins() -> dict[str, str]:
    return {normalize(pin.partition("==")[0]): pin.partition("==")[2] for pin, _ in requirements()}


def test_every_line_pins_a_version_with_hashes():
    reqs = requirements()
    assert len(reqs) > 50, "the lock holds too few packages: was it generated from a working .venv?"
    bad = []
    for pin, options in reqs:
        if not PIN.fullmatch(pin):
            bad.append(f"{pin}: not name==version")
            continue
        try:
            Version(pin.partition("==")[2])
        except InvalidVersion:
            bad.append(f"{pin}: not a version")
        if not options or not all(HASH.fullmatch(o) for o in options):
            bad.append(f"{pin}: needs --hash=sha256:... options only, got {options}")
    assert not bad, "lines pip install --require-hashes would refuse:\n" + "\n".join(bad)
    names = [normalize(pin.partition("==")[0]) for pin, _ in reqs]
    assert len(names) == len(set(names)), f"packages pinned twice: {sorted({n for n in names if names.count(n) > 1})}"
    # bench/bootstrap.sh quotes this line when the lock does not install
    assert re.search(r"^# requires-python: >=\d", LOCK.read_text(), re.M)


def test_torch_and_the_project_are_left_out():
    """The bootstrap installs torch first (the CPU build) or keeps a GPU user's CUDA build; the lock
    must never replace it. creditbench itself is installed editable."""
    left_in = {"torch", "creditbench"} & set(pins())
    assert not left_in, f"the lock pins {sorted(left_in)}: creditbench lock leaves them out"


def test_pyproject_dependencies_are_locked_within_their_ranges():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    locked = pins()
    bad = []
    extras = project["optional-dependencies"]
    test = [s for s in extras["test"] if not s.startswith("creditbench[")]  # the extras it includes, below
    included = [e for s in extras["test"] if s.startswith("creditbench[") for e in Requirement(s).extras]
    for spec in [*project["dependencies"], *test, *(s for e in included for s in extras[e])]:
        req = Requirement(spec)
        name = normalize(req.name)
        if name == "torch":
            continue
        if name not in locked:
            bad.append(f"{spec}: not in the lock")
        elif not req.specifier.contains(locked[name], prereleases=True):
            bad.append(f"{spec}: the lock pins {locked[name]}")
    assert not bad, "regenerate the lock (creditbench lock) from a .venv that fits pyproject.toml:\n" + ("\n".join(bad))
