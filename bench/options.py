"""Typed options from plain values: a dataclass config (a method's, a task's, a run group's) built from
the mapping a YAML file or the command line gives, each unknown key and each value of the wrong type a
one-line error naming what was expected."""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any

from bench.errors import CreditBenchError, suggestion


def build_config(cls: type, values: dict[str, Any], what: str) -> Any:
    """Instantiate dataclass ``cls`` from ``values``; unknown keys and wrong types are user errors."""
    if not isinstance(values, dict):
        raise CreditBenchError(f"{what}: options must be a mapping of option: value, got {values!r}")
    names = sorted(f.name for f in dataclasses.fields(cls))
    for key in values:
        if key not in names:
            raise CreditBenchError(
                f"{what} has no option {key!r}.{suggestion(key, names)} Valid options: {', '.join(names)}."
            )
    try:
        hints = typing.get_type_hints(cls)
    except Exception:  # an annotation that cannot be resolved: leave the checks to the config itself
        hints = {}
    for key, value in values.items():
        expected = _type_mismatch(value, hints.get(key))
        if expected:
            raise CreditBenchError(f"{what}: option {key!r} must be {expected}, got {value!r}")
    try:
        return cls(**values)
    except TypeError as e:
        raise CreditBenchError(f"{what}: {e}") from None


def _type_mismatch(value: Any, hint: Any) -> str | None:
    """What ``value`` should have been (e.g. "a number (float)"), or None when it fits ``hint``."""
    if hint is None or hint is Any:
        return None
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Union or origin is types.UnionType:
        if value is None and type(None) in args:
            return None
        options = [_type_mismatch(value, a) for a in args if a is not type(None)]
        return None if any(o is None for o in options) else " or ".join(o for o in options if o)
    if origin is typing.Literal:
        # Which value is the config's own check (Python builds configs too): it names the valid ones.
        return None
    if hint is bool:
        return None if isinstance(value, bool) else "true or false (bool)"
    if hint is int:
        return None if isinstance(value, int) and not isinstance(value, bool) else "an integer (int)"
    if hint is float:
        return None if isinstance(value, (int, float)) and not isinstance(value, bool) else "a number (float)"
    if hint is str:
        return None if isinstance(value, str) else "a string (str)"
    if origin in (list, tuple, set, frozenset) or hint in (list, tuple):
        if not isinstance(value, (list, tuple)):
            return "a list"
        inner = [a for a in args if a is not Ellipsis]
        bad = [_type_mismatch(v, inner[0]) for v in value] if len(inner) == 1 else []
        return next((f"a list whose items are each {b}" for b in bad if b), None)
    if origin is dict or hint is dict:
        return None if isinstance(value, dict) else "a mapping"
    return None
