"""Name registries: Hydra configs select policies, models and cost models by name."""

from __future__ import annotations

import importlib
from typing import Any, Callable, Generic, TypeVar

from twinserve.core.errors import UnknownNameError

T = TypeVar("T")


class Registry(Generic[T]):
    """Maps names to factories (usually classes) of one kind.

    Contract: ``register(name)`` is a decorator that adds a factory and refuses duplicates;
    ``create(name, **kwargs)`` builds one, and also accepts ``"package.module:Factory"`` so a user's
    plugin needs no registration at all. An unknown name raises `UnknownNameError` (a ``KeyError``
and a `UserError`) listing the known ones.
    One registry object exists per kind (scheduling, memory, cache, ...); they are the only
    module-level mutable objects in the package, written at import time only.
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, Callable[..., T]] = {}

    def register(self, name: str) -> Callable[[Callable[..., T]], Callable[..., T]]:
        def deco(factory: Callable[..., T]) -> Callable[..., T]:
            if name in self._items and self._items[name] is not factory:
                raise KeyError(f"{self.kind} '{name}' is already registered")
            self._items[name] = factory
            return factory

        return deco

    def get(self, name: str) -> Callable[..., T]:
        if name in self._items:
            return self._items[name]
        if ":" in name:
            mod, _, attr = name.partition(":")
            return getattr(importlib.import_module(mod), attr)
        raise UnknownNameError(self.kind, name, self._items, hint=" (or give 'module:Class')")

    def create(self, name: str, **kwargs: Any) -> T:
        return self.get(name)(**kwargs)

    def names(self) -> list[str]:
        return sorted(self._items)

    def __contains__(self, name: str) -> bool:
        return name in self._items
