"""Running ``generate.onnx`` (``export --generate``) from Python, and the export's check of it.

``Generator`` feeds the graph what ``tfspec.search.SearchOptions`` asks of the Python search
(``max_length`` None: the graph's own cap, the model's positions), so ``translate --engine
generate`` and the check below compare like with like: the same limit per row, the same
banned tokens, the same length penalty.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from tfspec.checks import Check
from tfspec.evaluate import batches
from tfspec.padding import implied_mask, lengths_mask
from tfspec.search import SearchOptions, search

from . import OnnxModel

NO_LIMIT = 2**30
"""``max_length`` when the options set none: the graph caps it at the model's positions."""


class Generator:
    """generate.onnx in an onnxruntime session: rows of ids in, each row's best output ids out."""

    def __init__(self, model: OnnxModel):
        self.model, self.session = model, model.generate_session()
        self.masks = any(i.name == "attention_mask" for i in self.session.get_inputs())
        """Whether the graph takes ``attention_mask`` (exports from before masks were data do not)."""

    def __call__(self, ids: np.ndarray, options: SearchOptions, mask: np.ndarray | None = None) -> list[list[int]]:
        """Decode ``ids`` (B, S) int64, right-padded sources (``mask`` true at their real tokens,
        by default ``implied_mask``) or prompts (left-padded, ``mask`` true at their real tokens,
        by default every one; prompts of different lengths need a graph that takes masks): output
        ids without bos or end of sentence, as ``tfspec.search.search`` returns them."""
        if options.sampling is not None:
            raise ValueError("generate.onnx searches (greedy or beam); sampling needs the Python search")
        if self.masks and mask is None:  # a prompt's every id is a token: padding is only what a mask says
            prompts = self.model.spec.family == "decoder-only"
            mask = np.ones(ids.shape, bool) if prompts else implied_mask(ids, self.model.spec.vocab.pad_id)
        feeds = {"input_ids": np.ascontiguousarray(ids, np.int64),
                 "max_length": np.array(NO_LIMIT if options.max_length is None else options.max_length, np.int64),
                 "num_beams": np.array(options.beam, np.int64),
                 "length_penalty": np.array(options.alpha, np.float32),
                 "min_length": np.array(options.min_length, np.int64),
                 "max_extra": np.array(options.max_extra, np.int64)}
        if self.masks:
            feeds["attention_mask"] = np.ascontiguousarray(mask, np.int64)
        sequences, _, lengths = self.session.run(["sequences", "sequences_scores", "sequences_lengths"], feeds)
        return [row[:n].tolist() for row, n in zip(sequences, lengths)]


def generate_all(generator: Generator, sources: list[list[int]], options: SearchOptions, batch: int = 32,
                 decoder_only: bool = False, batch_type: str = "examples",
                 on_batch: Callable[[int], None] | None = None) -> list[list[int]]:
    """``tfspec.evaluate.decode_all`` through generate.onnx: the same batches, so the same outputs.
    Prompts of different lengths share a batch, left-padded, where the graph takes masks (each
    row decodes as it does alone), else go one at a time as ``decode_all`` sends them."""
    outputs: list[list[int]] = [[] for _ in sources]
    lengths = [len(s) for s in sources]
    left = decoder_only and generator.masks
    for rows in batches(lengths, batch if left or not decoder_only else 1, batch_type):
        mask = lengths_mask([lengths[i] for i in rows], max(lengths[i] for i in rows))
        mask = mask[:, ::-1] if left else mask
        tokens = np.full(mask.shape, generator.model.spec.vocab.pad_id, np.int64)
        tokens[mask] = np.concatenate([sources[i] for i in rows])  # row by row, each where its mask is
        for i, out in zip(rows, generator(tokens, options, mask)):
            outputs[i] = out
        if on_batch is not None:
            on_batch(len(rows))
    return outputs


def differences(model: OnnxModel, seed: int = 0) -> dict[str, tuple[int, int]]:
    """generate.onnx against the Python search over the same directory's step graph, greedy and
    beam 4, on random sources of a padded batch of 3 (prompts: one row): search -> (sentences
    that differ, sentences)."""
    spec, rng = model.spec, np.random.default_rng(seed)
    vocab = spec.vocab
    if spec.family == "decoder-only":
        ids = rng.integers(4, vocab.tgt_size, (1, 5))
        src, prefix = None, np.concatenate([[[vocab.bos_id]], ids], axis=1)
    else:
        ids = rng.integers(4, vocab.size, (3, 11))
        ids[1, 6:] = ids[0, 5] = vocab.pad_id  # row 1 padded, row 0 holding the pad id as a word
        src, prefix = ids, None
    mask = None if src is None else lengths_mask([11, 6, 11], 11)
    generator, out = Generator(model), {}
    for beam in (1, 4):
        options = SearchOptions(beam=beam, max_extra=12, max_length=12)
        ours = generator(ids, options, mask)
        theirs = search(model.decoder(static=False), src, options, prefix, src_mask=mask)
        out[f"{'greedy' if beam == 1 else 'beam 4'}, batch {len(ids)}"] = (sum(a != b for a, b in zip(ours, theirs)),
                                                                          len(ids))
    return out


def check_generate(model: OnnxModel) -> list[Check]:
    """``differences`` as the export's checks: no sentence may differ."""
    return [Check(f"generate.onnx against the Python search, {setting} (sentences that differ)", float(differ), 0)
            for setting, (differ, _) in differences(model).items()]
