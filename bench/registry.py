"""Name -> plug-in registries for methods and tasks.

A registry is filled by importing its plug-in package (``methods`` or ``tasks``, whose modules
register themselves with a decorator) and the modules named by a Python entry-point group, so a
third-party package adds a method with::

    [project.entry-points."creditbench.methods"]
    my_method = "my_package.my_method"

Duplicate names are rejected; unknown names get a "did you mean" error listing every choice.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from importlib.metadata import entry_points
from typing import Generic, TypeVar

from bench.errors import CreditBenchError, did_you_mean

T = TypeVar("T")


class Registry(Generic[T]):
    def __init__(self, kind: str, package: str, entry_point_group: str):
        self.kind = kind
        self._package = package
        self._group = entry_point_group
        self._items: dict[str, T] = {}
        self._loaded = False

    def register(self, name: str) -> Callable[[T], T]:
        def deco(obj: T) -> T:
            if name in self._items and self._items[name] is not obj:
                raise CreditBenchError(f"{self.kind} {name!r} is registered twice")
            self._items[name] = obj
            if isinstance(obj, type) and hasattr(obj, "name") and "name" not in vars(obj):
                obj.name = name  # a plug-in class that declares a ``name`` learns the one it is registered under
            return obj

        return deco

    def _load(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        importlib.import_module(self._package)
        for ep in entry_points(group=self._group):
            importlib.import_module(ep.value.split(":")[0])

    def get(self, name: str) -> T:
        self._load()
        if name not in self._items:
            raise did_you_mean(self.kind, name, self._items)
        return self._items[name]

    def names(self) -> list[str]:
        self._load()
        return sorted(self._items)

    def __contains__(self, name: str) -> bool:
        self._load()
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())


METHODS: Registry = Registry("method", "methods", "creditbench.methods")
TASKS: Registry = Registry("task", "tasks", "creditbench.tasks")
