"""A target-vocabulary shortlist: which target tokens may follow a batch of sources.

What CTranslate2's vocabulary map (``use_vmap``: source n-gram -> target candidates, plus an
always-allowed list) and Marian's lexical shortlist (``--shortlist lex.s2t FIRST BEST``: the
FIRST most frequent target words, and the BEST likeliest translations of each source word) do:
decoding computes the output projection and softmax over the union of the candidates of the
batch's source tokens only, so a step reads a few thousand rows of the (vocab, d) matrix
instead of all of them. Here the candidates are learned from a corpus's tokenized training
pairs without an aligner: for each source token, the ``per_source`` target tokens that occur
in the most sentence pairs with it (Marian ranks by p(t | s) = count(s, t) / count(s), the same
order for one s), ties to the smaller id, leaving out the ``always`` tokens, which every
batch allows anyway: the ``frequent`` most frequent target tokens (occurrences, ties to the
smaller id) and the end-of-sequence, start and unknown ids (CTranslate2's fixed candidates).

The file is data (safetensors: int32 arrays and string metadata, no code), written beside an
export's graphs and checked on load: a corrupt or mismatched file is refused by name.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tfspec.errors import TfspecError

FILE = "shortlist.safetensors"
FORMAT = "tfspec.shortlist/1"
PER_SOURCE = 50
"""Marian's examples keep 50 to 100 translations per source word (``--shortlist lex.s2t 100 100``)."""
FREQUENT = 500
"""On the en-de test split (small, 8k vocabulary, beam 4) 500 frequent tokens kept BLEU within
0.04 of the full vocabulary, 100 within 0.28 (BENCHMARKS.md)."""
CHUNK = 1 << 22
"""Co-occurrence keys gathered before they are reduced to counts (bounds memory on big corpora)."""


@dataclass(frozen=True)
class Shortlist:
    offsets: np.ndarray
    """int64 (source vocab + 1,): source token s's candidates are ``targets[offsets[s]:offsets[s + 1]]``."""
    targets: np.ndarray
    """int64: the candidates of every source token, in rank order."""
    always: np.ndarray
    """int64, sorted: the target ids every batch allows."""
    meta: dict

    def candidates(self, src: np.ndarray) -> np.ndarray:
        """Sorted int64 target ids a batch of sources ``src`` (B, S; padding included) may emit."""
        tokens = np.unique(src)
        tokens = tokens[(tokens >= 0) & (tokens < len(self.offsets) - 1)]
        parts = [self.targets[a:b] for a, b in zip(self.offsets[tokens], self.offsets[tokens + 1])]
        return np.unique(np.concatenate([self.always, *parts]))


def build(pairs: Iterable[tuple[list[int], list[int]]], src_size: int, tgt_size: int, specials: Iterable[int],
          per_source: int = PER_SOURCE, frequent: int = FREQUENT) -> Shortlist:
    """Count, over tokenized (source ids, target ids) ``pairs``, the target tokens' occurrences
    and the sentence pairs each (source token, target token) occurs in together; rank them as
    the module docstring says."""
    freq = np.zeros(tgt_size, dtype=np.int64)
    keys, pending, counts, n = [], 0, (np.zeros(0, np.int64), np.zeros(0, np.int64)), 0
    for src, tgt in pairs:
        src, tgt = np.asarray(src, np.int64), np.asarray(tgt, np.int64)
        if any(ids.size and (ids.min() < 0 or ids.max() >= size) for ids, size in ((src, src_size), (tgt, tgt_size))):
            raise TfspecError(f"pair {n + 1}: token ids outside the vocabularies ({src_size:,} source, "
                              f"{tgt_size:,} target): the tokenizer is not the model's")
        freq += np.bincount(tgt, minlength=tgt_size)
        keys.append((np.unique(src)[:, None] * tgt_size + np.unique(tgt)[None, :]).ravel())
        pending, n = pending + keys[-1].size, n + 1
        if pending >= CHUNK:
            counts, keys, pending = _reduce(counts, keys), [], 0
    counts = _reduce(counts, keys)
    order = np.lexsort((np.arange(tgt_size), -freq))  # most frequent first, ties to the smaller id
    always = np.unique(np.r_[order[:frequent], list(specials)].astype(np.int64))
    return _rank(*counts, src_size, tgt_size, always, per_source,
                 {"format": FORMAT, "per_source": str(per_source), "frequent": str(frequent), "pairs": str(n)})


