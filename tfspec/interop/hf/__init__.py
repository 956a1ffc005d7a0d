"""Hugging Face checkpoints: ``import_checkpoint`` (directory -> spec + weights) and
``export_checkpoint`` (spec + weights -> a directory transformers loads), one module per
model family (``FAMILIES``; a new family is one module registered with ``@register``: every
module of this package is imported here, ``tfspec.registry.discover``)."""

from tfspec.interop.hf.export import export_checkpoint, fitting_family
from tfspec.interop.hf.family import FAMILIES
from tfspec.interop.hf.imports import SPEC_FILE, WEIGHTS_FILE, Imported, import_checkpoint
from tfspec.registry import discover

discover(__name__)

__all__ = ["FAMILIES", "SPEC_FILE", "WEIGHTS_FILE", "Imported", "export_checkpoint", "fitting_family",
           "import_checkpoint"]
