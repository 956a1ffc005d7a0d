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
from pydantic import model_validator

from tfspec.errors import TfspecError
from tfspec.options import Options, number, options, whole
from tfspec.padding import implied_mask
from tfspec.spec.base import field_error
from tfspec.spec.bounds import MAX_VOCAB


class Decoder(Protocol):
    bos: int
    eos: int
    pad: int
    eos_ids: tuple[int, ...]
    """Every id that ends a hypothesis (``eos`` among them); optional, ``(eos,)`` when absent."""
    positions: Any
    """The spec's ``Positional``, whose ``room`` bounds every row's length; optional (unbounded)."""

    def start(self, src: np.ndarray | None, mask: np.ndarray | None = None) -> Any:
        """Encode int64 ``src`` (B, S) (None for decoder-only models): the initial state;
        ``mask`` (B, S) true at real tokens (``tfspec.padding``)."""

    def step(self, state: Any, tokens: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, Any]:
        """Feed ``tokens`` (B, L) after what ``state`` has seen; return the top-``k``
        log-probabilities (B, k) and token ids (B, k) of the next position, and the state."""

    def select(self, state: Any, rows: np.ndarray, cross: bool) -> Any:
        """The state of ``rows``; ``cross=False`` promises rows only move among copies of the
        same source, so per-source entries (cross-attention keys/values) need no copy."""


@options
class Sampling(Options):
    """Draw each next token from the model's distribution instead of taking the likeliest
    (transformers' ``do_sample``), reshaped as transformers orders its warpers: divided by
    ``temperature``, cut to the ``top_k`` likeliest, then to the fewest whose probabilities
    sum to ``top_p`` (nucleus sampling, Holtzman et al. 2020)."""

    temperature: number(0, 100, low_open=True) = 1.0
    """Divides the logits: below 1 sharpens the distribution, above 1 flattens it (greedy search is
    the limit at 0)."""
    top_k: whole(0, MAX_VOCAB) = 0
    """Draw from the k likeliest tokens only; 0: no cut."""
    top_p: number(0, 1, low_open=True) = 1.0
    """Draw from the fewest likeliest tokens whose probabilities sum to p; 1: no cut."""
    seed: whole(0, 2**63 - 1) = 0
    """Random seed of the draws (numpy's generator): the same seed gives the same tokens (not
    transformers' tokens)."""


@options
class SearchOptions(Options):
    beam: whole(1, 1024) = 4
    """Hypotheses kept per sentence; 1 is greedy search."""
    alpha: number(0, 10) = 0.6
    """GNMT length penalty exponent (§6.1): 0 ranks by raw log-probability, the paper's 0.6; past a
    few it only favours length."""
    max_extra: whole(0) = 50
    """Output length limit = source length + this (§6.1)."""
    min_length: whole(0) = 0
    """End-of-sentence is forbidden before this many tokens (benchmarks force equal work)."""
    max_length: whole(0) | None = None
    """An absolute cap on output tokens (the model's position limit, or decoder-only output); a
    search decodes one token at least."""
    sampling: Sampling | None = None
    """With beam 1: draw tokens instead of taking the likeliest."""

    @model_validator(mode="after")
    def _sampling_is_greedy(self):
        if self.sampling is not None and self.beam != 1:
            raise field_error("sampling", f"sampling draws one token per step: it needs beam 1, not {self.beam} "
                                          "(set beam=1, or leave sampling out for beam search)")
        return self


def length_penalty(length: int, alpha: float) -> float:
    return ((5 + length) / 6) ** alpha


