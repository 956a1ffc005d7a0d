"""The parity check of ``export --format optimum``'s encoder graphs (``variants/hub.py``): the
graph fed as optimum's ``ORTModelFor*`` classes feed it (``input_ids``, ``attention_mask``,
``token_type_ids``) against the PyTorch model, on a batch of 3 with one row padded and a pad id
inside a real row, compared at real positions."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from tfspec.backends.onnx.runtime import session_options
from tfspec.backends.torch import TorchModel
from tfspec.checks import Check

from .onnx import _diff, _tokens

OUTPUTS = {"feature-extraction": {"last_hidden_state": "memory", "pooler_output": "pooled"},
           "question-answering": {"start_logits": "logits", "end_logits": "logits"}}
"""Task -> the graph's outputs and the PyTorch model's outputs they come from (default: logits)."""
PER_TOKEN = ("token-classification", "question-answering", "fill-mask")


def check_hub_parity(path: Path, model: TorchModel, task: str, tolerance: float = 1e-4, seed: int = 0
                     ) -> list[Check]:
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), session_options(), providers=["CPUExecutionProvider"])
    spec, ports, rng, model = model.graph.spec, model.graph.ports, np.random.default_rng(seed), model.eval()
    port = "src" if "src" in ports else "tgt"
    ids, keep = _tokens(rng, spec.vocab.size, 3, 11, spec.vocab.pad_id, pad_from=(1, 6))
    feeds = {"input_ids": ids, "attention_mask": keep.astype(np.int64)}
    theirs = {port: torch.from_numpy(ids), f"{port}_mask": torch.from_numpy(keep)}
    if "segments" in ports:
        feeds["token_type_ids"] = rng.integers(0, spec.segments, ids.shape)
        theirs["segments"] = torch.from_numpy(feeds["token_type_ids"])
    names = [o.name for o in session.get_outputs()]
    wanted = OUTPUTS.get(task, {"logits": "logits"})
    with torch.no_grad():
        ref = model.run(theirs, tuple(dict.fromkeys(wanted[n] for n in names)))
    checks = []
    for name, value in zip(names, session.run(names, {i.name: feeds[i.name] for i in session.get_inputs()})):
        expected = ref[wanted[name]].numpy()
        if name in ("start_logits", "end_logits"):
            expected = expected[..., 0 if name == "start_logits" else 1]
        per_token = task in PER_TOKEN or name == "last_hidden_state"  # compared at real tokens only
        checks.append(Check(f"{name} ({task}), batch 3 with padding",
                            _diff(value, expected, keep if per_token else np.ones(len(ids), dtype=bool)), tolerance))
    return checks
