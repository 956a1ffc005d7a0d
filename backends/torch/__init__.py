"""The PyTorch backend: ``build_module(spec or graph)`` -> a trainable ``nn.Module``."""

from . import heads, latent_attention, local2d, moe  # noqa: F401  (register lowerings: task heads, MLA, 2D, MoE)
from .decode import TorchDecoder
from .model import DecodeState, RunContext, TorchModel, build_module
from .registry import LOWERINGS, lowering

__all__ = ["LOWERINGS", "DecodeState", "RunContext", "TorchDecoder", "TorchModel", "build_module", "lowering"]
