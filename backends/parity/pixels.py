"""The parity check of image models (``tfspec.spec.patches``): onnxruntime against PyTorch on
random pixel values at the training size (batch 2) and at a larger, non-square size (batch 1),
where the position table is resized bicubically in both."""

from __future__ import annotations

import numpy as np
import torch

from tfspec.backends.onnx.runtime import OnnxModel
from tfspec.backends.torch import TorchModel
from tfspec.checks import Check


def check_pixel_parity(ort_model: OnnxModel, model: TorchModel, tolerance: float, seed: int = 0) -> list[Check]:
    """Each output of ``model.onnx`` (logits, or an encoder's memory; pooled) within ``tolerance``."""
    patches, ports = model.graph.spec.patches, model.graph.ports
    outputs = [p for p in ("logits", "memory", "pooled") if p in ports and (p != "memory" or "logits" not in ports)]
    rng = np.random.default_rng(seed)
    size, p = patches.image_size, patches.patch_size
    checks = []
    for batch, height, width in ((2, size, size), (1, size + p, size + 2 * p)):
        pixels = rng.standard_normal((batch, patches.channels, height, width)).astype(np.float32)
        with torch.no_grad():
            ref = model.eval().run({"pixel_values": torch.from_numpy(pixels)}, tuple(outputs))
        ours = ort_model.run("model", outputs, {"pixel_values": pixels})
        for name, value in zip(outputs, ours):
            diff = float(np.abs(value.astype(np.float32) - ref[name].numpy()).max())
            checks.append(Check(f"{name}, batch {batch}, {height} x {width} pixels", diff, tolerance))
    return checks
