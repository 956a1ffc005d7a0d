"""The PyTorch backend: ``build_module(spec or graph)`` -> a trainable ``nn.Module``."""

from .decode import TorchDecoder
from .model import DecodeState, RunContext, TorchModel, build_module
from .registry import LOWERINGS, lowering

__all__ = ["LOWERINGS", "DecodeState", "RunContext", "TorchDecoder", "TorchModel", "build_module", "lowering"]
