"""What a run's numbers depend on besides the code and its config: the numerics stack of the
process (the CPU code paths in effect, the BLAS, torch and the libraries that compute or sample) and,
for information only, the machine. Every run records it (RunResult.fingerprint) and every report
carries its runs' (report["fingerprint"]); bench.reproduce.rerun compares committed numbers exactly
where the numerics stacks match and statistically where they do not (docs/reproducibility.md)."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import re
from typing import Any

NUMERICS_LIBRARIES = ("torch", "transformers", "tokenizers", "lightning", "peft", "numpy", "math-verify", "sympy")
"""The packages whose versions can move a number: the tensor library, the model code, the
tokenizer, the training loop, LoRA, the statistics, and the math grader with its algebra."""


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _blas() -> str:
    import torch

    config = torch.__config__.show()
    mkl = re.search(r"Math Kernel Library Version ([\w.-]+)", config)
    if mkl:
        return f"mkl {mkl.group(1)}"
    info = re.search(r"BLAS_INFO=(\w+)", config)
    return info.group(1) if info else "unknown"


def hardware_capability() -> str:
    """The best x86 vector ISA the CPU has (what ATen would pick unpinned), from /proc/cpuinfo."""
    try:
        flags = next((line.split(":", 1)[1].split() for line in open("/proc/cpuinfo") if line.startswith("flags")), [])
    except OSError:
        return platform.machine()
    return "AVX512" if "avx512f" in flags else "AVX2" if "avx2" in flags else platform.machine()


def _cpu_model() -> str:
    try:
        return next(
            (line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
            platform.processor(),
        )
    except OSError:
        return platform.processor() or platform.machine()


def cpu_vendor() -> str:
    """The CPU's vendor (``GenuineIntel``, ``AuthenticAMD``; else the architecture): MKL dispatches on it
    even on its conditional-reproducibility branch, and the last bits of some results follow it."""
    try:
        return next(
            (line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("vendor_id")),
            platform.machine(),
        )
    except OSError:
        return platform.machine()


def fingerprint(threads: int | None = None) -> dict[str, Any]:
    """This process's numerics stack (``numerics``: what decides the bits) and its machine
    (``machine``: informational; two machines whose ``numerics`` agree compute the same numbers)."""
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    numerics = {
        "device": device if device == "cpu" else f"cuda {torch.cuda.get_device_name(0)}",
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cpu_vendor": cpu_vendor(),
        "mkl_cbwr": os.environ.get("MKL_CBWR", ""),
        "onednn_isa": os.environ.get("ONEDNN_MAX_CPU_ISA", ""),
        "blas": _blas(),
        "threads": threads or torch.get_num_threads(),
        "python": platform.python_version(),
        **{dist: _version(dist) for dist in NUMERICS_LIBRARIES},
    }
    machine = {"cpu": _cpu_model(), "hardware_capability": hardware_capability(), "arch": platform.machine()}
    return {"numerics": numerics, "machine": machine}


def common(fingerprints: list[dict[str, Any]]) -> dict[str, Any]:
    """The fingerprint of a set of runs: theirs when they agree; else each field's values, with
    ``mixed`` listing the fields that differ (such a report is never checked exactly)."""
    fps = [f for f in fingerprints if f]
    if not fps:
        return {}
    out: dict[str, Any] = {}
    mixed = []
    for part in ("numerics", "machine"):
        keys = dict.fromkeys(k for f in fps for k in f.get(part, {}))
        out[part] = {}
        for k in keys:
            values = sorted({str(f.get(part, {}).get(k)) for f in fps})
            if len(values) == 1:
                out[part][k] = fps[0][part].get(k)
            else:
                out[part][k] = values
                mixed.append(f"{part}.{k}")
    if len(fps) < len(fingerprints):
        mixed.append("runs without a fingerprint")
    if mixed:
        out["mixed"] = mixed
    return out


def describe(fp: dict[str, Any]) -> str:
    """One line: the code paths, BLAS, threads and library versions, and the machine."""
    n, m = fp.get("numerics", {}), fp.get("machine", {})
    libs = ", ".join(f"{k} {n[k]}" for k in NUMERICS_LIBRARIES if n.get(k))
    paths = f"{n.get('cpu_capability')} kernels, MKL_CBWR={n.get('mkl_cbwr') or 'unset'}, {n.get('blas')}"
    mixed = f"; runs differ in {', '.join(fp['mixed'])}" if fp.get("mixed") else ""
    return (
        f"{n.get('device')}, {paths}, {n.get('threads')} thread(s); Python {n.get('python')}, {libs}; "
        f"on {m.get('cpu')} ({m.get('hardware_capability')}){mixed}"
    )
