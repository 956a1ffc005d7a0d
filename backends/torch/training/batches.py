"""Training batches as §5.1 builds them: sentence pairs grouped by length, each batch holding
about a fixed number of tokens (padding included), in an order fixed by (seed, epoch) so a
resumed run sees exactly the batches an uninterrupted one would."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


@dataclass(frozen=True)
class Pairs:
    """Token ids of a corpus: ``src[i]`` ends with EOS; ``tgt[i]`` is BOS ... EOS."""

    src: list[np.ndarray]
    tgt: list[np.ndarray]

    def __len__(self) -> int:
        return len(self.tgt)


def encode(pairs: list[tuple[str, str]], tokenizer, bos: int, eos: int, max_len: int) -> Pairs:
    """Tokenize sentence pairs; pairs longer than ``max_len`` tokens on either side are dropped."""
    src_ids = tokenizer.encode([s for s, _ in pairs])
    tgt_ids = tokenizer.encode([t for _, t in pairs])
    src, tgt = [], []
    for s, t in zip(src_ids, tgt_ids):
        if 0 < len(s) < max_len and 0 < len(t) < max_len - 1:
            src.append(np.array(s + [eos], dtype=np.int32))
            tgt.append(np.array([bos] + t + [eos], dtype=np.int32))
    return Pairs(src, tgt)


def make_batches(pairs: Pairs, batch_tokens: int) -> list[np.ndarray]:
    """Indices of pairs per batch: sorted by length, filled while batch x longest side fits
    ``batch_tokens`` (a pair longer than the budget gets a batch of its own)."""
    lengths = np.array([max(len(s), len(t)) for s, t in zip(pairs.src, pairs.tgt)])
    order = np.lexsort((np.arange(len(lengths)), lengths))
    batches, start = [], 0
    while start < len(order):
        end = start + 1
        while end < len(order) and (end - start + 1) * lengths[order[end]] <= batch_tokens:
            end += 1
        batches.append(order[start:end])
        start = end
    return batches


def epoch_order(num_batches: int, seed: int, epoch: int) -> np.ndarray:
    """The batch order of ``epoch``: a permutation that depends on nothing but its arguments."""
    return np.random.default_rng([seed, epoch]).permutation(num_batches)


def collate(pairs: Pairs, index: np.ndarray, pad: int) -> dict[str, torch.Tensor]:
    """src (B, S), tgt_in (B, T) = BOS y1 .. yn, tgt_out (B, T) = y1 .. yn EOS; padded. The
    masks say which are real from each sentence's length, never from the pad id: src_mask
    (B, S), tgt_mask (B, T) for tgt_in and, the same, loss_mask for tgt_out."""
    src = _pad([pairs.src[i] for i in index], pad)
    tgt = _pad([pairs.tgt[i] for i in index], pad)
    src_mask = _real([len(pairs.src[i]) for i in index], src.shape[1])
    tgt_mask = _real([len(pairs.tgt[i]) - 1 for i in index], tgt.shape[1] - 1)
    return {"src": src, "tgt_in": tgt[:, :-1], "tgt_out": tgt[:, 1:], "src_mask": src_mask, "tgt_mask": tgt_mask,
            "loss_mask": tgt_mask}


MASKED = 0.15
"""Share of tokens masked-LM training predicts (BERT: 80% shown as [MASK], 10% as a random
token, 10% unchanged)."""


def masked(pairs: Pairs, index: np.ndarray, pad: int, mask_id: int, vocab: int, seed) -> dict[str, torch.Tensor]:
    """A masked-LM batch of source sentences (encoder-only training): src (B, L) with 15% of
    the tokens (EOS excepted) replaced, tgt_out (B, L) holding the originals there and pad
    elsewhere. The choice depends on ``seed`` only, so every process and a resumed run agree."""
    tokens = _pad([pairs.src[i] for i in index], pad).numpy()
    rng = np.random.default_rng(seed)
    lengths = np.array([len(pairs.src[i]) for i in index])
    candidate = np.arange(tokens.shape[1])[None, :] < lengths[:, None] - 1  # not EOS, not padding
    chosen = candidate & (rng.random(tokens.shape) < MASKED)
    if not chosen.any():  # a small batch where chance chose nothing: predict one token anyway
        row, column = np.argwhere(candidate)[0]  # every source has a token before its EOS
        chosen[row, column] = True
    roll = rng.random(tokens.shape)
    inputs = tokens.copy()
    inputs[chosen & (roll < 0.8)] = mask_id
    swap = chosen & (roll >= 0.8) & (roll < 0.9)
    inputs[swap] = rng.integers(4, vocab, int(swap.sum()))
    return {"src": torch.from_numpy(inputs), "tgt_out": torch.from_numpy(np.where(chosen, tokens, pad)),
            "src_mask": _real(lengths, tokens.shape[1]), "loss_mask": torch.from_numpy(chosen)}


def _real(lengths, width: int) -> torch.Tensor:
    """bool (B, width): true at each row's first ``lengths[i]`` positions."""
    return torch.arange(width)[None, :] < torch.as_tensor(np.asarray(lengths))[:, None]


def _pad(rows: list[np.ndarray], pad: int) -> torch.Tensor:
    out = np.full((len(rows), max(len(r) for r in rows)), pad, dtype=np.int64)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return torch.from_numpy(out)
