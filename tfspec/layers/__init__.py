"""The layer kinds a block can be built from, one module each, collected in ``SUBLAYERS``."""

from tfspec.layers import attention, conv, ffn, local1d, local2d, moe, recurrent, restricted  # noqa: F401  (registers kinds)
from tfspec.layers.attention import Attention
from tfspec.layers.base import SUBLAYERS, Sublayer, register

__all__ = ["SUBLAYERS", "Attention", "Sublayer", "register"]