def search(decoder: Decoder, src: np.ndarray | None, options: SearchOptions,
           prefix: np.ndarray | None = None, prefix_mask: np.ndarray | None = None,
           src_mask: np.ndarray | None = None) -> list[list[int]]:
    """Decode each row of ``src`` (B, S, right-padded; ``src_mask`` (B, S) true at its real
    tokens, by default ``tfspec.padding.implied_mask``), or continue each row of ``prefix`` for
    decoder-only models; return the output token ids without BOS/EOS. Prompts of different
    lengths share a batch left-padded, ``prefix_mask`` (B, L) true at their real tokens:
    padding is what the masks say, never a token id, so an input may hold the pad id as a word
    (Qwen2's <|endoftext|> is pad, bos and eos at once)."""
    if prefix is None:
        prefix = np.full((len(src), 1), decoder.bos, dtype=np.int64)
    ragged = prefix_mask is not None and not prefix_mask.all()
    if ragged and not getattr(decoder, "takes_masks", False):
        raise TfspecError(f"{type(decoder).__name__} decodes prompts of one length: give each its own batch")
    limits = output_limits(decoder, src, prefix, options, src_mask, prefix_mask)
    # told only what the pad id does not say: decoders written before masks (``start(src)``) keep working
    told = src_mask is not None and not np.array_equal(src_mask, implied_mask(src, decoder.pad))
    state = decoder.start(src, mask=src_mask) if told else decoder.start(src)
    if src is None:  # decoder-only: one empty state, copied per row
        state = decoder.select(state, np.zeros(len(prefix), dtype=np.int64), cross=True)
    if ragged:  # from here on the mask's rows follow the search's reorderings
        decoder = _Prompted(decoder, np.asarray(prefix_mask, dtype=bool))
    if options.beam == 1:
        pick = Picker(options.sampling) if options.sampling is not None else None
        return _greedy(decoder, state, prefix, limits, options.min_length, pick)
    return _beam(decoder, state, prefix, limits, options)


class _Prompted:
    """``decoder`` whose first step is told which prompt tokens are padding (``mask``), its
    rows following the search's reorderings until then; every other call passes through."""

    def __init__(self, decoder, mask: np.ndarray):
        self.decoder, self.mask = decoder, mask

    def __getattr__(self, name):
        return getattr(self.decoder, name)

    def step(self, state, tokens, k):
        mask, self.mask = self.mask, None
        return self.decoder.step(state, tokens, k) if mask is None else self.decoder.step(state, tokens, k, mask=mask)

    def select(self, state, rows, cross):
        if self.mask is not None:
            self.mask = self.mask[rows]
        return self.decoder.select(state, rows, cross)


def output_limits(decoder, src, prefix, options, src_mask=None, prefix_mask=None) -> np.ndarray:
    """Maximum output tokens per sentence: a source's real tokens (``src_mask``) + max_extra,
    within what the model's positions leave after each row's prefix (``Positional.room``)."""
    if src is not None and src.dtype.kind != "f":  # a float source (a spectrogram) has no token count
        limits = np.asarray(implied_mask(src, decoder.pad) if src_mask is None else src_mask).sum(1) + options.max_extra
    else:
        limits = np.full(len(prefix), options.max_extra)  # decoder-only, or a float source: max_extra
    if options.max_length is not None:
        limits = np.minimum(limits, options.max_length)
    limits = np.maximum(limits, max(options.min_length, 1))
    positions = getattr(decoder, "positions", None)
    room = None if positions is None else positions.room(
        np.asarray(prefix_mask).sum(1) if prefix_mask is not None else np.asarray(prefix).shape[1])
    if room is None:
        return limits
    if np.min(room) < 1:
        raise TfspecError(f"a prefix of {np.max(positions.limit - room)} tokens fills the model's "
                          f"{positions.limit} positions: no token is left to add")
    return np.minimum(limits, room)


def stop_ids(decoder) -> np.ndarray:
    """Every token id that ends a hypothesis: ``eos`` and any other ``eos_ids`` (Llama 3.1
    Instruct ends a turn with <|eot_id|> as well as <|end_of_text|>)."""
    return np.array(sorted({decoder.eos, *getattr(decoder, "eos_ids", ())}), dtype=np.int64)


def among(tokens: np.ndarray, ids) -> np.ndarray:
    """Which ``tokens`` are one of the few ``ids`` (np.isin's sorting costs more at these sizes)."""
    if len(ids) == 1:  # one comparison: a search asks this each step, mostly of one end-of-sequence id
        return tokens == ids[0]
    return (tokens[..., None] == np.asarray(ids, dtype=tokens.dtype)).any(-1)


def banned_tokens(decoder, stops: np.ndarray, t: int, min_length: int) -> list[int]:
    """Tokens step ``t`` may not choose: the end-of-sequence ids before ``min_length``, and the
    padding token when decoding starts from it (Marian, T5: it is never a word; Marian's
    configurations forbid it with bad_words_ids, its embedding being a row added at conversion)."""
    banned = stops.tolist() if t < min_length else []
    return banned + [decoder.pad] if decoder.bos == decoder.pad != decoder.eos else banned


