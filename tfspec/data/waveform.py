"""Speech -> ``input_values`` as wav2vec 2.0 and HuBERT read them: transformers'
``Wav2Vec2FeatureExtractor`` in numpy (WAV reading and resampling are ``tfspec.data.audio``'s).

Each recording, 16 kHz mono float32, is padded with ``padding_value`` to the batch's longest and,
with ``do_normalize``, brought to zero mean and unit variance, (x - mean) / sqrt(var + 1e-7)
(wav2vec 2.0 §4.2 normalises the raw waveform): over its real samples when the extractor returns
an ``attention_mask`` (the ``layer`` models' extractors), its padding then set back to
``padding_value``; over the whole padded row when it does not (the ``group`` models', fed one
recording at a time, whose rows are then all real: the mask returned here is all ones).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np

from tfspec.errors import TfspecError

PREPROCESSOR = "preprocessor_config.json"
BOOKKEEPING = {"feature_extractor_type", "processor_class", "padding_side"}
"""Keys that change nothing here (padding_side: right is checked)."""
VARIANCE_EPS = 1e-7
"""Wav2Vec2FeatureExtractor's floor under the variance."""


@dataclass(frozen=True)
class Normalisation:
    """``Wav2Vec2FeatureExtractor``'s settings (its defaults)."""

    sampling_rate: int = 16000
    do_normalize: bool = True
    padding_value: float = 0.0
    return_attention_mask: bool = False

    @classmethod
    def read(cls, directory: str | Path) -> Normalisation:
        """The settings of a checkpoint's ``preprocessor_config.json`` (defaults where it has none); a
        setting tfspec does not compute is refused by name."""
        path = Path(directory) / PREPROCESSOR
        if not path.is_file():
            return cls()
        config = json.loads(path.read_text())
        known = {f.name for f in fields(cls)}
        for key, value in config.items():
            if key == "feature_size" and value != 1:
                raise TfspecError(f"{path}: feature_size: {value}; wav2vec 2.0 reads one value per sample (1)")
            if key == "padding_side" and value != "right":
                raise TfspecError(f"{path}: padding_side: {value}; the model counts real samples from the left")
            if key not in known | BOOKKEEPING | {"feature_size"}:
                raise TfspecError(f"{path}: unknown field {key}; tfspec cannot tell whether it changes the input")
        return cls(**{k: v for k, v in config.items() if k in known})

    def batch(self, recordings: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """(input_values float32 (B, samples), attention_mask int64 (B, samples)) of ``recordings``
        at ``sampling_rate``, padded to the longest (the module docstring's steps)."""
        longest = max(len(r) for r in recordings)
        values = np.full((len(recordings), longest), self.padding_value, np.float32)
        mask = np.zeros((len(recordings), longest), np.int64)
        for row, recording in enumerate(recordings):
            values[row, :len(recording)] = np.asarray(recording, np.float32)
            mask[row, :len(recording)] = 1
        if not self.return_attention_mask:
            mask[:] = 1  # the model is fed no mask: every sample, padding too, is real to it
        if self.do_normalize:
            for row, length in enumerate(mask.sum(1)):
                real = values[row, :length]
                values[row] = (values[row] - real.mean()) / np.sqrt(real.var() + VARIANCE_EPS)
                values[row, length:] = self.padding_value
        return values, mask
