"""creditbench's engine: the typed core, policy loading, rollouts, the LightningModule, metrics,
MLflow tracking and the command line. ``tasks`` and ``methods`` are the two plug-in points and
depend only on this package's small typed core (:mod:`bench.core`, :mod:`bench.registry`).

Importing it pins the CPU numerics (docs/reproducibility.md): on x86-64, unless
``CREDITBENCH_NUMERICS=native``, ATen's vectorised kernels, MKL and oneDNN take their AVX2 code
paths, which every machine of the suite's kind has, so an AVX-512 machine computes what an AVX2 one
does. Each is read when its library first runs, so this must happen before torch computes anything;
a variable the user set is kept (and recorded in every run's fingerprint, bench.environment.fingerprint)."""

import os
import platform

__version__ = "0.1.0"

PORTABLE_NUMERICS = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2,STRICT", "ONEDNN_MAX_CPU_ISA": "AVX2"}
"""The environment that pins the CPU numerics: ATen's dispatch, MKL's conditional numerical
reproducibility branch (STRICT: the same bits whatever the thread count) and oneDNN's ISA."""

if os.environ.get("CREDITBENCH_NUMERICS", "portable") != "native" and platform.machine() in ("x86_64", "AMD64"):
    for _k, _v in PORTABLE_NUMERICS.items():
        os.environ.setdefault(_k, _v)
