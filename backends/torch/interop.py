"""Checking an exported Hugging Face checkpoint against the PyTorch backend.

``tfspec export --format hf`` loads what it wrote with transformers (when installed) and runs
both models on the same random, right-padded batch (an encoder-decoder's targets unpadded):
the outputs the family names (logits, or BERT's hidden states and pooled output) must agree
at every non-padded position.
"""

from __future__ import annotations

from pathlib import Path

import torch

from tfspec.checks import Check

from .model import TorchModel


@torch.no_grad()
def check_hf(model: TorchModel, directory: str | Path, architecture: str, outputs: dict[str, str],
             tolerance: float = 1e-4) -> list[Check]:
    """Compare ``model`` with ``transformers.<architecture>.from_pretrained(directory)``
    (loaded in float32: a float16 export differs by its rounding, hence a looser tolerance)."""
    import transformers

    theirs = getattr(transformers, architecture).from_pretrained(str(directory)).float().eval()
    spec = model.graph.spec
    vocab = spec.vocab
    gen = torch.Generator().manual_seed(0)
    length = min(16, spec.positional.max_len)
    tokens = torch.randint(0, vocab.size, (3, length), generator=gen)
    tokens[tokens == vocab.pad_id] = (vocab.pad_id + 1) % vocab.size
    tokens[1, length // 2:] = vocab.pad_id  # a padded row
    keep = tokens != vocab.pad_id
    feeds, theirs_feeds = {"src" if "src" in model.graph.ports else "tgt": tokens}, {}
    if "src" in model.graph.ports and "tgt" in model.graph.ports:  # unpadded targets from the start token
        target = torch.randint(0, vocab.tgt_size, (3, length), generator=gen)
        target[target == vocab.pad_id] = (vocab.pad_id + 1) % vocab.tgt_size
        target[:, 0] = vocab.bos_id
        feeds["tgt"] = theirs_feeds["decoder_input_ids"] = target
        keep = torch.ones_like(target, dtype=torch.bool)
    ours = model.eval().run(feeds, tuple(outputs))
    expected = theirs(input_ids=tokens, attention_mask=(tokens != vocab.pad_id).long(), **theirs_feeds)
    checks = []
    for name, attr in outputs.items():
        a, b = ours[name].float(), getattr(expected, attr).float()
        if a.dim() == 3:
            a, b = a[keep], b[keep]
        checks.append(Check(f"{name} = {architecture}.{attr}", float((a - b).abs().max()), tolerance))
    return checks
