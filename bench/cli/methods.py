"""``creditbench methods [NAME]``: the registered credit-assignment methods, or one method's options
with their defaults and documentation. ``creditbench tasks`` lists the tasks the same way."""

from __future__ import annotations

USAGE = "methods [NAME]"
HELP = "list the methods, or one method's options"


def main(argv: list[str]) -> int:
    return listing("methods", argv)


def listing(kind: str, argv: list[str]) -> int:
    """Every entry of the ``kind`` registry on a line, or with one NAME its options."""
    from bench.errors import CreditBenchError
    from bench.registry import METHODS, TASKS

    reg = METHODS if kind == "methods" else TASKS
    if argv:  # one entry's options, with their defaults and documentation
        from bench.report.fields import describe

        if len(argv) > 1 or argv[0].startswith("-"):
            raise CreditBenchError(f"usage: creditbench {kind} [NAME]; valid names: {', '.join(reg.names())}")
        print(describe(kind, argv[0], reg.get(argv[0])))
        return 0
    width = max(map(len, reg.names()))
    for name in reg.names():
        obj = reg.get(name)
        extra = f"  [{obj.paper}]" if kind == "methods" else f"  (v{obj.VERSION})"
        print(f"{name:<{width}}  {obj.description}{extra}")
    return 0