def _greedy(decoder, state, prefix, limits, min_length, pick=None) -> list[list[int]]:
    """The likeliest token at each step, or the one ``pick`` draws. Few array operations per
    step: at batch 1 each costs microseconds, the more as a step's run has just evicted the
    interpreter from the caches (between the 1.6 ms runs of a `base` int8 step the host took
    86 us, where a loop that only writes the token and reads the ids takes 12); so a row's
    length is recorded when it ends, and banned tokens are looked for only in the likeliest."""
    batch, stops = len(prefix), stop_ids(decoder)
    out, lengths = np.zeros((batch, int(limits.max())), dtype=np.int64), np.zeros(batch, dtype=np.int64)
    alive, tokens, limit = np.arange(batch), prefix, limits
    bans = banned_tokens(decoder, stops, 0, min_length), banned_tokens(decoder, stops, min_length, min_length)
    first_limit = int(limit.min())
    for t in range(int(limits.max())):
        banned = bans[t >= min_length]
        values, ids, state = decoder.step(state, tokens, (1 if pick is None else pick.k) + len(banned))
        if pick is not None:
            best = pick(np.where(among(ids, banned), -np.inf, values), ids)
        else:
            best = ids[:, 0]
            if banned and among(best, banned).any():  # the likeliest is banned: the likeliest allowed
                best = ids[np.arange(len(ids)), np.argmax(~among(ids, banned), axis=1)]
        stopped = among(best, stops)
        out[alive, t] = best
        ended = stopped | (t + 1 >= limit) if t + 1 >= first_limit else stopped
        if ended.any():
            lengths[alive[ended]] = t + 1 - stopped[ended]  # an end-of-sequence token is not output
            keep = np.flatnonzero(~ended)
            if not keep.size:
                break
            state = decoder.select(state, keep, cross=True)
            alive, best, limit = alive[keep], best[keep], limit[keep]
            first_limit = int(limit.min())
        tokens = best[:, None]
    return [row[:n].tolist() for row, n in zip(out, lengths)]


class Picker:
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


@dataclass
class Step:
    """What one beam step decides for n sentences of k hypotheses (every field an array)."""

    rows: np.ndarray
    """(n, k) which of the sentence's k hypotheses each new one extends."""
    tokens: np.ndarray
    """(n, k) the token it adds."""
    scores: np.ndarray
    """(n, k) its summed log-probability; -inf for a dead filler that keeps the shape."""
    ended: np.ndarray
    """(n,) hypotheses that finished at this step (by end of sequence, or by the length limit)."""
    best: np.ndarray
    """(n,) the best length-penalised score among them (-inf when none)."""
    best_row: np.ndarray
    """(n,) the hypothesis it came from."""
    best_token: np.ndarray
    """(n,) the token it adds, or -1 when it ends by end of sequence (which is not kept)."""
    going: np.ndarray
    """(n,) whether the sentence goes on (fewer than k finished, under its limit, a word left)."""


def beam_step(scores: np.ndarray, values: np.ndarray, ids: np.ndarray, stops: np.ndarray, finished: np.ndarray,
              at_limit: np.ndarray, penalty: float) -> Step:
    """One step of beam search for n sentences at once, in fixed-shape array operations only
    (what an in-graph search spells with TopK, Gather and Where): ``scores`` (n, k) of the
    hypotheses, their next-token candidates ``values``/``ids`` (n * k, w), the end-of-sequence
    ``stops``, hypotheses already ``finished`` (n,), sentences ``at_limit`` (n,) and the length
    penalty of the new length. Of the 2k best extensions, in order, each end of sequence met
    before the k-th word finishes a hypothesis and the first k words go on (fairseq's rule)."""
    n, k = scores.shape
    line = np.arange(n)[:, None]  # fancy indexing by (line, column): cheaper than take_along_axis at these sizes
    candidates = (scores.reshape(-1, 1) + values).reshape(n, -1)  # (n, k * w)
    order = np.argsort(-candidates, axis=1, kind="stable")[:, : 2 * k]
    top, tokens, rows = candidates[line, order], ids.reshape(n, -1)[line, order], order // values.shape[1]
    valid, ends = top > -np.inf, among(tokens, stops)
    if not at_limit.any() and valid[:, k - 1].all() and not ends[:, :k].any():
        return _words_go_on(rows, tokens, top, finished, k)
    word = valid & ~ends
    before = np.cumsum(word, 1) - word  # words ranked above each candidate
    closing, chosen = valid & ends & (before < k), word & (before < k)
    # Finished in the order the search meets them: ends of sequence, then words cut by the limit.
    done = np.concatenate([closing, chosen & at_limit[:, None]], 1)
    finals = np.where(done, np.concatenate([top, top], 1) / penalty, -np.inf)
    first = np.argmax(finals, 1)  # the first of equal bests, as a running maximum keeps it
    at, count = first % (2 * k), chosen.sum(1)
    pick = np.argsort(~chosen, axis=1, kind="stable")[:, :k]  # the chosen words first, in order
    filler = np.arange(k) >= count[:, None]
    pick = np.where(filler, pick[line, np.maximum(count - 1, 0)[:, None]], pick)  # the last word, repeated
    return Step(rows=rows[line, pick], tokens=tokens[line, pick], scores=np.where(filler, -np.inf, top[line, pick]),
                ended=done.sum(1), best=finals[line[:, 0], first], best_row=rows[line[:, 0], at],
                best_token=np.where(first < 2 * k, -1, tokens[line[:, 0], at]),
                going=(finished + done.sum(1) < k) & ~at_limit & (count > 0))


