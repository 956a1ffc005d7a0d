"""Name -> function tables filled by decorators: the backends' lowerings (one per IR op) and
attention kinds with their own whole-sequence paths."""

from __future__ import annotations

from typing import Callable


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
