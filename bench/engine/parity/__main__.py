"""The command line of the parity runs (bench.engine.parity); Lightning's launcher starts the other
ranks by running it again with the same arguments.

    python -m bench.engine.parity update OUT [--strategy ddp|fsdp] [--devices 1|2] [--cases CASE ...]
        bench.engine.parity.update's fixed-batch update of each case (default: every case of
        bench.engine.parity.batch.CASES, and under FSDP the LoRA case too), fused and in
        micro-batches; rank 0 saves {case: {"stats", "grads"}, "case@split": ...} to OUT.

    python -m bench.engine.parity train OUT [--strategy ddp|fsdp] [--devices W] [--lora]
        A short real run (bench.engine.parity.train; --lora under FSDP only); rank 0 saves what the
        processes ended with to OUT.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from bench.engine.parity.batch import CASES, LORA_CASE, SHARES
from bench.engine.parity.processes import STRATEGIES
from bench.engine.parity.train import train_ddp, train_fsdp
from bench.engine.parity.update import update

PROG = "python -m bench.engine.parity"


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line, its impossible combinations refused in one line."""
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=["update", "train"])
    parser.add_argument("out", type=Path)
    parser.add_argument("--strategy", choices=STRATEGIES, default="ddp")
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--cases", nargs="+", choices=[*CASES, LORA_CASE])
    parser.add_argument("--lora", action="store_true", help="train under a rank-4 adapter (--strategy fsdp)")
    a = parser.parse_args(argv)
    if a.strategy == "fsdp" and a.devices != len(SHARES):
        parser.error(f"--strategy fsdp runs in {len(SHARES)} processes, got --devices {a.devices}")
    if a.mode == "update" and a.devices not in (1, len(SHARES)):
        parser.error(f"update splits the batch between 1 or {len(SHARES)} processes, got --devices {a.devices}")
    if a.lora and (a.mode, a.strategy) != ("train", "fsdp"):
        parser.error("--lora is a train option of --strategy fsdp (updates: --cases grpo@lora)")
    if a.cases and a.mode != "update":
        parser.error("--cases is an update option")
    a.cases = a.cases or [*CASES, *([LORA_CASE] if a.strategy == "fsdp" else [])]
    return a


def main(argv: list[str] | None = None) -> None:
    """Run the command of ``argv`` (default: the process's arguments) on one thread per process."""
    a = parse(argv)
    torch.set_num_threads(1)  # the same arithmetic in every process and in the reference
    if a.mode == "update":
        update(a.out, a.cases, a.devices, a.strategy)
    elif a.strategy == "fsdp":
        train_fsdp(a.out, a.lora)
    else:
        train_ddp(a.out, a.devices)


if __name__ == "__main__":
    main()
