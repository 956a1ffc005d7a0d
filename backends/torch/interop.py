"""Checking an exported Hugging Face checkpoint against the PyTorch backend.

``tfspec export --format hf`` loads what it wrote with transformers (when installed) and runs
both models on the same random, right-padded batch (an encoder-decoder: as its source, with
random targets from the start token): the outputs the family names (logits, or BERT's hidden
states and pooled output) must agree at every non-padded position.
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
    if spec.dual is not None:  # a dual encoder (CLIP, SigLIP): the padded texts against two images
        patches = spec.dual.vision.patches
        pixels = torch.randn(2, patches.channels, patches.image_size, patches.image_size, generator=gen)
        ours = model.eval().run({"src": tokens, "src_mask": keep.long(), "pixel_values": pixels}, tuple(outputs))
        expected = theirs(input_ids=tokens, attention_mask=keep.long(), pixel_values=pixels)
    elif "pixel_values" in model.graph.ports:  # an image model: random pixels of its training size
        patches = spec.patches
        pixels = torch.randn(3, patches.channels, patches.image_size, patches.image_size, generator=gen)
        ours = model.eval().run({"pixel_values": pixels}, tuple(outputs))
        expected = theirs(pixel_values=pixels)
        keep = torch.ones(3, patches.prefix + patches.grid ** 2, dtype=torch.bool)
    elif "input_features" in model.graph.ports:  # a spectrogram encoder-decoder (Whisper): random features, targets
        audio = spec.spectrogram
        features = torch.randn(*audio.shape(3, audio.frames), generator=gen)
        target = torch.randint(0, vocab.tgt_size, (3, length), generator=gen)
        target[target == vocab.pad_id] = (vocab.pad_id + 1) % vocab.tgt_size
        target[:, 0] = vocab.bos_id
        ours = model.eval().run({"input_features": features, "tgt": target}, tuple(outputs))
        expected = theirs(input_features=features, decoder_input_ids=target)
        keep = torch.ones(3, length if "logits" in outputs else audio.positions, dtype=torch.bool)
    elif "src" in model.graph.ports and "tgt" in model.graph.ports:  # encoder-decoder: a padded source, targets
        target = torch.randint(0, vocab.tgt_size, (3, length), generator=gen)
        target[target == vocab.pad_id] = (vocab.pad_id + 1) % vocab.tgt_size
        target[:, 0] = vocab.bos_id
        ours = model.eval().run({"src": tokens, "tgt": target}, tuple(outputs))
        expected = theirs(input_ids=tokens, attention_mask=keep.long(), decoder_input_ids=target)
        keep = torch.ones_like(target, dtype=torch.bool)
    else:
        port = "src" if "src" in model.graph.ports else "tgt"
        ours = model.eval().run({port: tokens}, tuple(outputs))
        expected = theirs(input_ids=tokens, attention_mask=keep.long())
    checks = []
    for name, attr in outputs.items():  # attr: an output, or several stacked last (start and end logits)
        parts = (attr,) if isinstance(attr, str) else attr
        theirs_parts = [getattr(expected, part).float() for part in parts]
        a, b = ours[name].float(), torch.stack(theirs_parts, -1) if len(parts) > 1 else theirs_parts[0]
        if a.dim() == 3:
            a, b = a[keep], b[keep]
        checks.append(Check(f"{name} = {architecture}.{' + '.join(parts)}", float((a - b).abs().max()), tolerance))
    return checks
