"""Speech -> log-mel features as Whisper reads them: transformers' ``WhisperFeatureExtractor``
(Radford et al. 2022, "Robust Speech Recognition via Large-Scale Weak Supervision", §2.2), in
numpy, with the WAV reading and resampling that come before it.

The steps, in the extractor's order: 16 kHz mono samples padded with zeros (or cut) to
``chunk_length`` seconds (30 s: 480,000 samples); a short-time Fourier transform with a periodic
Hann window of ``n_fft`` (400) samples every ``hop_length`` (160: 10 ms), the signal
reflect-padded by n_fft / 2 at both ends (``torch.stft(center=True)``), the last frame dropped
(3000 frames); the power spectrum through Slaney's mel filter bank (``mel_filters``); log10
floored at 1e-10; clamped to at least the maximum minus 8 (80 dB below the loudest bin); then
(x + 4) / 4. Dithering (random noise) is refused: no two runs would agree.
"""

from __future__ import annotations

import math
import wave
from dataclasses import dataclass, fields
from pathlib import Path
from typing import BinaryIO

import numpy as np

from tfspec.errors import TfspecError
from tfspec.untrusted import json_object

PREPROCESSOR = "preprocessor_config.json"
BOOKKEEPING = {"feature_extractor_type", "processor_class", "return_attention_mask", "padding_side",
               "padding_value", "nb_max_frames", "n_samples"}
"""Keys that change nothing here (padding_value: 0.0 is checked; the last two follow from the rest)."""


@dataclass(frozen=True)
class FrontEnd:
    """``WhisperFeatureExtractor``'s settings (its defaults: whisper-tiny to large-v2; large-v3: 128 mels)."""

    feature_size: int = 80
    sampling_rate: int = 16000
    hop_length: int = 160
    chunk_length: int = 30
    n_fft: int = 400

    @property
    def samples(self) -> int:
        """Samples of one window of ``chunk_length`` seconds (480,000)."""
        return self.chunk_length * self.sampling_rate

    @property
    def frames(self) -> int:
        """Feature frames per window (3000): the STFT's samples // hop + 1, less the last."""
        return self.samples // self.hop_length

    @classmethod
    def read(cls, directory: str | Path) -> FrontEnd:
        """The settings of a checkpoint's ``preprocessor_config.json`` (defaults where it has none);
        a setting tfspec does not compute is refused by name."""
        path = Path(directory) / PREPROCESSOR
        if not path.is_file():
            return cls()
        config = json_object(path, "feature extractor settings")
        known = {f.name for f in fields(cls)}
        for key, value in config.items():
            if key == "dither" and value not in (0, 0.0):
                raise TfspecError(f"{path}: dither: {value} adds random noise; tfspec computes dither 0.0 only")
            if key == "padding_value" and value not in (0, 0.0):
                raise TfspecError(f"{path}: padding_value: {value}; tfspec pads with silence (0.0) only")
            if key not in known | BOOKKEEPING | {"dither"}:
                raise TfspecError(f"{path}: unknown field {key}; tfspec cannot tell whether it changes the features")
        return cls(**{k: int(v) for k, v in config.items() if k in known})


def _hz_to_mel(hz: np.ndarray) -> np.ndarray:
    """Slaney's mel scale (the Auditory Toolbox's): linear to 1 kHz (3 mels per 200 Hz), then log."""
    hz = np.asarray(hz, np.float64)
    step = math.log(6.4) / 27.0
    return np.where(hz >= 1000.0, 15.0 + np.log(np.maximum(hz, 1e-10) / 1000.0) / step, 3.0 * hz / 200.0)


def _mel_to_hz(mel: np.ndarray) -> np.ndarray:
    step = math.log(6.4) / 27.0
    return np.where(mel >= 15.0, 1000.0 * np.exp(step * (mel - 15.0)), 200.0 * mel / 3.0)


