"""Write bench/requirements.lock, the exact environment the committed results were made in: every
package a working ``.venv`` has (``pip freeze``) as ``name==version`` with the sha256 of every file
PyPI has for that version (all wheels, all platforms, and the sdist), so that
``pip install --require-hashes`` gives any machine the same versions and refuses any other file.

    creditbench lock [--venv .venv] [--out bench/requirements.lock]

Why: pyproject.toml's dependencies are open ranges, so a fresh install gets whatever is newest, and
the numbers move with the versions of the libraries that compute them (bench.environment.fingerprint).
bench/bootstrap.sh installs from the lock whenever the extras are the default ``test``.

torch is deliberately left out: the bootstrap installs the CPU build first, and a GPU user keeps
their own CUDA build. So is creditbench itself (installed editable, without dependencies).

When to rerun: after a change to pyproject.toml's dependencies (test_lock checks that the lock
still satisfies them), or to move to newer libraries on purpose: upgrade them in ``.venv``, rerun
the benchmark, and commit the new lock with the new results. A package that is not on PyPI (only on
a local index configured for pip, a ``file://`` index or find-links folder) gets the hashes of its
local files, which no other machine has; the lock says which.

Standard library only: it runs before anything is installed, with any python3.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PYPI = "https://pypi.org/simple"
LEFT_OUT = {"torch", "creditbench"}
"""torch: the bootstrap installs it first (CPU build) or keeps the user's CUDA build; creditbench: the
project itself."""
SUFFIXES = (".whl", ".tar.gz", ".zip", ".tar.bz2", ".tgz")


def normalize(name: str) -> str:
    """A distribution name as indexes spell it (PEP 503): lower case, runs of ``-_.`` as one dash."""
    return re.sub(r"[-_.]+", "-", name).lower()


def split_filename(filename: str) -> tuple[str, str] | None:
    """The name and version in a wheel's or sdist's file name (None for any other kind of file):
    ``name-version(-build)?-python-abi-platform.whl``, ``name-version.tar.gz`` (an sdist's name may hold
    dashes, a normalized version never does)."""
    if filename.endswith(".whl"):
        parts = filename[: -len(".whl")].split("-")
        return (normalize(parts[0]), parts[1]) if len(parts) in (5, 6) else None
    for suffix in SUFFIXES[1:]:
        if filename.endswith(suffix) and "-" in filename:
            name, _, version = filename[: -len(suffix)].rpartition("-")
            return normalize(name), version
    return None


def same_version(a: str, b: str) -> bool:
    """Equal up to how file names spell a version (case, a leading v, ``_`` for ``-`` or ``.``)."""

    def key(v: str) -> str:
        return re.sub(r"[-_]", ".", v.lower().removeprefix("v"))

    return key(a) == key(b)


def frozen(venv: Path) -> list[tuple[str, str]]:
    """``(name, version)`` of every package ``pip freeze`` lists in ``venv`` but those left out; a local
    version (``+cpu``) is kept, since pip pins it so."""
    out = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "freeze"], capture_output=True, text=True, check=True
    ).stdout
    pins = []
    for line in out.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", "-e ")):  # comments, and editable installs (creditbench)
            continue
        name, sep, version = line.partition("==")
        if not sep:
            raise SystemExit(f"cannot lock {line!r} (not installed from an index): install it by version first")
        if normalize(name) not in LEFT_OUT:
            pins.append((normalize(name), version.strip()))
    return sorted(pins)


def _get(url: str, accept: str) -> bytes:
    request = urllib.request.Request(url, headers={"Accept": accept, "User-Agent": "creditbench-lock"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return response.read()


def _is(split: tuple[str, str] | None, name: str, version: str) -> bool:
    return split is not None and split[0] == name and same_version(split[1], version)


def pypi_files(name: str, version: str) -> list[dict] | None:
    """PyPI's entries (file name, hashes, requires-python) of every file of ``name==version`` (None:
    PyPI has no such project or version), from its JSON simple API (PEP 691)."""
    try:
        body = _get(f"{PYPI}/{name}/", "application/vnd.pypi.simple.v1+json")
    except urllib.error.HTTPError as e:
        if e.code == 404:
            return None
        raise
    files = [f for f in json.loads(body)["files"] if _is(split_filename(f["filename"]), name, version)]
    return files or None


def lowest_python(files: list[dict]) -> tuple[int, ...]:
    """The oldest Python any of ``files`` declares it supports (the ``>=`` bound of its requires-python;
    () where none is declared)."""
    bounds = [re.search(r">=\s*(\d+(?:\.\d+)*)", f.get("requires-python") or "") for f in files]
    versions = [tuple(int(x) for x in re.sub(r"(\.0)+$", "", m[1]).split(".")) for m in bounds if m]  # 3.11.0: 3.11
    return min(versions) if len(versions) == len(files) else ()


def local_sources(venv: Path) -> list[Path]:
    """The local folders pip is configured to install from: ``file://`` indexes (extra-index-url,
    index-url) and find-links folders, from pip's configuration files and the PIP_* environment."""
    config = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "config", "list"], capture_output=True, text=True
    ).stdout
    values = [v.strip("'\"") for k, _, v in (line.partition("=") for line in config.splitlines()) if v]
    values += [os.environ.get(k, "") for k in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS")]
    folders = []
    for value in values:
        for item in value.split():
            path = Path(urllib.parse.urlparse(item).path if item.startswith("file:") else item)
            if path.is_absolute() and path.is_dir() and path not in folders:
                folders.append(path)
    return folders


def local_files(name: str, version: str, folders: list[Path]) -> list[Path]:
    """The files of ``name==version`` in local folders: a PEP 503 index (``<folder>/<name>/index.html``
    linking its files) or a flat find-links folder."""
    found = []
    for folder in folders:
        page = folder / name / "index.html"
        if page.is_file():
            links = re.findall(r'href="([^"#]+)', page.read_text())
            candidates = [(page.parent / urllib.parse.unquote(link)).resolve() for link in links]
        else:
            candidates = [p for p in folder.iterdir() if p.is_file()]
        found += [p for p in candidates if p.is_file() and _is(split_filename(p.name), name, version)]
    return found


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def lock(venv: Path) -> tuple[list[str], list[str], str]:
    """The lock's entries (one per package, with its hash lines), the packages hashed from local files,
    and the oldest Python every pin supports (the highest requires-python bound); fails when a package is
    neither on PyPI nor in a local folder."""
    pins = frozen(venv)
    with ThreadPoolExecutor(8) as pool:
        remote = list(pool.map(lambda pin: pypi_files(*pin), pins))
    folders, entries, local, missing, python = None, [], [], [], ()
    for (name, version), files in zip(pins, remote):
        note = ""
        if files is None:
            folders = local_sources(venv) if folders is None else folders
            paths = local_files(name, version, folders)
            if not paths:
                missing.append(f"{name}=={version}")
                continue
            hashes = sorted({sha256(p) for p in paths})
            local.append(f"{name}=={version}")
            note = f"# {name}=={version} is not on PyPI: the hashes of {', '.join(sorted({str(p) for p in paths}))}\n"
        else:
            hashes = sorted({f["hashes"]["sha256"] for f in files})
            python = max(python, lowest_python(files))
        lines = [f"{name}=={version}", *(f"    --hash=sha256:{h}" for h in hashes)]
        entries.append(note + " \\\n".join(lines))
    if missing:
        raise SystemExit(f"neither on PyPI nor in a local index ({folders}): {', '.join(missing)}")
    return entries, local, ".".join(map(str, python))


def header(venv: Path, python: str) -> str:
    here = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import platform; print(platform.python_version(), platform.machine())"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return (
        "# The exact versions of creditbench's dependencies (the default 'test' extra included), with the sha256\n"
        "# of every file PyPI has for each version. Generated by `creditbench lock` from `pip freeze`\n"
        f"# of a working .venv (Python {here[0]}, {sys.platform} {here[1]}); rerun it, do not edit by hand.\n"
        "# bench/bootstrap.sh installs it with pip install --require-hashes --no-deps (CREDITBENCH_LOCK=0: the\n"
        "# open ranges of pyproject.toml instead).\n"
        "# torch is deliberately left out: the bootstrap installs its CPU build first, and a GPU user keeps\n"
        "# their own CUDA build. creditbench itself is installed editable, without dependencies.\n"
        "# The oldest Python every pinned version supports (the highest requires-python bound among them):\n"
        f"# requires-python: >={python or '?'}\n"
    )
