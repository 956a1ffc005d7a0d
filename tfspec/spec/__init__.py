"""The spec language: schema (``Spec``) and loading (``load_spec``).

The names are imported on first use (PEP 562), so that the layer kinds can import this
package's leaf modules (``base``, ``bounds``, ``positions``) while the schema imports the
layer kinds: loading ``schema`` here would close that circle (tests/test_imports.py)."""

from __future__ import annotations

from tfspec import lazy_names

_HOMES = {"Spec": "tfspec.spec.schema", "load_spec": "tfspec.spec.loader", "resolve": "tfspec.spec.loader",
          "shipped_specs": "tfspec.spec.loader", "spec_from_data": "tfspec.spec.loader"}
"""Each public name and the module it is imported from."""

__all__ = list(_HOMES)

__getattr__ = lazy_names(__name__, _HOMES)
