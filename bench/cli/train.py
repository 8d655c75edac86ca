"""``creditbench train``: one RL run from a typed YAML config and flags (``--help`` lists every
setting with its documentation). The run itself is :func:`bench.run.command.train_command`, which the
sweep worker shares."""

from __future__ import annotations

USAGE = "train --config run.yaml [--rl.steps 50 ...]"
HELP = "one RL run (typed YAML config)"


def main(argv: list[str]) -> int:
    from bench.run.command import train_command
    from bench.sweep.sweep import result_writer

    return train_command(argv, result_writer)
