"""What every script shares (the benchmarks of bench.perf, the studies of bench.studies, the GPU plan of
bench.gpu.checks, bench.gold_check, the UI screenshots of tools/): its argument parser, a description of the
machine it ran on, markdown tables, writing its two outputs (``<stem>.md`` for people, ``<stem>.json`` for
code), and the one-line error a script ends with when it was asked for something that does not exist.
tests/test_script.py holds them."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from bench.atomic import write_atomic
from bench.errors import CreditBenchError

# The CPU flags that decide how fast fp32 and bf16 matmuls run on a CPU (without avx512_bf16 or amx,
# bf16 autocast emulates its matmuls and is slower than fp32).
MATMUL_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")


def script_parser(doc: str, prog: str) -> argparse.ArgumentParser:
    """An argument parser whose description is the first paragraph of the script's docstring."""
    return argparse.ArgumentParser(prog=prog, description=(doc or "").split("\n\n")[0])


def run_script(main: Callable[[], int | None], prog: str) -> NoReturn:
    """Run a script's ``main`` and exit with its status; a CreditBenchError (an unknown name, a missing
    extra) ends it with one line on stderr and status 2, as argparse ends a wrong option."""
    try:
        code = main()
    except CreditBenchError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        code = 2
    sys.exit(code)


def _cpuinfo() -> tuple[str | None, list[str]]:
    """The CPU's model name and flags from /proc/cpuinfo (None and [] where there is none)."""
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    return fields.get("model name"), fields.get("flags", "").split()


def machine(torch_threads: int | None = None, packages: Sequence[str] = ()) -> dict[str, Any]:
    """The machine a measurement ran on: the CPU (its model name where /proc/cpuinfo has one), the core
    count, the matmul-relevant CPU flags, torch's threads (``torch_threads``: those of the measured
    processes, when they are not this one's) and version, Python, the GPU (name and memory) where torch
    sees one, and the version of each of ``packages`` (None where it is not installed)."""
    import torch

    name, flags = _cpuinfo()
    gpu = None
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        gpu = f"{p.name} ({p.total_memory / 2**30:.0f} GiB)"
    out = {
        "cpu": name or platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "cpu_flags": sorted(set(flags) & set(MATMUL_FLAGS)),
        "torch_threads": torch_threads or torch.get_num_threads(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "gpu": gpu,
    }
    for package in packages:
        try:
            out[package] = importlib.import_module(package).__version__
        except ImportError:
            out[package] = None
    return out


def machine_line(m: dict[str, Any], *packages: str) -> str:
    """One line for a report's header, e.g. 'AMD EPYC, 2 CPUs, 2 torch threads, torch 2.13.0+cpu', followed
    by the versions of ``packages`` (keys of ``machine(packages=...)``)."""
    where = m["gpu"] or f"{m['cpu']}, {m['cpus']} CPUs"
    versions = "".join(f", {p} {m[p]}" for p in packages)
    return f"{where}, {m['torch_threads']} torch threads, torch {m['torch']}{versions}"


def md_table(header: str | Sequence[str], rows: Iterable[Sequence[Any]], align: str = "") -> list[str]:
    """A markdown table's lines: the header, its rule, one line a row (cells as given, str()). ``header``
    is the column names, or one string that separates them with " | " as the table shows them; ``align``
    has one letter a column, ``r`` for right-aligned (numbers) and ``l`` for the default (empty: all
    default)."""
    names = header.split(" | ") if isinstance(header, str) else list(header)
    rule = ["---:" if a == "r" else "---" for a in align.ljust(len(names), "l")]
    lines = ["| " + " | ".join(names) + " |", "|" + "|".join(rule) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return lines


def write_outputs(out: str | Path, stem: str, markdown: str, data: dict[str, Any]) -> tuple[Path, Path]:
    """Write ``<out>/<stem>.md`` and ``<out>/<stem>.json``, each through a temporary file and a rename,
    so an interrupted script never leaves half a report in place of the last good one."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = out / f"{stem}.md", out / f"{stem}.json"
    for path, text in zip(paths, (markdown.rstrip("\n") + "\n", json.dumps(data, indent=2) + "\n")):
        write_atomic(path, text)
    return paths


def write_report(path: str | Path, markdown: str, data: dict[str, Any]) -> tuple[Path, Path]:
    """``write_outputs`` for a script whose ``--out`` names the report itself, with or without a suffix:
    ``results/tasks/gold_check`` or ``results/benchmarks/scale.md`` (its json beside it)."""
    stem = Path(path).with_suffix("")
    return write_outputs(stem.parent, stem.name, markdown, data)
