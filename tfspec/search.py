"""Greedy and beam search over any backend that can take one decoding step.

A backend provides a ``Decoder``: ``start`` encodes a batch of sources, ``step`` feeds new
target tokens and returns the k most likely next tokens with their log-probabilities, and
``select`` keeps or reorders rows of the decoding state. The search itself is numpy only, so
the PyTorch and ONNX Runtime backends run exactly the same algorithm and can be compared
token for token.

Beam search follows §6.1 of the paper (beam 4, length penalty alpha = 0.6, maximum output
length = input length + 50) with the GNMT length penalty ((5 + |Y|) / 6)^alpha (Wu et al.
2016). A sentence stops once it has ``beam`` finished hypotheses (fairseq's early stop).
With ``sampling``, greedy search draws each token instead (temperature, top-k, top-p).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np


class Decoder(Protocol):
    bos: int
    eos: int
    pad: int

    def start(self, src: np.ndarray | None) -> Any:
        """Encode int64 ``src`` (B, S) (None for decoder-only models): the initial state."""

    def step(self, state: Any, tokens: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, Any]:
        """Feed ``tokens`` (B, L) after what ``state`` has seen; return the top-``k``
        log-probabilities (B, k) and token ids (B, k) of the next position, and the state."""

    def select(self, state: Any, rows: np.ndarray, cross: bool) -> Any:
        """The state of ``rows``; ``cross=False`` promises rows only move among copies of the
        same source, so per-source entries (cross-attention keys/values) need no copy."""


@dataclass(frozen=True)
class Sampling:
    """Draw each next token from the model's distribution instead of taking the likeliest
    (transformers' ``do_sample``), reshaped as transformers orders its warpers: divided by
    ``temperature``, cut to the ``top_k`` likeliest, then to the fewest whose probabilities
    sum to ``top_p`` (nucleus sampling, Holtzman et al. 2020)."""

    temperature: float = 1.0
    top_k: int = 0
    """0: no cut."""
    top_p: float = 1.0
    seed: int = 0
    """numpy's generator: the same seed gives the same tokens (not transformers' tokens)."""


@dataclass(frozen=True)
class SearchOptions:
    beam: int = 4
    """Hypotheses kept per sentence; 1 is greedy search."""
    alpha: float = 0.6
    """GNMT length penalty exponent (§6.1); 0 ranks by raw log-probability."""
    max_extra: int = 50
    """Output length limit = source length + this (§6.1)."""
    min_length: int = 0
    """End-of-sentence is forbidden before this many tokens (benchmarks force equal work)."""
    max_length: int | None = None
    """An absolute cap on output tokens (the model's position limit, or decoder-only output)."""
    sampling: Sampling | None = None
    """With beam 1: draw tokens instead of taking the likeliest."""


def length_penalty(length: int, alpha: float) -> float:
    return ((5 + length) / 6) ** alpha


def search(decoder: Decoder, src: np.ndarray | None, options: SearchOptions,
           prefix: np.ndarray | None = None) -> list[list[int]]:
    """Decode each row of ``src`` (B, S, right-padded with ``decoder.pad``), or continue each
    row of ``prefix`` for decoder-only models; return the output token ids without BOS/EOS."""
    if prefix is None:
        prefix = np.full((len(src), 1), decoder.bos, dtype=np.int64)
    limits = _limits(decoder, src, prefix, options)
    state = decoder.start(src)
    if src is None:  # decoder-only: one empty state, copied per row
        state = decoder.select(state, np.zeros(len(prefix), dtype=np.int64), cross=True)
    if options.beam == 1:
        pick = _Picker(options.sampling) if options.sampling is not None else None
        return _greedy(decoder, state, prefix, limits, options.min_length, pick)
    return _beam(decoder, state, prefix, limits, options)


def _limits(decoder, src, prefix, options) -> np.ndarray:
    """Maximum output tokens per sentence."""
    if src is not None:
        limits = (src != decoder.pad).sum(1) + options.max_extra
    else:
        limits = np.full(len(prefix), options.max_extra)
    if options.max_length is not None:
        limits = np.minimum(limits, options.max_length)
    return np.maximum(limits, max(options.min_length, 1))


def _banned(decoder, t: int, min_length: int) -> list[int]:
    """Tokens step ``t`` may not choose: eos before ``min_length``, and the padding token when
    decoding starts from it (Marian, T5: it is never a word; Marian's configurations forbid it
    with bad_words_ids, its embedding being a row added at conversion)."""
    banned = [decoder.eos] if t < min_length else []
    return banned + [decoder.pad] if decoder.bos == decoder.pad != decoder.eos else banned


def _greedy(decoder, state, prefix, limits, min_length, pick=None) -> list[list[int]]:
    """The likeliest token at each step, or the one ``pick`` draws."""
    batch = len(prefix)
    out: list[list[int]] = [[] for _ in range(batch)]
    alive, tokens = np.arange(batch), prefix
    for t in range(int(limits.max())):
        banned = _banned(decoder, t, min_length)
        values, ids, state = decoder.step(state, tokens, (1 if pick is None else pick.k) + len(banned))
        if pick is None:
            best = ids[np.arange(len(ids)), np.argmax(~np.isin(ids, banned), axis=1)]
        else:
            best = pick(np.where(np.isin(ids, banned), -np.inf, values), ids)
        ended = best == decoder.eos
        for row, token, end in zip(alive, best, ended):
            if not end:
                out[row].append(int(token))
        ended |= t + 1 >= limits[alive]
        if ended.any():
            keep = np.flatnonzero(~ended)
            if not keep.size:
                break
            state = decoder.select(state, keep, cross=True)
            alive, best = alive[keep], best[keep]
        tokens = best[:, None]
    return out


class _Picker:
    """Draws one token per row from top-k log-probabilities (``Sampling``)."""

    def __init__(self, sampling: Sampling):
        self.sampling, self.rng = sampling, np.random.default_rng(sampling.seed)
        self.k = sampling.top_k or np.iinfo(np.int32).max  # no cut: the whole vocabulary (decoders clamp k)

    def __call__(self, log_probs: np.ndarray, ids: np.ndarray) -> np.ndarray:
        """log_probs, ids: (B, k) sorted by decoders, best first; banned ones at -inf."""
        order = np.argsort(-log_probs, axis=1, kind="stable")[:, : self.sampling.top_k or None]
        log_probs, ids = np.take_along_axis(log_probs, order, 1), np.take_along_axis(ids, order, 1)
        scaled = log_probs / self.sampling.temperature  # softmax(logits / T): the shift of log_softmax cancels
        probs = np.exp(scaled - scaled[:, :1])
        probs /= probs.sum(1, keepdims=True)
        if self.sampling.top_p < 1.0:  # keep a token while the likelier ones sum to less than top_p
            probs *= (np.cumsum(probs, 1) - probs) < self.sampling.top_p
            probs /= probs.sum(1, keepdims=True)
        drawn = (np.cumsum(probs, 1) < self.rng.random((len(probs), 1))).sum(1)
        return ids[np.arange(len(ids)), np.minimum(drawn, (probs > 0).sum(1) - 1)]


def _beam(decoder, state, prefix, limits, options) -> list[list[int]]:
    batch, k, alpha = len(prefix), options.beam, options.alpha
    state = decoder.select(state, np.repeat(np.arange(batch), k), cross=True)
    tokens = np.repeat(prefix, k, axis=0)
    scores = np.tile(np.array([0.0] + [-np.inf] * (k - 1)), batch)  # only the first copy starts
    hyps = np.zeros((batch * k, 0), dtype=np.int64)
    finished: list[list[tuple[float, list[int]]]] = [[] for _ in range(batch)]
    alive = np.arange(batch)
    for t in range(int(limits.max())):
        banned = _banned(decoder, t, options.min_length)
        width = 2 * k + len(banned)  # 2k candidates per row always leave k that do not end
        values, ids, state = decoder.step(state, tokens, width)
        width = values.shape[1]  # fewer when the vocabulary is smaller
        if banned:
            values = np.where(np.isin(ids, banned), -np.inf, values)
        n = len(alive)
        candidates = (scores[:, None] + values).reshape(n, k * width)
        order = np.argsort(-candidates, axis=1, kind="stable")[:, : 2 * k]
        rows, next_tokens, next_scores, keep = [], [], [], []
        for i, sentence in enumerate(alive):
            chosen = []
            for j in order[i]:
                score = candidates[i, j]
                if score == -np.inf or len(chosen) == k:
                    break
                row, token = i * k + j // width, int(ids[i * k + j // width, j % width])
                if token == decoder.eos:
                    finished[sentence].append((score / length_penalty(t + 1, alpha), hyps[row].tolist()))
                else:
                    chosen.append((row, token, score))
            if t + 1 >= limits[sentence]:  # out of length: the survivors end here
                finished[sentence] += [(s / length_penalty(t + 1, alpha), hyps[r].tolist() + [tok])
                                       for r, tok, s in chosen]
            if len(finished[sentence]) >= k or t + 1 >= limits[sentence] or not chosen:
                continue
            chosen += [chosen[-1][:2] + (-np.inf,)] * (k - len(chosen))  # dead fillers keep the shape
            keep.append(i)
            for row, token, score in chosen:
                rows.append(row), next_tokens.append(token), next_scores.append(score)
        if not keep:
            break
        rows = np.array(rows)
        state = decoder.select(state, rows, cross=len(keep) < n)
        hyps = np.concatenate([hyps[rows], np.array(next_tokens)[:, None]], axis=1)
        scores, tokens, alive = np.array(next_scores), np.array(next_tokens)[:, None], alive[keep]
    return [max(f, key=lambda h: h[0])[1] if f else [] for f in finished]
