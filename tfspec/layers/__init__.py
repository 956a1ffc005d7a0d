"""The layer kinds a block can be built from, one module each, collected in ``SUBLAYERS``: every
module of this package is imported here (``tfspec.registry.discover``), so a new kind is one
new file registered with ``@register``."""

from tfspec.layers.attention import Attention
from tfspec.layers.base import SUBLAYERS, Sublayer, register
from tfspec.registry import discover

discover(__name__)

__all__ = ["SUBLAYERS", "Attention", "Sublayer", "register"]
