"""Greedy transcription with a Whisper-style decoder (``tfspec.spec.audio``): the decoder prompt and
the suppressed tokens a checkpoint's ``generation_config.json`` asks for, over any
``tfspec.search.Decoder`` (the PyTorch backend's or onnxruntime's step graphs).

The prompt is ``decoder_start_token_id`` (<|startoftranscript|>, the spec's bos_id) followed by
``forced_decoder_ids`` (positions 1, 2, ... of the output: the language, the task, and
<|notimestamps|>), as transformers' ``generate`` forces them. ``suppress_tokens`` are never chosen
and ``begin_suppress_tokens`` not as the first token after the prompt (transformers'
SuppressTokens and SuppressTokensAtBegin processors): greedy search then takes the likeliest token
that is not suppressed. Settings that change what is chosen otherwise (timestamps' rules, a
language to detect, temperature fallback) are refused by name.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tfspec.errors import TfspecError
from tfspec.untrusted import json_object
from tfspec.search import SearchOptions, search

REFUSED = {"return_timestamps": "timestamp tokens follow rules of their own (WhisperTimeStampLogitsProcessor)",
           "prompt_ids": "a previous-text prompt", "num_beams": "beam search (tfspec transcribes greedily)",
           "do_sample": "sampling (tfspec transcribes greedily)"}
"""generation_config.json keys whose other values would choose otherwise -> what they do."""
GREEDY = {"return_timestamps": (None, False), "prompt_ids": (None,), "num_beams": (None, 1), "do_sample": (None, False)}


@dataclass(frozen=True)
class Prompt:
    """What decoding starts from and must not choose."""

    tokens: tuple[int, ...]
    """decoder_start_token_id, then the forced ids in their order."""
    suppress: tuple[int, ...] = ()
    begin_suppress: tuple[int, ...] = ()

    @classmethod
    def read(cls, directory: str | Path, start: int) -> Prompt:
        """The prompt of a model directory's ``generation_config.json`` (absent: ``start`` alone)."""
        path = Path(directory) / "generation_config.json"
        if not path.is_file():
            return cls((start,))
        config = json_object(path, "generation settings")
        for key, allowed in GREEDY.items():
            if config.get(key) not in allowed:
                raise TfspecError(f"{path}: {key}: {json.dumps(config[key])} is not supported; tfspec transcribes "
                                  f"without {REFUSED[key]}")
        forced = sorted(config.get("forced_decoder_ids") or [])
        if [index for index, _ in forced] != list(range(1, len(forced) + 1)):
            raise TfspecError(f"{path}: forced_decoder_ids: {json.dumps(forced)} is not supported; tfspec forces the "
                              "tokens right after decoder_start_token_id (indices 1, 2, ...)")
        first = config.get("decoder_start_token_id", start)
        return cls((first, *(token for _, token in forced)), tuple(config.get("suppress_tokens") or ()),
                   tuple(config.get("begin_suppress_tokens") or ()))


class Suppressing:
    """``decoder`` whose steps never offer ``prompt.suppress`` and, at the first step after the
    prompt, ``prompt.begin_suppress``: each step asks for as many more candidates as it drops,
    so the likeliest left is the likeliest allowed (greedy search reads only the order)."""

    def __init__(self, decoder, prompt: Prompt):
        self.decoder, self.prompt, self.steps = decoder, prompt, 0
        self.always = np.array(prompt.suppress, np.int64)
        self.first = np.array(sorted({*prompt.suppress, *prompt.begin_suppress}), np.int64)

    def __getattr__(self, name):
        return getattr(self.decoder, name)

    def step(self, state, tokens: np.ndarray, k: int):
        banned = self.first if self.steps == 0 else self.always
        self.steps += 1
        values, ids, state = self.decoder.step(state, tokens, k + len(banned))
        order = np.argsort(np.isin(ids, banned), axis=1, kind="stable")[:, :k]  # allowed first, in their order
        return np.take_along_axis(values, order, 1), np.take_along_axis(ids, order, 1), state


def transcribe(decoder, features: np.ndarray, prompt: Prompt, max_new: int) -> list[list[int]]:
    """Greedy output ids (after the prompt, without the end token) of each row of ``features``
    (B, mels, frames) float32, at most ``max_new`` per row."""
    prefix = np.tile(np.array(prompt.tokens, np.int64), (len(features), 1))  # (B, prompt)
    options = SearchOptions(beam=1, max_extra=max_new, max_length=max_new)
    return search(Suppressing(decoder, prompt), features.astype(np.float32), options, prefix)
