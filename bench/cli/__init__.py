"""The ``creditbench`` command line: one module per command in this folder, each with ``main(argv)``,
a ``USAGE`` line and a one-line ``HELP``; :data:`COMMANDS` is the one table from a command's name to
its module, and ``creditbench --help`` is built from it. An unknown command is refused with the
valid ones (exit status 2)."""

from __future__ import annotations

import atexit
import gc
import importlib
import sys
from types import ModuleType

from bench.run.args import quiet_libraries

COMMANDS = {
    "train": "train",
    "eval": "eval",
    "sweep": "sweep",
    "summarize": "summarize",
    "table": "table",
    "curves": "curves",
    "plots": "plots",
    "credit-probe": "credit_probe",
    "judge": "judge",
    "credit-maps": "credit_maps",
    "reproduce": "reproduce",
    "docs-tables": "docs_tables",
    "curve-fit": "curve_fit",
    "methods": "methods",
    "tasks": "tasks",
    "ui": "ui",
    "server": "server",
    "slurm": "slurm",
    "fetch": "fetch",
    "bases": "bases",
    "lock": "lock",
}
"""Every command: its name on the command line -> its module in bench/cli."""


def command(name: str) -> ModuleType:
    """The module of command ``name`` (imported on first use: a command pays for its own imports)."""
    return importlib.import_module(f"bench.cli.{COMMANDS[name]}")


def usage() -> str:
    """``creditbench --help``: every command of :data:`COMMANDS` with its summary and usage line."""
    lines = ["usage: creditbench COMMAND [ARGS ...]   (creditbench COMMAND --help: its options)", "", "commands:"]
    width = max(map(len, COMMANDS))
    for name in COMMANDS:
        module = command(name)
        lines += [f"  {name:<{width}}  {module.HELP}", f"  {'':<{width}}    creditbench {module.USAGE}"]
    return "\n".join([*lines, "", "creditbench --version"])


def main(argv: list[str] | None = None) -> int:
    """Run the command ``argv`` names (None: this process's own arguments, and the process ends with it)."""
    from bench.errors import CreditBenchError, did_you_mean

    if argv is None:
        argv = sys.argv[1:]
        # The interpreter's last collections at exit would walk every object torch, MLflow and the
        # report's libraries made (a second or more) to free memory the process gives back anyway.
        atexit.register(gc.freeze)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0
    if argv[0] in ("-V", "--version"):
        from importlib.metadata import version

        print(f"creditbench {version('creditbench')}")
        return 0
    name, rest = argv[0], argv[1:]
    quiet_libraries()
    try:
        if name not in COMMANDS:
            raise did_you_mean("command", name, COMMANDS)
        return command(name).main(rest)
    except CreditBenchError as e:
        print(f"creditbench: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:  # one line (a sweep has said what it stopped); the shell's status for Ctrl-C
        from bench.sweep.launch import SweepInterrupted

        if not isinstance(e, SweepInterrupted):
            print("creditbench: interrupted", file=sys.stderr)
        return 130
