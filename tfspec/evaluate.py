"""Decoding a whole corpus with any backend, and scoring it with sacrebleu.

Sentences are decoded in batches of similar length (less padding, fewer wasted steps) and
returned in input order; scores are sacrebleu's BLEU and chrF on detokenised text, reported
with their signatures so numbers can be compared across papers and tools.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np

from tfspec.padding import lengths_mask
from tfspec.search import Decoder, SearchOptions, search


def decode_all(decoder: Decoder, sources: list[list[int]], options: SearchOptions, batch: int = 32,
               decoder_only: bool = False, on_batch: Callable[[int], None] | None = None,
               batch_type: str = "examples") -> list[list[int]]:
    """Output ids for each source (ids ending with EOS), in input order; empty sources give
    empty outputs. Requests are decoded in batches of similar length (``batches``), as
    CTranslate2's ``translate_batch`` does. Decoder-only models continue each source as a
    prompt, one at a time, within ``options.max_length`` positions after the start token: a
    prompt that fills them continues with nothing."""
    outputs: list[list[int]] = [[] for _ in sources]
    lengths = [len(s) for s in sources]
    for rows in batches(lengths, 1 if decoder_only else batch, batch_type):
        tokens = np.full((len(rows), max(lengths[i] for i in rows)), decoder.pad, dtype=np.int64)
        for r, i in enumerate(rows):
            tokens[r, : lengths[i]] = sources[i]
        if decoder_only:  # the prompt takes positions too: what is left of max_length is the output's room
            room = None if options.max_length is None else options.max_length - tokens.shape[1]
            prefix = np.concatenate([[[decoder.bos]], tokens], axis=1)
            result = [[]] if room is not None and room < 1 else search(
                decoder, None, options if room is None else replace(options, max_length=room), prefix)
        else:  # the batcher knows each source's length: the mask, not the pad id, says what is padding
            mask = lengths_mask([lengths[i] for i in rows], tokens.shape[1])
            result = search(decoder, tokens, options, src_mask=mask)
        for i, out in zip(rows, result):
            outputs[i] = out
        if on_batch is not None:
            on_batch(len(rows))
    return outputs


def batches(lengths: list[int], size: int, batch_type: str = "examples") -> list[list[int]]:
    """Indices of the non-empty requests grouped for decoding, shortest first: each batch holds
    at most ``size`` requests (``examples``) or ``size`` source tokens counting the padding to its
    longest request (``tokens``; a request longer than that goes alone). Sorting by length keeps
    padding, and steps spent on finished rows, small."""
    if batch_type not in ("examples", "tokens"):
        raise ValueError(f"batch_type must be 'examples' or 'tokens', not {batch_type!r}")
    out: list[list[int]] = []
    for i in sorted((i for i, n in enumerate(lengths) if n), key=lambda i: lengths[i]):
        rows = out[-1] if out else None
        # sorted: the newest request is the batch's longest
        cost = (len(rows) + 1) * (lengths[i] if batch_type == "tokens" else 1) if rows else None
        if rows is None or cost > size:
            out.append([i])
        else:
            rows.append(i)
    return out


def score(hypotheses: list[str], references: list[str]) -> dict:
    """Corpus BLEU and chrF (sacrebleu defaults: 13a tokenisation, mixed case)."""
    import sacrebleu

    bleu = sacrebleu.metrics.BLEU()
    chrf = sacrebleu.metrics.CHRF()
    b, c = bleu.corpus_score(hypotheses, [references]), chrf.corpus_score(hypotheses, [references])
    return {"bleu": round(b.score, 2), "chrf": round(c.score, 2), "bleu_signature": str(bleu.get_signature()),
            "chrf_signature": str(chrf.get_signature()), "sentences": len(hypotheses)}
