"""``creditbench tasks [NAME]``: the registered tasks with their versions, or one task's options with
their defaults and documentation."""

from __future__ import annotations

from bench.cli.methods import listing

USAGE = "tasks [NAME]"
HELP = "list the tasks, or one task's options"


def main(argv: list[str]) -> int:
    return listing("tasks", argv)