def _reduce(counts: tuple[np.ndarray, np.ndarray], keys: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Running (unique keys, counts) merged with new keys, each counting once."""
    if not keys:
        return counts
    merged = np.concatenate([counts[0], *keys])
    unique, inverse = np.unique(merged, return_inverse=True)
    weights = np.concatenate([counts[1], np.ones(len(merged) - len(counts[0]), np.int64)])
    return unique, np.bincount(inverse, weights=weights, minlength=len(unique)).astype(np.int64)


def _rank(keys, counts, src_size, tgt_size, always, per_source, meta) -> Shortlist:
    """Each source token's ``per_source`` best targets outside ``always`` (count down, id up)."""
    src, tgt = keys // tgt_size, keys % tgt_size
    keep = ~np.isin(tgt, always)
    src, tgt, counts = src[keep], tgt[keep], counts[keep]
    order = np.lexsort((tgt, -counts, src))
    src, tgt = src[order], tgt[order]
    starts = np.searchsorted(src, src, side="left")  # where each source token's run begins
    kept = np.arange(len(src)) - starts < per_source
    offsets = np.r_[0, np.cumsum(np.bincount(src[kept], minlength=src_size))].astype(np.int64)
    return Shortlist(offsets, tgt[kept].astype(np.int64), always, meta)


def save(shortlist: Shortlist, path: Path) -> None:
    from safetensors.numpy import save_file

    save_file({"offsets": shortlist.offsets.astype(np.int32), "targets": shortlist.targets.astype(np.int32),
               "always": shortlist.always.astype(np.int32)}, str(path), metadata=shortlist.meta)


def load(path: Path, src_size: int, tgt_size: int) -> Shortlist:
    """The shortlist in ``path``, checked against the model's vocabulary sizes."""
    from safetensors import SafetensorError, safe_open

    def bad(why: str):
        return TfspecError(f"{path}: corrupt shortlist ({why}); re-export with `tfspec export ... --shortlist DIR`")
    try:
        with safe_open(str(path), "np") as f:
            meta, arrays = f.metadata() or {}, {k: f.get_tensor(k) for k in f.keys()}
    except FileNotFoundError:
        raise TfspecError(f"{path}: missing (the manifest lists it); re-export the model") from None
    except (SafetensorError, OSError, ValueError) as e:
        raise bad(str(e).splitlines()[0][:200] if str(e) else type(e).__name__) from None
    if meta.get("format") != FORMAT:
        raise bad(f"format {meta.get('format')!r}, expected {FORMAT!r}")
    for name in ("offsets", "targets", "always"):
        if name not in arrays or arrays[name].dtype != np.int32 or arrays[name].ndim != 1:
            raise bad(f"{name!r} must be a 1-D int32 array")
    offsets, targets, always = (arrays[k].astype(np.int64) for k in ("offsets", "targets", "always"))
    if len(offsets) != src_size + 1 or offsets[0] != 0 or offsets[-1] != len(targets) or (np.diff(offsets) < 0).any():
        raise bad(f"'offsets' must rise from 0 to {len(targets)} over {src_size + 1} entries, one per source token")
    for name, ids in (("targets", targets), ("always", always)):
        if ids.size and (ids.min() < 0 or ids.max() >= tgt_size):
            raise bad(f"{name!r} holds ids outside the target vocabulary (0..{tgt_size - 1})")
    if not always.size:
        raise bad("'always' is empty: end of sequence at least must always be allowed")
    return Shortlist(offsets, targets, np.unique(always), meta)
