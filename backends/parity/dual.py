"""The parity check of dual encoders (``tfspec.spec.dual``): onnxruntime against PyTorch on random
right-padded token ids and random pixel values, as many images as texts and fewer, every score
and embedding compared."""

from __future__ import annotations

import numpy as np
import torch

from tfspec.backends.onnx.runtime import OnnxModel
from tfspec.backends.torch import TorchModel
from tfspec.checks import Check


def texts(spec, rng) -> tuple[np.ndarray, np.ndarray]:
    """3 right-padded texts of the text tower's ids and their mask (bool), each ending in the eos id
    at its last real token (CLIP pools there; a row without one pools its first position)."""
    length = min(9, spec.positional.max_len or 9)
    ids = rng.integers(4, spec.vocab.size, (3, length))
    keep = np.arange(length)[None] < np.array([[length], [length - 3], [2]])
    ids[np.arange(3), keep.sum(1) - 1] = spec.vocab.eos_id
    return ids, keep


def check_dual_parity(ort_model: OnnxModel, model: TorchModel, tolerance: float, seed: int = 0) -> list[Check]:
    """Each of the graph's outputs (``Graph.outputs``) within ``tolerance``, for 3 texts and 3 or 1 images."""
    graph, rng = model.graph, np.random.default_rng(seed)
    spec, patches = graph.spec, graph.spec.dual.vision.patches
    src, keep = texts(spec, rng)
    keep = keep.astype(np.int64)
    checks = []
    for images in (3, 1):
        pixels = rng.standard_normal((images, patches.channels, patches.image_size, patches.image_size))
        feeds = {"src": src, "src_mask": keep, "pixel_values": pixels.astype(np.float32)}
        with torch.no_grad():
            ref = model.eval().run({k: torch.from_numpy(v) for k, v in feeds.items()}, tuple(graph.outputs))
        ours = ort_model.run("model", graph.outputs, {"src": src, "attention_mask": keep,
                                                      "pixel_values": feeds["pixel_values"]})
        for name, value in zip(graph.outputs, ours):
            diff = float(np.abs(value - ref[name].numpy()).max())
            checks.append(Check(f"{name}, 3 texts, {images} images", diff, tolerance))
    return checks
