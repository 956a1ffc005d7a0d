"""The parity check of ``export --format optimum``'s encoder graphs (``variants/hub.py``): the
graph fed as optimum's ``ORTModelFor*`` classes feed it (``input_ids``, ``attention_mask``,
``token_type_ids``; an image model's ``pixel_values``) against the PyTorch model, on a batch of 3
with one row padded and a pad id inside a real row, compared at real positions (images: 2 at
the model's size); and the seq2seq pair (``variants/hub_decoder.py``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from tfspec.backends.onnx.runtime import session_options
from tfspec.backends.torch import TorchModel
from tfspec.checks import Check

from .dual import texts
from .onnx import _diff, _ids, _tokens

OUTPUTS = {"feature-extraction": {"last_hidden_state": "memory", "pooler_output": "pooled"},
           "zero-shot-image-classification": {n: n for n in ("logits_per_image", "logits_per_text", "text_embeds",
                                                              "image_embeds")},
           "question-answering": {"start_logits": "logits", "end_logits": "logits"}}
"""Task -> the graph's outputs and the PyTorch model's outputs they come from (default: logits)."""
PER_TOKEN = ("token-classification", "question-answering", "fill-mask")


def check_hub_parity(path: Path, model: TorchModel, task: str, tolerance: float = 1e-4, seed: int = 0
                     ) -> list[Check]:
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), session_options(), providers=["CPUExecutionProvider"])
    model, rng = model.eval(), np.random.default_rng(seed)
    ports = model.graph.ports
    fed = _both if "src" in ports and "pixel_values" in ports else _pixels if "pixel_values" in ports else _tokens_fed
    feeds, theirs, keep = fed(model, rng)
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
        rows = keep if per_token and keep is not None else np.ones(len(value), dtype=bool)
        checks.append(Check(f"{name} ({task}), batch {len(value)}{'' if keep is None else ' with padding'}",
                            _diff(value, expected, rows), tolerance))
    return checks


def _tokens_fed(model: TorchModel, rng) -> tuple[dict, dict, np.ndarray]:
    """(the graph's feeds, the PyTorch model's, the real tokens): a batch of 3 with one row
    padded and a pad id inside a real row."""
    spec, ports = model.graph.spec, model.graph.ports
    port = "src" if "src" in ports else "tgt"
    ids, keep = _tokens(rng, spec.vocab.size, 3, 11, spec.vocab.pad_id, pad_from=(1, 6))
    feeds = {"input_ids": ids, "attention_mask": keep.astype(np.int64)}
    theirs = {port: torch.from_numpy(ids), f"{port}_mask": torch.from_numpy(keep)}
    if "segments" in ports:
        feeds["token_type_ids"] = rng.integers(0, spec.segments, ids.shape)
        theirs["segments"] = torch.from_numpy(feeds["token_type_ids"])
    return feeds, theirs, keep


def _pixels(model: TorchModel, rng, images: int = 2) -> tuple[dict, dict, None]:
    """(the graph's feeds, the PyTorch model's, None): random ``pixel_values`` of ``images`` at the
    model's own size (a dual encoder's vision tower's)."""
    spec = model.graph.spec
    patches = spec.patches or spec.dual.vision.patches
    pixels = rng.standard_normal((images, patches.channels, patches.image_size, patches.image_size))
    pixels = pixels.astype(np.float32)
    return {"pixel_values": pixels}, {"pixel_values": torch.from_numpy(pixels)}, None


def _both(model: TorchModel, rng) -> tuple[dict, dict, None]:
    """A dual encoder's feeds: 3 right-padded texts (each ending in its eos id: CLIP pools there)
    and 2 images; every output compared whole."""
    ids, keep = texts(model.graph.spec, rng)
    feeds, theirs, _ = _pixels(model, rng)
    feeds |= {"input_ids": ids, "attention_mask": keep.astype(np.int64)}
    theirs |= {"src": torch.from_numpy(ids), "src_mask": torch.from_numpy(keep)}
    return feeds, theirs, None


STEPS = ((0, 4), (4, 5), (5, 6))
"""The target positions of each decoder call: a 4-token start (scoring a prefix), then two steps."""


def check_seq2seq_parity(encoder: Path, decoder: Path, model: TorchModel, tolerance: float = 1e-4, seed: int = 0
                         ) -> list[Check]:
    """The seq2seq pair (``variants/hub_decoder.py``) fed as ``ORTModelForSeq2SeqLM`` feeds it:
    the encoder on a padded batch of 3, then the merged decoder called three times over 6 target
    tokens (empty pasts and ``use_cache_branch`` false first, then the presents it returned),
    its logits against the PyTorch model's over the whole target at once."""
    import onnxruntime as ort

    checks = check_hub_parity(encoder, model, "feature-extraction", tolerance, seed)
    sessions = [ort.InferenceSession(str(p), session_options(), providers=["CPUExecutionProvider"])
                for p in (encoder, decoder)]
    vocab, rng, model = model.graph.spec.vocab, np.random.default_rng(seed + 1), model.eval()
    src, keep = _tokens(rng, vocab.size, 3, 11, vocab.pad_id, pad_from=(1, 6))
    tgt = _ids(rng, vocab.tgt_size, (3, STEPS[-1][1]), vocab.pad_id)
    with torch.no_grad():
        ref = model.run({"src": torch.from_numpy(src), "src_mask": torch.from_numpy(keep), "tgt": torch.from_numpy(tgt),
                         "tgt_mask": torch.ones(tgt.shape, dtype=torch.bool)})["logits"].numpy()
    mask = keep.astype(np.int64)
    memory = sessions[0].run(["last_hidden_state"], {"input_ids": src, "attention_mask": mask})[0]
    pasts = {i.name: np.zeros((3, i.shape[1], 0, i.shape[3]), np.float32) for i in sessions[1].get_inputs()
             if i.name.startswith("past_key_values.")}
    names, logits = [o.name for o in sessions[1].get_outputs()], []
    for start, stop in STEPS:
        feeds = {"input_ids": tgt[:, start:stop], "encoder_hidden_states": memory, "encoder_attention_mask": mask,
                 "use_cache_branch": np.array([start > 0]), **pasts}
        out = dict(zip(names, sessions[1].run(names, feeds)))
        logits.append(out["logits"])
        pasts = {n.replace("present.", "past_key_values.", 1): v for n, v in out.items() if n.startswith("present.")}
    checks.append(Check(f"decoder logits, {len(STEPS)} calls over the pasts (batch 3, source padding)",
                        _diff(np.concatenate(logits, 1), ref, np.ones(tgt.shape, dtype=bool)), tolerance))
    return checks
