"""The PyTorch backend as a ``tfspec.search.Decoder``: KV-cached decoding steps."""

from __future__ import annotations

import numpy as np
import torch

from tfspec.padding import implied_mask

from .model import DecodeState, TorchModel


class TorchDecoder:
    """Runs ``TorchModel`` one step at a time for ``tfspec.search``, on the model's device."""

    def __init__(self, model: TorchModel):
        self.model = model.eval()
        vocab = model.graph.spec.vocab
        self.bos, self.eos, self.pad = vocab.bos_id, vocab.eos_id, vocab.pad_id
        self.eos_ids = vocab.stop_ids
        self.positions = model.graph.spec.positional
        """What bounds a search's length (``Positional.room``)."""
        self.normalised = model.graph.spec.outputs_log_probs
        """The model's rows are log-probabilities already (a softmax mixture): no log-softmax."""
        self.device = next(model.parameters()).device

    @torch.inference_mode()
    def start(self, src: np.ndarray | None, mask: np.ndarray | None = None) -> DecodeState:
        """Encode ``src`` (B, S); ``mask`` (B, S) true at real tokens (default: ``implied_mask``); a
        float ``src`` is a spectrogram's features (B, mels, frames) or images' pixel values (B, C, H, W)."""
        if src is None:
            return DecodeState()
        if src.dtype.kind == "f":  # features (Whisper) or pixels (TrOCR): no padding
            port = "pixel_values" if "pixel_values" in self.model.graph.ports else "input_features"
            features = torch.from_numpy(src).to(self.device)
            return DecodeState(memory=self.model.run({port: features}, ("memory",))["memory"])
        keep = torch.from_numpy(implied_mask(src, self.pad) if mask is None else np.asarray(mask, bool))
        src, keep = torch.from_numpy(src).to(self.device), keep.to(self.device)
        memory = self.model.run({"src": src, "src_mask": keep}, ("memory",))["memory"]
        return DecodeState(memory=memory, src_padding=None if bool(keep.all()) else ~keep)

    @property
    def takes_masks(self) -> bool:
        """``step`` takes a prompt batch's mask (``tfspec.search.search``'s ``prefix_mask``)
        where masks alone hide padding (``Graph.masks_padding``)."""
        return self.model.graph.masks_padding("decoder")

    @torch.inference_mode()
    def step(self, state: DecodeState, tokens: np.ndarray, k: int, mask: np.ndarray | None = None):
        feeds = {"tgt": torch.from_numpy(tokens).to(self.device)}
        if mask is not None:  # a left-padded batch of prompts: padding as the mask says
            feeds["tgt_mask"] = torch.from_numpy(mask).to(self.device)
        logits = self.model.run(feeds, state=state)["logits"]
        last = logits[:, -1].float()
        values, ids = (last if self.normalised else torch.log_softmax(last, -1)).topk(min(k, logits.shape[-1]))
        return values.cpu().numpy(), ids.cpu().numpy(), state

    def select(self, state: DecodeState, rows: np.ndarray, cross: bool) -> DecodeState:
        return state.select(torch.from_numpy(rows).to(self.device), cross)
