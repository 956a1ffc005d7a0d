"""The parity check of waveform encoders (``tfspec.spec.waveform``, wav2vec 2.0, HuBERT):
onnxruntime against PyTorch on random samples, a batch of 2 whose second row is padded (its
``attention_mask`` zero past 60% of the samples) and an unpadded batch of 1 of another length,
compared at the real frames (a padded frame's output differs between the backends' masks, as for
tokens): ``logits`` and ``log_probs`` of a CTC head, or the encoder's ``memory``."""

from __future__ import annotations

import numpy as np
import torch

from tfspec.backends.onnx.runtime import OnnxModel
from tfspec.backends.torch import TorchModel
from tfspec.checks import Check


def check_waveform_parity(ort_model: OnnxModel, model: TorchModel, tolerance: float, seed: int = 0) -> list[Check]:
    """The checks of the module docstring, each within ``tolerance``."""
    waveform, ports = model.graph.spec.waveform, model.graph.ports
    outputs = [p for p in ("logits", "log_probs") if p in ports] or ["memory"]
    rng = np.random.default_rng(seed)
    shortest = waveform.samples(4)  # the fewest samples that give 4 frames
    checks = []
    for batch, samples in ((2, 2 * shortest), (1, shortest + 7)):
        values = rng.standard_normal((batch, samples)).astype(np.float32)
        mask = np.ones((batch, samples), dtype=np.int64)
        mask[1:, int(0.6 * samples):] = 0
        with torch.no_grad():
            ref = model.eval().run({"input_values": torch.from_numpy(values), "attention_mask": torch.from_numpy(mask)},
                                   tuple(outputs))
        ours = ort_model.run("model", outputs, {"input_values": values, "attention_mask": mask})
        lengths = np.array([waveform.frames(int(n)) for n in mask.sum(1)])
        real = np.arange(ref[outputs[0]].shape[1])[None, :] < lengths[:, None]  # (B, S)
        for name, value in zip(outputs, ours):
            diff = float(np.abs(value.astype(np.float32) - ref[name].numpy())[real].max())
            checks.append(Check(f"{name}, batch {batch}, {samples} samples", diff, tolerance))
    return checks
