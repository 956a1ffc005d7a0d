"""Hugging Face checkpoints: ``import_checkpoint`` (directory -> spec + weights) and
``export_checkpoint`` (spec + weights -> a directory transformers loads), one module per
model family (``FAMILIES``; a new family is one module registered with ``@register``: every
module of this package is imported here, ``tfspec.registry.discover``; encoder families then get
their task classes, ``task_heads.with_task_heads``)."""

from tfspec.interop.hf.export import export_checkpoint, fitting_family
from tfspec.interop.hf.family import FAMILIES
from tfspec.interop.hf.imports import SPEC_FILE, WEIGHTS_FILE, Imported, import_checkpoint
from tfspec.interop.hf.task_heads import with_task_heads
from tfspec.registry import discover

discover(__name__)
FAMILIES.update({model_type: with_task_heads(cls) for model_type, cls in FAMILIES.items()})

__all__ = ["FAMILIES", "SPEC_FILE", "WEIGHTS_FILE", "Imported", "export_checkpoint", "fitting_family",
           "import_checkpoint"]
