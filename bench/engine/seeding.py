"""Drawing from torch's global RNG at a fixed seed without moving the run's own stream: the credit
map's and the blame alignment's groups, a method's augmentation, the warm-start's check and the credit
probe's batches and updates each draw inside :func:`seeded`, so what they draw depends on their seed only, and the run
draws next exactly what it would have drawn without them (tests/engine/test_seeding.py)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch


@contextmanager
def seeded(seed: int, devices: Sequence[int] = ()) -> Iterator[None]:
    """Inside the block torch's RNG (the CPU's and every GPU's) starts from ``seed``; after it, the CPU's
    and ``devices``' states are where they were before it (``torch.random.fork_rng``)."""
    with torch.random.fork_rng(devices=list(devices)):
        torch.manual_seed(seed)
        yield
