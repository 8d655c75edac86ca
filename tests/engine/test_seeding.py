"""bench.engine.seeding.seeded: what a block draws depends on its seed only, and the stream outside
goes on as if the block had not drawn."""

from __future__ import annotations

import torch

from bench.engine.seeding import seeded


def test_a_seeded_block_draws_from_its_seed_and_leaves_the_stream_alone():
    torch.manual_seed(0)
    expected_next = torch.rand(3)
    torch.manual_seed(1)
    expected_inside = torch.rand(3)

    torch.manual_seed(0)
    with seeded(1):
        inside = torch.rand(3)
    assert torch.equal(inside, expected_inside)  # the block's draws: torch.manual_seed(1)'s, bit for bit
    assert torch.equal(torch.rand(3), expected_next)  # the outer stream never moved


def test_the_same_as_the_block_it_replaces():
    """``with seeded(s, devices)`` is ``with torch.random.fork_rng(devices): torch.manual_seed(s)``."""
    torch.manual_seed(5)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(7)
        before = torch.randn(4), torch.randint(0, 100, (4,))
    after_before = torch.rand(2)
    torch.manual_seed(5)
    with seeded(7, devices=[]):
        now = torch.randn(4), torch.randint(0, 100, (4,))
    assert all(torch.equal(a, b) for a, b in zip(before, now))
    assert torch.equal(torch.rand(2), after_before)
