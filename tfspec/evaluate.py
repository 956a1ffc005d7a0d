"""Decoding a whole corpus with any backend, and scoring it with sacrebleu.

Sentences are decoded in batches of similar length (less padding, fewer wasted steps) and
returned in input order; scores are sacrebleu's BLEU and chrF on detokenised text, reported
with their signatures so numbers can be compared across papers and tools.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tfspec.search import Decoder, SearchOptions, search


def decode_all(decoder: Decoder, sources: list[list[int]], options: SearchOptions, batch: int = 32,
               decoder_only: bool = False, on_batch: Callable[[int], None] | None = None) -> list[list[int]]:
    """Output ids for each source (ids ending with EOS); empty sources give empty outputs.
    Decoder-only models continue each source as a prompt, one at a time."""
    outputs: list[list[int]] = [[] for _ in sources]
    todo = sorted((i for i, s in enumerate(sources) if s), key=lambda i: len(sources[i]))
    size = 1 if decoder_only else batch
    for first in range(0, len(todo), size):
        rows = todo[first:first + size]
        tokens = np.full((len(rows), max(len(sources[i]) for i in rows)), decoder.pad, dtype=np.int64)
        for r, i in enumerate(rows):
            tokens[r, : len(sources[i])] = sources[i]
        if decoder_only:
            result = search(decoder, None, options, np.concatenate([[[decoder.bos]], tokens], axis=1))
        else:
            result = search(decoder, tokens, options)
        for i, out in zip(rows, result):
            outputs[i] = out
        if on_batch is not None:
            on_batch(len(rows))
    return outputs


def score(hypotheses: list[str], references: list[str]) -> dict:
    """Corpus BLEU and chrF (sacrebleu defaults: 13a tokenisation, mixed case)."""
    import sacrebleu

    bleu = sacrebleu.metrics.BLEU()
    chrf = sacrebleu.metrics.CHRF()
    b, c = bleu.corpus_score(hypotheses, [references]), chrf.corpus_score(hypotheses, [references])
    return {"bleu": round(b.score, 2), "chrf": round(c.score, 2), "bleu_signature": str(bleu.get_signature()),
            "chrf_signature": str(chrf.get_signature()), "sentences": len(hypotheses)}
