"""The continuous batcher's cache (tfspec/serve/scheduler.py, backends/onnx/runtime/splice.py): the
spliced cache is one rectangle, rows x its widest row, so admission counts that rectangle. A
realistic mix of one long request among many short ones never holds more cache than
``--max-batch-tokens`` (the cache's own element count, read from the OrtValues each step
takes), while every row still gets `tfspec.search.search`'s tokens alone."""

from __future__ import annotations

import asyncio
import math

import numpy as np
import pytest
from serve_inprocess import answered

pytest.importorskip("starlette")


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    from serve_inprocess import llama_export

    return llama_export(tmp_path_factory.mktemp("llama"))


class Measured:
    """The export's decoder, recording the cache columns x rows each step reads and writes (its
    ``past.*`` OrtValues' elements over the elements one column of one row takes), and calling
    ``at[step]()`` first."""

    def __init__(self, decoder, at: dict):
        self.decoder, self.at, self.held = decoder, at, []

    def __getattr__(self, name):
        return getattr(self.decoder, name)

    def columns(self, state) -> int:
        total = per = 0
        for name, value in state.values.items():
            if name.startswith("past."):
                shape = value.shape()
                axis = self.decoder.inputs[name].shape.index("past_len")
                if shape[0] * shape[axis]:
                    total, per = total + math.prod(shape), per + math.prod(shape) // (shape[0] * shape[axis])
        return total // per if per else 0

    def step(self, state, tokens, k, **kw):
        if len(self.held) in self.at:
            self.at.pop(len(self.held))()
        values, ids, after = self.decoder.step(state, tokens, k, **kw)
        self.held.append(max(self.columns(state), self.columns(after)))
        return values, ids, after


def test_a_long_request_among_short_ones_holds_no_more_cache_than_the_budget(llama):
    """One request of 30 prompt tokens and 30 new ones runs; 24 short ones (3 prompt tokens, 4
    new) arrive at its third step. Counted by prompt + max_tokens (60 + 24 x 7 = 228 columns),
    all would join, and the cache would hold 25 rows padded to the long row: ~1,500 columns."""
    from tfspec.backends.onnx import OnnxModel
    from tfspec.search import SearchOptions, search
    from tfspec.serve.batcher import Job
    from tfspec.serve.scheduler import ContinuousBatcher

    budget = 240
    model = OnnxModel(llama, threads=1)
    long = [1] + list(range(20, 49))
    shorts = [[1, 50 + i, 60 + i] for i in range(24)]
    options = [SearchOptions(beam=1, max_extra=30, max_length=30, min_length=30)] + \
        [SearchOptions(beam=1, max_extra=4, max_length=4)] * len(shorts)
    loop = asyncio.new_event_loop()
    jobs = [Job([p], o, (), loop.create_future()) for p, o in zip([long] + shorts, options)]

    def arrive():
        for job in jobs[1:]:
            batcher.submit(job)
    measured = Measured(model.decoder(), {2: arrive})
    batcher = ContinuousBatcher(measured, budget, 64)
    batcher.submit(jobs[0])
    got = answered(batcher, jobs, loop)
    want = [search(model.decoder(), None, o, prefix=np.array([p]))[0] for p, o in zip([long] + shorts, options)]
    assert [g[0] for g in got] == want
    assert max(measured.held) <= budget, measured.held
    assert max(measured.held) > budget // 2  # shorts did join the long row: the budget is used, not idle


def test_a_static_batch_counts_the_columns_its_cache_will_gain(llama):
    """Static batching (``--batching static``): 40 prompts of 3 tokens that may each get 20
    more. Counted by prompt width alone (40 x 3 = 120 columns) all would share one batch, whose
    cache grows to 40 x 22; counted with its growth, batches stay within the budget."""
    from tfspec.backends.onnx import OnnxModel
    from tfspec.search import SearchOptions, search
    from tfspec.serve.batcher import Batcher, Job

    budget, model = 240, OnnxModel(llama, threads=1)
    options = SearchOptions(beam=1, max_extra=20, max_length=20, min_length=20)
    prompts = [[1, 50 + i % 30, 60 + i % 7] for i in range(40)]
    loop = asyncio.new_event_loop()
    jobs = [Job([p], options, ("same",), loop.create_future()) for p in prompts]
    measured = Measured(model.decoder(), {})
    batcher = Batcher(measured, True, budget, 64)
    for job in jobs:
        batcher.submit(job)
    got = answered(batcher, jobs, loop)
    assert [g[0] for g in got[:3]] == [search(model.decoder(), None, options, prefix=np.array([p]))[0]
                                       for p in prompts[:3]]
    assert max(measured.held) <= budget, measured.held
