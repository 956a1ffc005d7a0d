"""The spec language: schema (``Spec``) and loading (``load_spec``)."""

from tfspec.spec.loader import load_spec, resolve, shipped_specs, spec_from_data
from tfspec.spec.schema import Spec

__all__ = ["Spec", "load_spec", "resolve", "shipped_specs", "spec_from_data"]
