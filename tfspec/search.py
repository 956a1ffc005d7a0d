"""Greedy and beam search over any backend that can take one decoding step.

A backend provides a ``Decoder``: ``start`` encodes a batch of sources, ``step`` feeds new
target tokens and returns the k most likely next tokens with their log-probabilities, and
``select`` keeps or reorders rows of the decoding state. The search itself is numpy only, so
the PyTorch and ONNX Runtime backends run exactly the same algorithm and can be compared
token for token.

Beam search follows §6.1 of the paper (beam 4, length penalty alpha = 0.6, maximum output
length = input length + 50) with the GNMT length penalty ((5 + |Y|) / 6)^alpha (Wu et al.
2016). A sentence stops once it has ``beam`` finished hypotheses (fairseq's early stop).
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
        return _greedy(decoder, state, prefix, limits, options.min_length)
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


def _greedy(decoder, state, prefix, limits, min_length) -> list[list[int]]:
    batch = len(prefix)
    out: list[list[int]] = [[] for _ in range(batch)]
    alive, tokens = np.arange(batch), prefix
    for t in range(int(limits.max())):
        banned = _banned(decoder, t, min_length)
        _, ids, state = decoder.step(state, tokens, 1 + len(banned))
        best = ids[np.arange(len(ids)), np.argmax(~np.isin(ids, banned), axis=1)]
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
