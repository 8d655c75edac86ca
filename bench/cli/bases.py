"""``creditbench bases``: build (warm-start), pin and verify the tiny base checkpoints
(bench/bases)."""

from __future__ import annotations

from pathlib import Path

from bench.config import default_uri
from bench.run.args import ArgumentParser

USAGE = "bases build TASK... [--fresh --pin] | pin DIR... | verify"
HELP = "build, pin and verify the tiny base checkpoints"


def main(argv: list[str]) -> int:
    ap = ArgumentParser(prog="creditbench bases", description="Build, pin and verify the tiny base checkpoints.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="warm-start the bases of tasks (default options and settings) into a cache")
    b.add_argument("tasks", nargs="+")
    b.add_argument("--size", default="tiny-500k")
    b.add_argument("--cache_dir", default=".creditbench/cache")
    b.add_argument(
        "--tracking_uri", default=default_uri(), help="default: $MLFLOW_TRACKING_URI, else sqlite:///mlflow.db"
    )
    b.add_argument("--fresh", action="store_true", help="warm-start from scratch even where a base is pinned")
    b.add_argument("--pin", action="store_true", help="then pin them (copy into results/bases, record the digest)")
    p = sub.add_parser("pin", help="pin built bases: copy them into results/bases and record their digests")
    p.add_argument("folders", nargs="+", help="base checkpoint folders (.creditbench/cache/base/<task>/<size>-<key>)")
    sub.add_parser("verify", help="check every pinned base against its digest")
    a = ap.parse_args(argv)
    import json

    from bench.bases import bases, warmstart

    if a.cmd == "build":
        for task_name in a.tasks:
            out = warmstart.build_base(task_name, a.size, a.cache_dir, a.tracking_uri, a.fresh)
            info = json.loads((out / "warmstart.json").read_text())
            print(f"{bases.key_of(out)}: step {info['steps']}, check accuracy {info['check_accuracy']} in {out}")
            if a.pin:
                bases.pin(out)
        return 0
    if a.cmd == "pin":
        for folder in a.folders:
            entry = bases.pin(Path(folder))
            digest, acc = entry["weights_sha256"][:16], entry["check_accuracy"]
            print(f"pinned {bases.key_of(Path(folder))}: sha256 {digest}, check accuracy {acc}")
        return 0
    bad = 0
    for key, entry in bases.pins().items():
        got = bases.weights_sha256(bases.PINNED / key)
        ok = got == entry["weights_sha256"]
        bad += not ok
        want = entry["weights_sha256"]
        print(f"{key}: ok" if ok else f"{key}: DIFFERS (sha256 {got[:16]} != {want[:16]})")
    return 1 if bad else 0
