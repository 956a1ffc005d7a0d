"""Decoding many requests: length-sorted batches by examples or tokens, outputs in input order."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tfspec import load_spec
from tfspec.backends.torch import TorchDecoder, build_module
from tfspec.evaluate import batches, decode_all
from tfspec.search import SearchOptions, search


def test_batches_by_examples_and_tokens():
    lengths = [5, 0, 2, 9, 2, 7, 3]
    assert batches(lengths, 2) == [[2, 4], [6, 0], [5, 3]]  # shortest first, empty requests left out
    # tokens: rows x the batch's longest request, at most 10 (a request over the limit goes alone)
    assert batches(lengths, 10, "tokens") == [[2, 4, 6], [0], [5], [3]]
    assert sorted(i for b in batches(lengths, 3, "tokens") for i in b) == [0, 2, 3, 4, 5, 6]
    with pytest.raises(ValueError):
        batches(lengths, 2, "sentences")


@pytest.mark.parametrize("size,kind", [(3, "examples"), (30, "tokens")])
def test_batched_decoding_equals_one_at_a_time(size, kind):
    """Each output equals decoding that source alone with the same search."""
    torch.manual_seed(0)
    decoder = TorchDecoder(build_module(load_spec("tiny")).eval())
    rng = np.random.default_rng(0)
    sources = [list(rng.integers(4, 1000, n)) + [2] if n else [] for n in (3, 0, 8, 1, 5)]
    options = SearchOptions(beam=2, max_extra=3)
    outputs = decode_all(decoder, sources, options, size, batch_type=kind)
    for source, output in zip(sources, outputs):
        alone = search(decoder, np.array([source]), options)[0] if source else []
        assert output == alone
