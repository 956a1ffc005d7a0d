"""The graph IR: the single source of truth for shapes and parameters.

The names are imported on first use (PEP 562): ``build`` imports the schema, which reads the
IR's naming rules (``names``) while it is still loading; importing ``build`` here would close
that circle (tests/test_imports.py)."""

from __future__ import annotations

import importlib

_HOMES = {"Graph": "tfspec.ir.graph", "Node": "tfspec.ir.graph", "Param": "tfspec.ir.graph",
          "build_graph": "tfspec.ir.build"}
"""Each public name and the module it is imported from."""

__all__ = list(_HOMES)


def __getattr__(name: str):
    if name not in _HOMES:
        raise AttributeError(f"module 'tfspec.ir' has no attribute {name!r}")
    return getattr(importlib.import_module(_HOMES[name]), name)
