"""The parity check ``tfspec export --format genai`` runs: the genai graph, fed as
onnxruntime-genai feeds it (``genai.py``), against the PyTorch backend.

Three prompts of 9, 5 and 2 tokens right-padded to 9 (the runtime's padding: mask 0, position
0), then three one-token steps appended after the padding with positions continuing from each
row's last real token; and one prompt of 4 tokens continued by 3 at once (the runtime's
continuous decoding). Logits at real tokens are compared with the PyTorch backend's logits of
each row's tokens alone. Needs onnxruntime only, not onnxruntime-genai.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from tfspec.backends.onnx.runtime import session_options
from tfspec.backends.torch import TorchModel
from tfspec.checks import Check

from .onnx import _ids

CASES = (((9, 5, 2), (1, 1, 1)), ((4,), (3,)))
"""(prompt lengths, then the tokens appended per call)."""


def check_genai_parity(path: Path, model: TorchModel, tolerance: float = 1e-4, seed: int = 0) -> list[Check]:
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), session_options(), providers=["CPUExecutionProvider"])
    vocab, rng, model = model.graph.spec.vocab, np.random.default_rng(seed), model.eval()
    checks = []
    for lengths, chunks in CASES:
        n, batch = np.array(lengths), len(lengths)
        prompts = _ids(rng, vocab.tgt_size, (batch, n.max()), vocab.pad_id)
        later = _ids(rng, vocab.tgt_size, (batch, sum(chunks)), vocab.pad_id)
        with torch.no_grad():  # each row's prompt and continuation, unpadded
            ref = [model(torch.from_numpy(np.concatenate([prompts[i, :n[i]], later[i]])[None]))[0].numpy()
                   for i in range(batch)]
        columns = np.arange(n.max())
        mask = (columns < n[:, None]).astype(np.int64)
        padded = np.where(mask == 1, prompts, vocab.pad_id)
        logits, pasts = _run(session, padded, mask, np.where(mask == 1, columns, 0), None)
        diff = max(np.abs(logits[i, :n[i]] - ref[i][:n[i]]).max() for i in range(batch))
        shape = f"prompts of {', '.join(map(str, lengths))} tokens, right-padded" if batch > 1 else \
            f"a prompt of {lengths[0]} tokens"
        checks.append(Check(f"{shape} (batch {batch})", float(diff), tolerance))
        done, diff = 0, 0.0
        for size in chunks:
            mask = np.hstack([mask, np.ones((batch, size), np.int64)])
            positions = n[:, None] + done + np.arange(size)
            logits, pasts = _run(session, later[:, done:done + size], mask, positions, pasts)
            diff = max([diff] + [np.abs(logits[i] - ref[i][n[i] + done:n[i] + done + size]).max()
                                 for i in range(batch)])
            done += size
        checks.append(Check(f"then {' + '.join(map(str, chunks))} tokens with the cache (batch {batch})",
                            float(diff), tolerance))
    return checks


def _run(session, tokens: np.ndarray, mask: np.ndarray, positions: np.ndarray, pasts: dict | None):
    """One call as genai makes it: (logits, the presents renamed as the next call's pasts)."""
    inputs = {i.name: i for i in session.get_inputs()}
    if pasts is None:  # no past yet: zero-length keys and values
        pasts = {name: np.zeros([len(tokens) if k == 0 else 0 if isinstance(d, str) else d
                                 for k, d in enumerate(i.shape)], np.dtype(_numpy_type(i.type)))
                 for name, i in inputs.items() if name.startswith("past_key_values.")}
    feeds = {"input_ids": tokens.astype(np.int64), "attention_mask": mask} | pasts
    if "position_ids" in inputs:
        feeds["position_ids"] = positions.astype(np.int64)
    names = [o.name for o in session.get_outputs()]
    outputs = dict(zip(names, session.run(names, feeds)))
    presents = {n.replace("present.", "past_key_values.", 1): v for n, v in outputs.items() if n.startswith("present.")}
    return outputs["logits"].astype(np.float32), presents


def _numpy_type(ort_type: str) -> str:
    return {"tensor(float)": "float32", "tensor(float16)": "float16"}[ort_type]
