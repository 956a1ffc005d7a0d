"""Name -> function tables filled by decorators: the backends' lowerings (one per IR op) and
attention kinds with their own whole-sequence paths; ``discover`` imports the modules that fill
them, so a new kind is one new file (docs/extending.md)."""

from __future__ import annotations

import importlib
import pkgutil
from typing import Callable


def discover(package: str) -> None:
    """Import every module of ``package``, found by scanning its folders: each registers its
    kinds when imported, so no list of modules is kept anywhere. Cheap to repeat (Python keeps
    imported modules); a module added since the last call is imported by the next one."""
    root = importlib.import_module(package)
    for module in pkgutil.iter_modules(root.__path__):
        importlib.import_module(f"{package}.{module.name}")


def registrar(table: dict[str, Callable], what: str) -> Callable[[str], Callable]:
    """``@registrar(table, what)(name)`` stores the decorated function in ``table`` under
    ``name``; a second one for the same name is refused (a copied lowering must not silently
    replace the first)."""
    def named(name: str):
        def register(fn):
            if name in table:
                raise ValueError(f"two {what} {name!r}")
            table[name] = fn
            return fn
        return register
    return named
