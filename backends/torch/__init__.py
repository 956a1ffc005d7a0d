"""The PyTorch backend: ``build_module(spec or graph)`` -> a trainable ``nn.Module``."""

from .model import RunContext, TorchModel, build_module
from .registry import LOWERINGS, lowering

__all__ = ["LOWERINGS", "RunContext", "TorchModel", "build_module", "lowering"]