def mel_filters(front: FrontEnd, max_hz: float = 8000.0) -> np.ndarray:
    """(n_fft / 2 + 1, feature_size) triangular filters spaced evenly in Slaney's mels from 0 Hz to
    ``max_hz``, each scaled by 2 / its width in Hz (Slaney's area normalisation), as
    ``transformers.audio_utils.mel_filter_bank(norm="slaney", mel_scale="slaney")``."""
    bins = np.linspace(0.0, front.sampling_rate // 2, 1 + front.n_fft // 2)  # the FFT bins' frequencies
    edges = _mel_to_hz(np.linspace(_hz_to_mel(0.0), _hz_to_mel(max_hz), front.feature_size + 2))
    widths = np.diff(edges)
    slopes = edges[None, :] - bins[:, None]  # (bins, filters + 2)
    down, up = -slopes[:, :-2] / widths[:-1], slopes[:, 2:] / widths[1:]
    filters = np.maximum(0.0, np.minimum(down, up))
    return filters * (2.0 / (edges[2:] - edges[:-2]))[None, :]


def log_mel(samples: np.ndarray, front: FrontEnd = FrontEnd()) -> np.ndarray:
    """float32 (feature_size, frames) features of one recording of 16 kHz ``samples`` in [-1, 1]
    (the module docstring's steps), padded or cut to ``front.chunk_length`` seconds."""
    x = np.zeros(front.samples, np.float64)
    x[:min(len(samples), front.samples)] = np.asarray(samples, np.float64)[:front.samples]
    n, hop = front.n_fft, front.hop_length
    padded = np.pad(x, n // 2, mode="reflect")
    count = 1 + (len(padded) - n) // hop
    frames = np.lib.stride_tricks.as_strided(padded, (count, n), (padded.strides[0] * hop, padded.strides[0]))
    window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n) / n)  # periodic Hann (torch.hann_window)
    power = np.abs(np.fft.rfft(frames * window, axis=1)) ** 2  # (frames + 1, n / 2 + 1)
    mel = (power @ mel_filters(front)).T[:, :-1]  # (feature_size, frames): the last frame dropped
    log_spec = np.log10(np.maximum(mel, 1e-10))
    log_spec = np.maximum(log_spec, log_spec.max() - 8.0)
    return ((log_spec + 4.0) / 4.0).astype(np.float32)


def resample(samples: np.ndarray, rate: int, target: int) -> np.ndarray:
    """``samples`` at ``rate`` Hz resampled to ``target`` Hz by polyphase filtering: upsample by
    up, low-pass, keep every down-th sample (up / down = target / rate in lowest terms) with a
    Kaiser-windowed sinc (beta 5, cut-off at the lower Nyquist rate, 10 zero crossings each side
    per unit of the larger factor): the filter and alignment of ``scipy.signal.resample_poly``."""
    if rate == target:
        return np.asarray(samples, np.float64)
    g = math.gcd(rate, target)
    up, down = target // g, rate // g
    wide = max(up, down)
    half = 10 * wide
    taps = np.arange(2 * half + 1) - half
    h = np.sinc(taps / wide) / wide * np.kaiser(2 * half + 1, 5.0)  # a low-pass at 1 / wide of Nyquist
    h = h / h.sum() * up  # unit gain at 0 Hz, times up for the zeros upsampling puts in
    pre = down - half % down  # zeros before the filter, so that output 0 sits at input 0
    h = np.concatenate([np.zeros(pre), h])
    skip = (half + pre) // down
    out = len(samples) * up // down + bool(len(samples) * up % down)
    t = (np.arange(out) + skip) * down  # each output's index in the upsampled signal
    k = t[:, None] // up - np.arange(math.ceil(len(h) / up) + 1)[None, :]  # the inputs its taps reach
    tap = t[:, None] - k * up
    valid = (k >= 0) & (k < len(samples)) & (tap < len(h))
    x = np.asarray(samples, np.float64)
    return np.where(valid, x[np.clip(k, 0, len(x) - 1)] * h[np.clip(tap, 0, len(h) - 1)], 0.0).sum(1)


def read_wav(path: str | Path | BinaryIO, rate: int = 16000) -> np.ndarray:
    """float64 samples in [-1, 1] of a PCM WAV file (8, 16 or 32 bits), its channels averaged
    (as ffmpeg's ``-ac 1`` in transformers' pipeline), resampled to ``rate`` Hz (``resample``).
    ``path`` may be a binary file object (an upload: errors name its ``name``)."""
    label = getattr(path, "name", path)
    try:
        with wave.open(path if hasattr(path, "read") else str(path), "rb") as f:
            width, channels, source = f.getsampwidth(), f.getnchannels(), f.getframerate()
            data = f.readframes(f.getnframes())
    except (wave.Error, EOFError) as e:
        raise TfspecError(f"{label}: not a PCM WAV file ({e})") from None
    if width not in (1, 2, 4):
        raise TfspecError(f"{label}: {8 * width}-bit samples; tfspec reads 8-, 16- and 32-bit PCM WAV")
    data = data[:len(data) // (width * channels) * width * channels]  # a file cut short: its whole frames
    if width == 1:  # unsigned, centred at 128
        x = (np.frombuffer(data, np.uint8).astype(np.float64) - 128.0) / 128.0
    else:
        x = np.frombuffer(data, f"<i{width}").astype(np.float64) / float(2 ** (8 * width - 1))
    x = x.reshape(-1, channels).mean(1)  # (samples,)
    return resample(x, source, rate)


def write_wav(path: str | Path, samples: np.ndarray, rate: int = 16000) -> None:
    """16-bit mono PCM of ``samples`` in [-1, 1] (clipped), rounded to the nearest step."""
    pcm = np.clip(np.round(np.asarray(samples) * 32768.0), -32768, 32767).astype("<i2")
    with wave.open(str(path), "wb") as f:
        f.setnchannels(1)
        f.setsampwidth(2)
        f.setframerate(rate)
        f.writeframes(pcm.tobytes())
