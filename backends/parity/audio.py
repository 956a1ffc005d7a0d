"""The parity check of spectrogram encoder-decoders (``tfspec.spec.audio``, Whisper): onnxruntime
against PyTorch on random features of the longest input the position table covers (batch 2) and
of fewer frames (batch 1): the full-sequence logits, the encoder's memory, the step graph's
log-probabilities after pasts of 0, 1, 3 and 6 tokens, and greedy decoding token for token."""

from __future__ import annotations

import numpy as np
import torch

from tfspec.backends.onnx.runtime import OnnxModel
from tfspec.backends.torch import TorchDecoder, TorchModel
from tfspec.checks import Check
from tfspec.search import SearchOptions, search

CHUNKS = [(0, 1), (1, 3), (3, 6), (6, 9)]
"""Step inputs: pasts of 0, 1, 3 and 6 tokens."""


def check_audio_parity(ort_model: OnnxModel, model: TorchModel, tolerance: float, seed: int = 0) -> list[Check]:
    """The checks of the module docstring, each within ``tolerance``."""
    spec = model.graph.spec
    rng = np.random.default_rng(seed)
    frames = spec.spectrogram.frames
    length = min(9, spec.positional.max_len)
    model, checks = model.eval(), []
    decoder = ort_model.decoder(static=False, in_place=False)
    for batch, n in ((2, frames), (1, max(frames // 2, 1))):
        features = rng.standard_normal(spec.spectrogram.shape(batch, n)).astype(np.float32)
        tgt = rng.integers(0, spec.vocab.tgt_size, (batch, length))
        tgt[tgt == spec.vocab.pad_id] = (spec.vocab.pad_id + 1) % spec.vocab.tgt_size  # decoding feeds no padding
        tgt[:, 0] = spec.vocab.bos_id
        with torch.no_grad():
            ref = model.run({"input_features": torch.from_numpy(features), "tgt": torch.from_numpy(tgt)},
                            ("logits", "memory"))
        logits = ort_model.run("model", ["logits"], {"input_features": features, "tgt": tgt})[0]
        memory = ort_model.run("encoder", ["memory"], {"input_features": features})[0]
        where = f"batch {batch}, {n} frames"
        checks += [Check(f"full-sequence logits, {where}", _diff(logits, ref["logits"]), tolerance),
                   Check(f"encoder memory, {where}", _diff(memory, ref["memory"]), tolerance)]
        full = torch.log_softmax(ref["logits"], -1).numpy()
        state = decoder.start(features)
        for a, b in CHUNKS:
            if b > length:
                break
            log_probs, state = decoder.run(state, tgt[:, a:b], ["log_probs"])
            diff = float(np.abs(log_probs - full[:, b - 1]).max())
            checks.append(Check(f"decoder step after {a} tokens, {where}", diff, tolerance))
        options = SearchOptions(beam=1, max_extra=12, max_length=min(12, spec.positional.max_len - 1))
        prefix = tgt[:, :1]
        ours = search(decoder, features, options, prefix)
        theirs = search(TorchDecoder(model), features, options, prefix)
        checks.append(Check(f"greedy decoding, {where} (rows that differ)",
                            float(sum(x != y for x, y in zip(ours, theirs))), 0))
    return checks


def _diff(ours: np.ndarray, theirs: torch.Tensor) -> float:
    return float(np.abs(ours.astype(np.float32) - theirs.numpy()).max())
