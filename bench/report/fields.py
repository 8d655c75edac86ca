"""Field documentation read from source: the string under each dataclass field (an attribute
docstring), for ``creditbench methods NAME`` and ``creditbench tasks NAME``."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import textwrap
from typing import Any


def attribute_docs(cls: type) -> dict[str, str]:
    """``{field: docstring}`` for a dataclass and its bases (a subclass's text wins)."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if klass is object:
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError, SyntaxError):
            continue
        body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
        for node, after in zip(body, body[1:]):
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            ):
                docs[node.target.id] = " ".join(after.value.value.split())
    return docs


def field_rows(config_cls: type) -> list[tuple[str, str, str, str]]:
    """(name, type, default, doc) for every field of a config dataclass."""
    docs = attribute_docs(config_cls)
    rows = []
    for f in dataclasses.fields(config_cls):
        if f.default is not dataclasses.MISSING:
            default: Any = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = "(required)"
        kind = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
        rows.append((f.name, str(kind), repr(default), docs.get(f.name, "")))
    return rows


def describe(kind: str, name: str, obj: Any) -> str:
    """What ``creditbench methods NAME`` prints: the description, then each option."""
    head = f"{kind[:-1]} {name}: {obj.description}"
    extra = f"paper: {obj.paper}" if getattr(obj, "paper", None) else f"version: {getattr(obj, 'VERSION', '?')}"
    config = getattr(obj, "Config", None)
    lines = [head, extra, ""]
    if config is None or not dataclasses.is_dataclass(config):
        return "\n".join([*lines, "(no options)"])
    where = "method.options" if kind == "methods" else "task.options"
    lines.append(f"options (set under {where} in a run config, or --{where} '{{name: value}}'):")
    for field, typ, default, doc in field_rows(config):
        lines.append(f"  {field}: {typ} = {default}")
        if doc:
            lines.extend("      " + line for line in textwrap.wrap(doc, 92))
    return "\n".join(lines)
