"""ONNX lowering of a spectrogram's subsampler (``tfspec/ir/ops/subsampler.py``), as the PyTorch
backend's (``backends/torch/subsampler.py``). The encoder graph reads ``input_features``
(batch, frames, mels), the layout transformers gives Speech2Text's input; frames is dynamic."""

from __future__ import annotations

from tfspec.ir import Node
from tfspec.ir.ops.subsampler import layers

from . import lowering


@lowering("conv_subsampler")
def conv_subsampler(e, node: Node, features: str) -> str:
    """Transpose -> per convolution: Conv (stride 2, pad k // 2) -> a * Sigmoid(b) of its two channel
    halves -> Transpose -> x scale."""
    b, p = e.b, node.params
    x = b.op("Transpose", features, perm=[0, 2, 1])  # (B, mels, F)
    for i, (_, out, k, _) in enumerate(layers(node, node.shape[-1]), 1):
        x = b.op("Conv", x, b.param(p[f"w_{i}"]), b.param(p[f"b_{i}"]), kernel_shape=[k], pads=[k // 2, k // 2],
                 strides=[2])  # (B, out, F_i)
        value, gate = b.op("Split", x, b.ints(out // 2, out // 2), axis=1, outputs=2)
        x = b.op("Mul", value, b.op("Sigmoid", gate))  # (B, out / 2, F_i)
    x = b.op("Transpose", x, perm=[0, 2, 1])  # (B, S, d)
    scale = node.attrs["scale"]
    return b.op("Mul", x, b.const(scale)) if scale != 1.0 else x
