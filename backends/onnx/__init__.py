"""The ONNX backend: graphs emitted straight from the IR, run with onnxruntime.

``export(module, dir)`` writes and checks the graphs; ``OnnxModel(dir)`` loads them;
``OnnxModel(dir).decoder()`` decodes with ``tfspec.search`` like the PyTorch backend does.
"""

from .decoding import OnnxDecoder
from .export import Exported, export
from .graphs import KINDS, emit
from .lowerings import LOWERINGS, lowering
from .runtime import OnnxModel

__all__ = ["KINDS", "LOWERINGS", "Exported", "OnnxDecoder", "OnnxModel", "emit", "export", "lowering"]
