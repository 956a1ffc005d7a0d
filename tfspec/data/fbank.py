"""Speech -> Kaldi-style log mel filterbank frames as Speech2Text reads them: transformers'
``Speech2TextFeatureExtractor`` on its numpy path (the one it takes without torchaudio), in numpy,
with utterance-level cepstral mean and variance normalisation (Wang et al. 2020, "fairseq S2T", §3).

The steps, in the extractor's order: 16 kHz mono samples in float32, times 2^15 (Kaldi reads
16-bit integers); frames of 400 samples (25 ms) every 160 (10 ms), none padded (``center=False``:
1 + (N - 400) // 160 frames); per frame its mean removed (``remove_dc_offset``), pre-emphasis
x[t] - 0.97 x[t - 1] (the first sample times 0.03), Povey's window (a Hann window to the power
0.85, not periodic), zero-padded to 512 samples for the FFT, the spectrum kept in complex64 as the
extractor keeps it; the power spectrum through ``num_mel_bins`` triangles on Kaldi's mel scale
1127 ln(1 + f / 700) from 20 Hz to the Nyquist rate, triangular in mels (``kaldi_filters``);
floored at float32's epsilon, natural log, float32; then per mel, over the utterance's frames, the
mean subtracted and the result divided by its standard deviation (``do_ceptral_normalize``).
Dithering (random noise) is refused: no two runs would agree.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np

from tfspec.data.audio import PREPROCESSOR
from tfspec.errors import TfspecError
from tfspec.untrusted import json_object

FRAME, HOP, FFT, PREEMPHASIS = 400, 160, 512, 0.97
"""Kaldi's defaults, which the extractor fixes: 25 ms frames every 10 ms at 16 kHz."""
MEL_FLOOR = 1.192092955078125e-07
"""float32's epsilon: the least mel energy before the log."""
BOOKKEEPING = {"feature_extractor_type", "processor_class", "return_attention_mask", "padding_side",
               "padding_value", "feature_size"}
"""Keys that change nothing for one utterance, unpadded (padding_value fills padding in batches)."""


@dataclass(frozen=True)
class FilterBank:
    """``Speech2TextFeatureExtractor``'s settings (its defaults: every published s2t checkpoint)."""

    num_mel_bins: int = 80
    sampling_rate: int = 16000
    do_ceptral_normalize: bool = True
    normalize_means: bool = True
    normalize_vars: bool = True

    @classmethod
    def read(cls, directory: str | Path) -> FilterBank:
        """The settings of a checkpoint's ``preprocessor_config.json`` (defaults where it has none);
        a setting tfspec does not compute is refused by name."""
        path = Path(directory) / PREPROCESSOR
        if not path.is_file():
            return cls()
        config = json_object(path, "feature extractor settings")
        known = {f.name: f.type for f in fields(cls)}
        for key, value in config.items():
            if key == "dither" and value not in (0, 0.0):
                raise TfspecError(f"{path}: dither: {value} adds random noise; tfspec computes dither 0.0 only")
            if key not in known.keys() | BOOKKEEPING | {"dither"}:
                raise TfspecError(f"{path}: unknown field {key}; tfspec cannot tell whether it changes the features")
            flag = known.get(key) == "bool"
            if key in known and (isinstance(value, bool) != flag or not isinstance(value, int)):
                raise TfspecError(f"{path}: {key} must be {'true or false' if flag else 'a whole number'}, got "
                                  f"{value!r}")
        return cls(**{k: v for k, v in config.items() if k in known})


def _mel(hz):
    """Kaldi's mel scale."""
    return 1127.0 * np.log(1.0 + np.asarray(hz, np.float64) / 700.0)


def kaldi_filters(bank: FilterBank) -> np.ndarray:
    """(FFT / 2 + 1, num_mel_bins) triangles evenly spaced in Kaldi's mels from 20 Hz to the Nyquist
    rate, each bin weighted by its distance in mels to the triangle's edges, unnormalised, as
    ``transformers.audio_utils.mel_filter_bank(mel_scale="kaldi", triangularize_in_mel_space=True)``."""
    edges = np.linspace(_mel(20.0), _mel(bank.sampling_rate // 2), bank.num_mel_bins + 2)
    bins = _mel(bank.sampling_rate / FFT * np.arange(FFT // 2 + 1))  # each FFT bin's frequency, in mels
    slopes = edges[None, :] - bins[:, None]  # (bins, filters + 2)
    widths = np.diff(edges)
    return np.maximum(0.0, np.minimum(-slopes[:, :-2] / widths[:-1], slopes[:, 2:] / widths[1:]))


def log_filterbank(samples: np.ndarray, bank: FilterBank = FilterBank()) -> np.ndarray:
    """float32 (frames, num_mel_bins) log mel energies of ``samples`` (the module docstring's
    steps up to the log), before normalisation."""
    x = (np.asarray(samples, np.float32) * np.float32(2 ** 15)).astype(np.float64)
    count = 1 + (len(x) - FRAME) // HOP
    if count < 1:
        raise TfspecError(f"{len(x)} samples: Speech2Text's features need at least {FRAME} (25 ms)")
    frames = np.lib.stride_tricks.as_strided(x, (count, FRAME), (x.strides[0] * HOP, x.strides[0])).copy()
    frames -= frames.mean(axis=1, keepdims=True)
    frames[:, 1:] -= PREEMPHASIS * frames[:, :-1]
    frames[:, 0] *= 1 - PREEMPHASIS
    window = np.hanning(FRAME) ** 0.85  # Povey's window
    spectrum = np.fft.rfft(frames * window, n=FFT, axis=1).astype(np.complex64)  # as the extractor stores it
    power = np.abs(spectrum.astype(np.complex128)) ** 2  # (frames, FFT / 2 + 1)
    energies = np.maximum(MEL_FLOOR, kaldi_filters(bank).T @ power.T)  # (mels, frames)
    return np.log(energies).astype(np.float32).T


def filterbank(samples: np.ndarray, bank: FilterBank = FilterBank()) -> np.ndarray:
    """float32 (frames, num_mel_bins) features of one utterance of 16 kHz ``samples`` in [-1, 1]: the
    log energies, normalised per mel over the utterance (utterance CMVN, in float32 as the
    extractor computes it)."""
    x = log_filterbank(samples, bank)
    if bank.do_ceptral_normalize and bank.normalize_means:
        x = x - x.mean(axis=0)
    if bank.do_ceptral_normalize and bank.normalize_vars:
        x = x / x.std(axis=0)
    return x.astype(np.float32)
