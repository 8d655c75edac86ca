"""Pinned base checkpoints: the warm-started tiny bases of the committed results, shipped in
``results/bases/<task>/<size>-<key>/`` with their weights' sha256 in ``results/bases/bases.json``.

A warm-start is deterministic on one machine, but its floats, and so where a sharp learning
transition falls, move with the CPU's code paths and library versions. The committed results start
from these exact weights on every machine: a run installs the pinned copy into its cache instead of
warm-starting, and checks the weights against the pin each time it loads them. A recipe change
(bench.bases.warmstart.RECIPE_VERSION, a task's version or options, the warm-start settings) gives a
new cache key with no pin: the base is warm-started, and ``creditbench bases pin`` (or ``build --pin``)
copies it here and records its digest, to be committed with the results it produced."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from bench.errors import CreditBenchError

PINNED = Path(__file__).resolve().parents[2] / "results" / "bases"
MANIFEST = "bases.json"
WEIGHTS = "model.safetensors"


def weights_sha256(folder: Path) -> str:
    """The sha256 of a checkpoint's tensors (name, dtype, shape and bytes, in name order): the
    content, whatever the file's metadata or the library that wrote it."""
    import torch
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    path = folder / WEIGHTS
    if not path.is_file():
        raise CreditBenchError(f"base checkpoint {folder} has no {WEIGHTS}; delete the folder to rebuild it")
    try:
        tensors = load_file(path)
    except SafetensorError as e:
        raise CreditBenchError(
            f"base checkpoint {folder}: {WEIGHTS} is damaged ({str(e).splitlines()[0]}); delete the folder "
            f"(rm -r {folder}) and the next run installs or rebuilds it"
        ) from None
    h = hashlib.sha256()
    for name, t in sorted(tensors.items()):
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.contiguous().view(-1).view(dtype=torch.uint8).numpy().tobytes())
    return h.hexdigest()


def key_of(out: Path) -> str:
    """A base's key: ``<task>/<size>-<cache digest>``, its path under a cache's base/ folder."""
    return f"{out.parent.name}/{out.name}"


def pins(root: Path = PINNED) -> dict[str, dict]:
    path = root / MANIFEST
    return json.loads(path.read_text()) if path.is_file() else {}


def verify(out: Path, root: Path = PINNED) -> str:
    """The weights digest of the base at ``out``; a one-line error when a pin for its key exists
    and the weights differ from it."""
    digest = weights_sha256(out)
    pin = pins(root).get(key_of(out))
    if pin and pin["weights_sha256"] != digest:
        raise CreditBenchError(
            f"base checkpoint {out} differs from its pin (weights sha256 {digest[:16]}, pinned "
            f"{pin['weights_sha256'][:16]} in {root / MANIFEST}); delete it (rm -r {out}) and the next run installs "
            "the pinned copy"
        )
    return digest


def install(out: Path, root: Path = PINNED) -> bool:
    """Copy the pinned base for ``out``'s key into the cache at ``out`` (through a temporary folder,
    checked before it is renamed into place); False when there is no pinned copy."""
    src = root / key_of(out)
    if key_of(out) not in pins(root) or not (src / "warmstart.json").is_file():
        return False
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(src, tmp)
    digest = weights_sha256(tmp)
    want = pins(root)[key_of(out)]["weights_sha256"]
    if digest != want:
        shutil.rmtree(tmp, ignore_errors=True)
        raise CreditBenchError(
            f"the pinned base {src} does not match its own pin (sha256 {digest[:16]} != {want[:16]}): the checkout "
            "is damaged; restore it with git checkout results/bases"
        )
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return True


def pin(out: Path, root: Path = PINNED) -> dict:
    """Copy a built base into the pinned store and record its digest (what ``pin`` on the command line does)."""
    if not (out / "warmstart.json").is_file():
        raise CreditBenchError(
            f"{out} is not a built base checkpoint (no warmstart.json); give a folder "
            "<cache>/base/<task>/<size>-<key> that a warm-start wrote (creditbench bases build TASK)"
        )
    info = json.loads((out / "warmstart.json").read_text())
    digest = weights_sha256(out)
    dst = root / key_of(out)
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(out, dst)
    manifest = pins(root)
    manifest[key_of(out)] = {
        "weights_sha256": digest,
        "check_accuracy": info.get("check_accuracy"),
        "steps": info.get("steps"),
        "target_accuracy": info.get("target_accuracy"),
        "fingerprint": info.get("fingerprint", {}),
    }
    (root / MANIFEST).write_text(json.dumps(dict(sorted(manifest.items())), indent=1) + "\n")
    return manifest[key_of(out)]
