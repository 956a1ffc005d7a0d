"""The layer kinds a block can be built from, one module each, collected in ``SUBLAYERS``."""

from tfspec.layers import (  # noqa: F401  (registers kinds)
    attention, conv, ffn, latent_attention, local1d, local2d, moe, recurrent, restricted)
from tfspec.layers.attention import Attention
from tfspec.layers.base import SUBLAYERS, Sublayer, register

__all__ = ["SUBLAYERS", "Attention", "Sublayer", "register"]
