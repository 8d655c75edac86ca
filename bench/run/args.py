"""The command line's argument parsing, shared by every ``creditbench`` command: an argparse whose
errors are one line, the typed parser of a run config, and jsonargparse's errors made readable.

One flag style for every command: options are spelt as the run config's YAML keys are, in
snake_case (``--rl.max_new_tokens``, ``--num_problems``, ``--dry_run``), as LightningCLI and TRL
spell theirs; the kebab-case spelling (``--num-problems``) is accepted everywhere as an alias. A
negative number is a value, not an option: ``--rl.lr -1e-4`` works as ``--rl.lr=-1e-4`` does."""

from __future__ import annotations

import argparse
import dataclasses
import functools
import re
import sys
import types
import typing
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import yaml
from jsonargparse.typing import PositiveInt

if TYPE_CHECKING:
    from bench.config import RunConfig

NEGATIVE_NUMBER = re.compile(r"^-(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$|^-inf$")
"""What argparse takes for a negative number rather than an option (its own pattern misses 1e-4)."""
OPTION = re.compile(r"--[A-Za-z][\w.-]*")


def spell(argv: list[str]) -> list[str]:
    """``argv`` with every long option in snake_case (``--num-problems=4`` -> ``--num_problems=4``);
    values, and everything after a bare ``--``, as given."""
    out = list(argv)
    for i, arg in enumerate(out):
        if arg == "--":
            break
        name, eq, value = arg.partition("=")
        if OPTION.fullmatch(name):
            out[i] = "--" + name[2:].replace("-", "_") + eq + value
    return out


