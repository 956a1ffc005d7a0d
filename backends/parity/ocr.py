"""The parity check of image-to-text encoder-decoders (``tfspec.spec.image_encoder``, TrOCR):
onnxruntime against PyTorch on random pixel values at the training size (batch 2) and at a larger,
non-square size (batch 1): the full-sequence logits, the encoder's memory, the step graph's
log-probabilities after pasts of 0, 1, 3 and 6 tokens, and greedy and beam decoding token for token."""

from __future__ import annotations

import numpy as np
import torch

from tfspec.backends.onnx.runtime import OnnxModel
from tfspec.backends.parity.audio import CHUNKS, _diff
from tfspec.backends.torch import TorchDecoder, TorchModel
from tfspec.checks import Check
from tfspec.search import SearchOptions, search


def check_ocr_parity(ort_model: OnnxModel, model: TorchModel, tolerance: float, seed: int = 0) -> list[Check]:
    """The checks of the module docstring, each within ``tolerance``."""
    spec = model.graph.spec
    patches = spec.image_encoder.vision.patches
    rng = np.random.default_rng(seed)
    size, p = patches.image_size, patches.patch_size
    model, checks = model.eval(), []
    decoder = ort_model.decoder(static=False, in_place=False)
    for batch, height, width in ((2, size, size), (1, size + p, size + 2 * p)):
        pixels = rng.standard_normal((batch, patches.channels, height, width)).astype(np.float32)
        where = f"batch {batch}, {height} x {width} pixels"
        tgt = _targets(rng, spec, batch)
        with torch.no_grad():
            ref = model.run({"pixel_values": torch.from_numpy(pixels), "tgt": torch.from_numpy(tgt)},
                            ("logits", "memory"))
        logits = ort_model.run("model", ["logits"], {"pixel_values": pixels, "tgt": tgt})[0]
        memory = ort_model.run("encoder", ["memory"], {"pixel_values": pixels})[0]
        checks += [Check(f"full-sequence logits, {where}", _diff(logits, ref["logits"]), tolerance),
                   Check(f"encoder memory, {where}", _diff(memory, ref["memory"]), tolerance)]
        full = torch.log_softmax(ref["logits"], -1).numpy()
        state = decoder.start(pixels)
        for a, b in (chunk for chunk in CHUNKS if chunk[1] <= tgt.shape[1]):
            log_probs, state = decoder.run(state, tgt[:, a:b], ["log_probs"])
            checks.append(Check(f"decoder step after {a} tokens, {where}", float(np.abs(log_probs - full[:, b - 1]).max()),
                                tolerance))
        for beam in (1, 3):
            options = SearchOptions(beam=beam, max_extra=12, max_length=min(12, spec.positional.max_len - 1))
            ours = search(decoder, pixels, options, tgt[:, :1])
            theirs = search(TorchDecoder(model), pixels, options, tgt[:, :1])
            checks.append(Check(f"{'greedy' if beam == 1 else f'beam {beam}'} decoding, {where} (rows that differ)",
                                float(sum(x != y for x, y in zip(ours, theirs))), 0))
    return checks


def _targets(rng, spec, batch: int) -> np.ndarray:
    """Random target ids from the start token, no padding (decoding feeds none)."""
    v = spec.vocab
    tgt = rng.integers(0, v.tgt_size, (batch, min(9, spec.positional.max_len)))
    tgt[tgt == v.pad_id] = (v.pad_id + 1) % v.tgt_size
    tgt[:, 0] = v.bos_id
    return tgt
