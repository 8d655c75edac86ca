"""The command line's argument parsing, shared by every ``creditbench`` command: an argparse whose
errors are one line, the typed parser of a run config, and jsonargparse's errors made readable."""

from __future__ import annotations

import argparse


class ArgumentParser(argparse.ArgumentParser):
    """argparse whose errors are one line ``creditbench: error: ...`` (a CreditBenchError), no usage."""

    def error(self, message: str):
        from bench.errors import CreditBenchError

        raise CreditBenchError(f"{self.prog}: {message} (see {self.prog} --help)")


def train_parser():
    from jsonargparse import ArgumentParser, set_parsing_settings

    from bench.config import RunConfig

    set_parsing_settings(docstring_parse_attribute_docstrings=True)  # every field's docstring in --help

    p = ArgumentParser(
        prog="creditbench train",
        description="Train one policy with one method on one task.",
        exit_on_error=False,
        default_env=False,
    )
    p.add_argument("--config", action="config", help="a run YAML file (see results/configs/)")
    p.add_argument("--no-progress", action="store_true", help="hide Lightning's progress bars")
    p.add_class_arguments(RunConfig, None)
    return p


def first_line(e: BaseException) -> str:
    lines = [l.strip() for l in str(e).splitlines() if l.strip() and not l.strip().startswith(("usage:", "tip:"))]
    text = " ".join(lines[:3]) if lines else type(e).__name__
    return text[:500]


def config_error(e: BaseException) -> str:
    """jsonargparse's error on one line, with the valid names for an unknown setting and a plain
    "must be a mapping" for a group of settings given as a single value."""
    import re

    text = first_line(e)
    found = re.search(r"unrecognized arguments: --([\w.]+)", text) or re.search(
        r"Option '([\w.]+)' is not accepted", text
    )
    group = re.search(r"Group '([\w.]+)' does not accept option '(\w+)'", text)
    key = f"{group[1]}.{group[2]}" if group else found[1] if found else None
    if key:
        return unknown_setting(key) or text
    section = re.search(r"""Parser key "([\w.]+)": Unable to load config ['"](.*?)['"]""", text)
    if section:
        return f"{section[1]} must be a mapping of its settings ({section[1]}: {{...}}), got {section[2]!r}"
    return text


def unknown_setting(key: str) -> str | None:
    """'unknown setting ... Did you mean ...? Valid settings: ...' for a dotted key of RunConfig."""
    import dataclasses
    import typing

    from bench.config import RunConfig
    from bench.errors import did_you_mean

    cls, done = RunConfig, []
    for part in key.split("."):
        fields = [f.name for f in dataclasses.fields(cls)]
        if part not in fields:
            prefix = ".".join(done)
            return str(
                did_you_mean("setting", ".".join([*done, part]), [f"{prefix}.{n}" if prefix else n for n in fields])
            )
        done.append(part)
        cls = typing.get_type_hints(cls).get(part)
        if not dataclasses.is_dataclass(cls):
            return None
    return None


def quiet_libraries() -> None:
    """What the command line silences for a run's output: progress bars, tokenizers' fork warning,
    jsonargparse's deprecations, the libraries' known-harmless warnings and their INFO logging."""
    import logging
    import os
    import warnings

    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("JSONARGPARSE_DEPRECATION_WARNINGS", "off")
    warnings.filterwarnings(
        "ignore", message=".*(LeafSpec|eval mode|litlogger|does not have many workers|is_gradient_checkpointing).*"
    )
    for name in ("transformers", "lightning.pytorch.utilities.rank_zero", "lightning.fabric"):
        logging.getLogger(name).setLevel(logging.WARNING)
