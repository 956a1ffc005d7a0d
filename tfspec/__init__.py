"""tfspec: declarative Transformer specs compiled to a graph IR, analyses and backends.

The public API is small: ``load_spec`` reads and validates a YAML spec, ``build_graph``
lowers it into the IR every analysis and backend reads.

Its names are imported on first use (PEP 562): the schema needs pydantic and the IR networkx,
~0.4 s that ``tfspec --version`` and ``--help`` should not pay.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_HOMES = {"Graph": "tfspec.ir", "Spec": "tfspec.spec", "SpecError": "tfspec.errors", "TfspecError": "tfspec.errors",
          "build_graph": "tfspec.ir", "load_spec": "tfspec.spec"}
"""Each public name and the module it is imported from."""

__all__ = [*_HOMES, "__version__"]


def lazy_names(package: str, homes: dict[str, str]):
    """A ``__getattr__`` for ``package`` (PEP 562) importing each name of ``homes`` from its
    module (the value) on first use."""
    def __getattr__(name: str):
        if name not in homes:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(homes[name]), name)
    return __getattr__


__getattr__ = lazy_names(__name__, _HOMES)


def __dir__() -> list[str]:
    """The lazy names too, for completion in a REPL or notebook."""
    return sorted(set(globals()) | set(_HOMES))