def _words_go_on(rows: np.ndarray, tokens: np.ndarray, top: np.ndarray, finished: np.ndarray, k: int) -> Step:
    """``beam_step`` where its k best extensions are words and no sentence is at its limit (most
    steps): they go on and nothing finishes. The general rule gives the same in ~4x the array
    operations, each ~2 us at batch 1 (as many as the rest of a beam step's host work)."""
    n = len(rows)
    return Step(rows=rows[:, :k], tokens=tokens[:, :k], scores=top[:, :k], ended=np.zeros(n, dtype=np.int64),
                best=np.full(n, -np.inf), best_row=rows[:, 0], best_token=np.full(n, -1, dtype=np.int64),
                going=finished < k)


def _beam(decoder, state, prefix, limits, options) -> list[list[int]]:
    """Beam search over ``beam_step``; sentences that stop leave the batch (their rows are no
    longer decoded), which changes no result. Per-sentence arrays hold the sentences still
    decoded, cut only when one leaves: at batch 1 each array operation of a step's host work
    costs ~2 us, the step's run having evicted the interpreter's data from the caches."""
    batch, k = len(prefix), options.beam
    state = decoder.select(state, np.repeat(np.arange(batch), k), cross=True)
    tokens, stops = np.repeat(prefix, k, axis=0), stop_ids(decoder)
    scores = np.tile(np.array([0.0] + [-np.inf] * (k - 1)), (batch, 1))  # only the first copy starts
    hyps = np.zeros((batch, k, 0), dtype=np.int64)
    finished, best = np.zeros(batch, dtype=np.int64), np.full(batch, -np.inf)
    results: list[list[int]] = [[] for _ in range(batch)]
    alive, line = np.arange(batch), np.arange(batch)[:, None]
    first = line * k  # each sentence's first row in the state
    for t in range(int(limits.max())):
        banned = banned_tokens(decoder, stops, t, options.min_length)
        values, ids, state = decoder.step(state, tokens, 2 * k + len(banned))  # 2k always leave k words
        if banned:
            values = np.where(among(ids, banned), -np.inf, values)
        step = beam_step(scores, values, ids, stops, finished, t + 1 >= limits, length_penalty(t + 1, options.alpha))
        if step.ended.any():
            for i in np.flatnonzero(step.best > best):
                kept = hyps[i, step.best_row[i]].tolist()
                results[alive[i]] = kept + ([int(step.best_token[i])] if step.best_token[i] >= 0 else [])
            best, finished = np.maximum(best, step.best), finished + step.ended
        hyps = np.concatenate([hyps[line, step.rows], step.tokens[..., None]], axis=2)
        rows, scores, tokens, cross = first + step.rows, step.scores, step.tokens, False
        if not step.going.all():
            keep = np.flatnonzero(step.going)
            if not keep.size:
                break
            hyps, rows, scores, tokens = hyps[keep], rows[keep], scores[keep], tokens[keep]
            alive, limits, best, finished = alive[keep], limits[keep], best[keep], finished[keep]
            line, first, cross = line[: len(keep)], first[: len(keep)], True
        state = decoder.select(state, rows.reshape(-1), cross=cross)
        tokens = tokens.reshape(-1, 1)
    return results
