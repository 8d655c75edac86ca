"""``creditbench lock``: write bench/requirements.lock, the exact environment the committed results
were made in, from a working ``.venv`` (bench/environment/lock.py says why and when)."""

from __future__ import annotations

from pathlib import Path

from bench.errors import CreditBenchError
from bench.run.args import ArgumentParser

USAGE = "lock [--venv .venv] [--out bench/requirements.lock]"
HELP = "write bench/requirements.lock (exact versions and hashes) from a working .venv"


def main(argv: list[str]) -> int:
    from bench.environment.lock import ROOT, header, lock

    ap = ArgumentParser(
        prog="creditbench lock",
        description="Write bench/requirements.lock, the exact environment the committed results were made in.",
    )
    ap.add_argument("--venv", type=Path, default=ROOT / ".venv", help="the environment to lock (default: .venv)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "requirements.lock", help="the lock file to write")
    a = ap.parse_args(argv)
    if not (a.venv / "bin" / "python").exists():
        raise CreditBenchError(f"no environment at {a.venv}")
    entries, local, python = lock(a.venv)
    a.out.write_text(header(a.venv, python) + "\n" + "\n".join(entries) + "\n")
    print(f"{a.out}: {len(entries)} packages" + (f"; hashed from local files: {', '.join(local)}" if local else ""))
    return 0
