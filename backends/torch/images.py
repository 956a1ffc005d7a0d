"""Image Transformer models in PyTorch: images as training sequences, bits per dimension,
and autoregressive sampling with the KV cache (Parmar et al. 2018, §3-5).

Tokens: intensities are ids 0 .. levels - 1 in raster order (row, column, channel). Every
sequence starts with one prefix token: ``bos`` for an unconditional image, or, for labelled
data, the class token ``bos + 1 + k`` of class k. A labelled training image appears twice per
epoch, once after its class token and once after ``bos``, so one model learns both p(x | k)
and p(x) and samples either way. The model's distribution over an intensity is the softmax
of its first ``levels`` logits: the other tokens (prefixes, padding) are never a pixel.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from tfspec.errors import TfspecError

from .model import DecodeState, TorchModel
from .training.batches import Pairs


def prefix_ids(spec, labels: np.ndarray | None, classes: int, count: int | None = None) -> np.ndarray:
    """The prefix token of each image: its class token, or bos where ``labels`` is None."""
    bos = spec.vocab.bos_id
    if labels is None:
        return np.full(count, bos, dtype=np.int64)
    if bos + classes >= spec.vocab.size:
        raise TfspecError(f"vocab.size ({spec.vocab.size}) leaves no room for {classes} class tokens after bos "
                          f"({bos}): use vocab.size {bos + 1 + classes} (class k is token {bos} + 1 + k)")
    return bos + 1 + np.asarray(labels, dtype=np.int64)


def check_image(spec, manifest: dict) -> None:
    """The spec's ``image`` must describe the data's images exactly."""
    data = {key: manifest[key] for key in ("height", "width", "channels", "levels")}
    if spec.family != "decoder-only" or spec.image is None:
        raise TfspecError(f"{spec.name}: image data trains a decoder-only spec with image: {data}")
    ours = {key: getattr(spec.image, key) for key in data}
    if ours != data:
        raise TfspecError(f"{spec.name}: image {ours} does not match the data's {data}; set image: {data}")


def image_pairs(spec, pixels: np.ndarray, labels: np.ndarray | None, classes: int) -> Pairs:
    """Training sequences [prefix, x_0 .. x_{n-1}] (the trainer feeds all but the last token
    and scores all but the first): labelled images once per class token and once after bos."""
    flat = pixels.reshape(len(pixels), -1).astype(np.int32)
    prefixes = [prefix_ids(spec, None, classes, len(flat))]
    if labels is not None:
        prefixes.insert(0, prefix_ids(spec, labels, classes))
    tgt = [np.concatenate([[p], row]).astype(np.int32) for prefix in prefixes for p, row in zip(prefix, flat)]
    return Pairs([np.zeros(0, dtype=np.int32)] * len(tgt), tgt)


def intensity_log_probs(model: TorchModel, pixels: torch.Tensor, prefix: torch.Tensor) -> torch.Tensor:
    """log p(x_i = v | prefix, x_<i) for every position i and level v: (B, n, levels),
    from one causal pass over [prefix, x_0 .. x_{n-2}]."""
    levels = model.graph.spec.image.levels
    inputs = torch.cat([prefix[:, None], pixels[:, :-1]], 1)  # (B, n)
    return torch.log_softmax(model(inputs)[..., :levels].float(), -1)


@torch.inference_mode()
def bits_per_dim(model: TorchModel, pixels: np.ndarray, prefix: np.ndarray, batch: int = 32,
                 progress=lambda n: None) -> float:
    """Negative log2-likelihood per intensity of ``pixels`` (N, H, W, C) under the model."""
    model.eval()
    device = next(model.parameters()).device
    flat = torch.from_numpy(pixels.reshape(len(pixels), -1).astype(np.int64))
    prefix = torch.from_numpy(prefix)
    nats = 0.0
    for start in range(0, len(flat), batch):
        x, p = flat[start:start + batch].to(device), prefix[start:start + batch].to(device)
        nats -= intensity_log_probs(model, x, p).gather(-1, x[..., None]).sum().item()
        progress(len(x))
    return nats / flat.numel() / math.log(2)


@torch.inference_mode()
def sample_images(model: TorchModel, prefix: np.ndarray, temperature: float = 1.0, seed: int = 0,
                  progress=lambda n: None) -> np.ndarray:
    """Draw one image per prefix token, intensity by intensity, each step feeding only the new
    token to the KV-cached model: (N, H, W, C) int64. Temperature 0 takes the most likely level."""
    model.eval()
    image = model.graph.spec.image
    device = next(model.parameters()).device
    generator = torch.Generator(device).manual_seed(seed)
    state, token = DecodeState(), torch.from_numpy(prefix).to(device)[:, None]
    out = torch.empty(len(prefix), image.positions, dtype=torch.int64, device=device)
    for i in range(image.positions):
        logits = model.run({"tgt": token}, state=state)["logits"][:, -1, :image.levels].float()
        if temperature == 0:
            token = logits.argmax(-1, keepdim=True)
        else:
            token = torch.multinomial(torch.softmax(logits / temperature, -1), 1, generator=generator)
        out[:, i] = token[:, 0]
        progress(1)
    return out.reshape(len(prefix), image.height, image.width, image.channels).cpu().numpy()