class ArgumentParser(argparse.ArgumentParser):
    """argparse whose errors are one line ``creditbench: error: ...`` (a CreditBenchError), no usage;
    options declared and parsed in snake_case (see the module docstring); negative numbers as values."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = NEGATIVE_NUMBER

    def add_argument(self, *names, **kwargs):
        return super().add_argument(*spell(list(names)), **kwargs)

    def add_sweep(self, required: bool = True, help: str = "the sweep's name (its folder: <results_dir>/<sweep>)"):
        """The options that name a finished sweep, spelt alike by every command that reads one: ``--sweep`` and
        ``--results_dir`` (also ``--results``)."""
        self.add_argument("--sweep", required=required, help=help)
        self.add_argument(
            "--results_dir", "--results", default="results", help="where the sweeps' folders are (default: results)"
        )

    def parse_known_args(self, args=None, namespace=None):
        return super().parse_known_args(spell(sys.argv[1:] if args is None else list(args)), namespace)

    def error(self, message: str):
        from bench.errors import CreditBenchError

        raise CreditBenchError(f"{self.prog}: {message} (see {self.prog} --help)")


def train_parser():
    from jsonargparse import ArgumentParser, set_parsing_settings

    from bench.config import RunConfig

    set_parsing_settings(docstring_parse_attribute_docstrings=True)  # every field's docstring in --help

    class TrainParser(ArgumentParser):
        """jsonargparse with the flag spelling and negative numbers of every other command."""

        def parse_args(self, args=None, *rest, **kwargs):
            return super().parse_args(spell(sys.argv[1:] if args is None else list(args)), *rest, **kwargs)

    p = TrainParser(
        prog="creditbench train",
        description="Train one policy with one method on one task.",
        exit_on_error=False,
        default_env=False,
    )
    p.add_argument("--config", action="config", help="a run YAML file (see results/configs/)")
    p.add_argument("--no_progress", action="store_true", help="hide Lightning's progress bars")
    p._negative_number_matcher = NEGATIVE_NUMBER
    p.add_class_arguments(RunConfig, None)
    return p


@functools.cache
def _run_parser():
    """The typed parser of a run config, built once (about 0.5 s): a parse does not change it."""
    return train_parser()


def run_config(source: list[str] | dict[str, Any], where: str = "bad configuration") -> RunConfig:
    """The one way to a :class:`RunConfig`: ``creditbench train``'s arguments (``--config`` files, then
    flags) or a nested dict of a run config's fields (a sweep's run, a script's), through the same
    typed parser, so every path accepts and refuses the same configs.

    A bad one raises one line, ``<where>: <what>``: for arguments, prefixed with the flag that set the
    value or the ``--config`` file and line it comes from (malformed YAML names its line and column)."""
    from bench.config import RunConfig
    from bench.errors import CreditBenchError

    p = _run_parser()
    argv = source if isinstance(source, list) else None
    try:
        if argv is None:
            ns = p.parse_object(source)
        else:
            for path in config_files(argv):  # malformed YAML: the file, line and column where it breaks
                if Path(path).is_file():
                    load_yaml(path)
            ns = p.parse_args(argv)
        ns.pop("no_progress", None)
        ns.pop("config", None)
        cfg = p.instantiate(ns)
    except CreditBenchError as e:  # a range check of the config's own (__post_init__), or a YAML error
        raise CreditBenchError(f"{where}: {_located(argv, str(e))}") from None
    except Exception as e:  # jsonargparse: unknown keys, bad types and out-of-range values
        raise CreditBenchError(f"{where}: {_located(argv, config_error(e))}") from None
    return RunConfig(**{k: v for k, v in vars(cfg).items() if k in RunConfig.__dataclass_fields__})


def _located(argv: list[str] | None, message: str) -> str:
    return message if argv is None else from_files(argv, message)


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
    text = re.sub(r"<class '(\w+)'>", r"\1", text)  # "Expected a <class 'float'>" -> "Expected a float"
    return re.sub(r'^Parser key "([\w.]+)": ', r"\1: ", text)


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


# ------------------------------------------------------------------ where in a YAML file an error is
def load_yaml(path) -> object:
    """A YAML file's content; malformed YAML is one line ``PATH:LINE:COLUMN: not valid YAML: ...`` at
    the place the parser stopped (its problem mark, not the start of the enclosing block)."""
    import yaml

    from bench.errors import CreditBenchError

    try:
        return yaml.safe_load(open(path).read())
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        context = f" ({e.context} at line {e.context_mark.line + 1})" if e.context and e.context_mark else ""
        raise CreditBenchError(f"{where}: not valid YAML: {e.problem or e}{context}") from None
    except yaml.YAMLError as e:
        raise CreditBenchError(f"{path}: not valid YAML: {first_line(e)}") from None


def yaml_lines(path) -> tuple[dict[str, int], list[tuple[str, str, int]]]:
    """The line of every key of a YAML file (dotted: ``rl.sampling.top_p``; an entry of a list under
    its list's key) and every scalar value as (value, key, line); empty where the file does not parse."""
    import yaml

    keys: dict[str, int] = {}
    values: list[tuple[str, str, int]] = []

    def walk(node, prefix: str) -> None:
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                key = f"{prefix}.{k.value}" if prefix else str(k.value)
                keys.setdefault(key, k.start_mark.line + 1)
                walk(v, key)
        elif isinstance(node, yaml.SequenceNode):
            for item in node.value:
                walk(item, prefix)
        elif isinstance(node, yaml.ScalarNode):
            values.append((node.value, prefix, node.start_mark.line + 1))

    try:
        walk(yaml.compose(open(path).read()), "")
    except (OSError, yaml.YAMLError):
        pass
    return keys, values


def locate(path, message: str) -> str | None:
    """``PATH:LINE: `` of what ``message`` complains about in the YAML file ``path``: the key it starts
    with or names (``rl.lr must be ...``), else the value it quotes (``unknown method 'grpoo'``)."""
    keys, values = yaml_lines(path)
    head = re.match(r"(\w+)(?: (\w+))?", message)  # "rl.lr must ...", "budget samples must ..."
    named = ([f"{head[1]}.{head[2]}"] if head[2] else []) + [head[1]] if head else []
    named = [*re.findall(r"^[\w.]+", message), *named, *re.findall(r"\b[A-Za-z_]\w*(?:\.\w+)+\b", message)]
    for key in named:
        found = keys.get(key) or next((line for k, line in keys.items() if k.endswith(f".{key}")), None)
        if found:  # a key at the top or, dotted, in a mapping of overrides: overrides.rl.lr
            return f"{path}:{found}: "
    for quoted in re.findall(r"'([^']+)'", re.split(r" Did you mean | Valid ", message)[0]):  # not the choices
        found = keys.get(quoted) or next((line for k, line in keys.items() if k.endswith(f".{quoted}")), None)
        if found:  # a misspelt key: "unknown sweep spec key 'seedz'"
            return f"{path}:{found}: "
        for value, key, line in values:
            if value == quoted:
                return f"{path}:{line}: {key}: " if key and key not in message else f"{path}:{line}: "
    return None


def config_files(argv: list[str]) -> list[str]:
    """The run YAML files ``argv`` gives with ``--config`` (in order: a later one overrides)."""
    argv = spell(argv)
    files = []
    for i, a in enumerate(argv):
        if a == "--config" and i + 1 < len(argv):
            files.append(argv[i + 1])
        elif a.startswith("--config="):
            files.append(a.split("=", 1)[1])
    return files


NUMBER = re.compile(r"[-+]?(?:\d[\d_]*\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


def _quotes(message: str, value: str) -> bool:
    """Whether ``message`` quotes ``value``: as written, or as the number it is (``-1e-4`` is
    reported as ``-0.0001``)."""
    if value in message:
        return True
    try:
        number = float(value)
    except ValueError:
        return False
    return any(float(t) == number for t in NUMBER.findall(message) if t.strip("+-._"))


def from_files(argv: list[str], message: str) -> str:
    """``message`` prefixed with where its value comes from: the flag that sets the key it names
    (``--rl.lr -1e-4: ``), else the file and line of a ``--config`` file."""
    head = re.match(r"([\w.]+)[: ]", message)
    argv = spell(argv)
    for i, a in enumerate(argv):  # the key's value on the command line, where the message quotes it
        name, eq, value = a.partition("=")
        value = value if eq else argv[i + 1] if i + 1 < len(argv) else ""
        if head and name == f"--{head[1]}" and value and _quotes(message, value):
            return f"{name} {value}: {message}"
    for path in reversed(config_files(argv)):
        where = locate(path, message)
        if where:
            return where + message
    return message


class _ConfigDumper(yaml.SafeDumper):
    """Quotes every string a YAML reader could take for something else: PyYAML quotes what its own
    resolvers would read as a number, but jsonargparse's reader also takes ``45644754158945e8`` (a
    config hash) for a float and ``0899`` for an int. A string that starts like a number is quoted."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    number_like = value[:1].isdigit() or (len(value) > 1 and value[0] in "+-.")
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style='"' if number_like else None)


_ConfigDumper.add_representer(str, _str)


def config_yaml(cfg: RunConfig) -> str:
    """The run config as YAML that reads back as itself (every value, whatever its characters), through
    :func:`run_config`."""
    import dataclasses
    import json

    return yaml.dump(json.loads(json.dumps(dataclasses.asdict(cfg))), Dumper=_ConfigDumper, sort_keys=False)


WORDS = {int: "an integer", PositiveInt: "a positive integer", float: "a number", str: "a string"}


def describe_type(hint: Any) -> str:
    """What a value of type ``hint`` is, in words: "a positive integer", "integers", "one of a, b"."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(describe_type(a) for a in args if a is not type(None))
    if origin is Literal:
        return "one of " + ", ".join(map(str, args))
    if origin is list:
        inner = describe_type(args[0])
        if inner.startswith("one of "):
            return "a list of " + inner.removeprefix("one of ")  # "one of a, b" -> "a list of a, b"
        return inner.split(" ", 1)[-1] + "s"  # "an integer" -> "integers"
    if origin is dict or hint is dict:
        return "a mapping"
    if dataclasses.is_dataclass(hint):
        return getattr(hint, "FORM", f"a mapping of {', '.join(f.name for f in dataclasses.fields(hint))}")
    return WORDS.get(hint, getattr(hint, "__name__", str(hint)))
