"""Bounded sampling in `tfspec serve` (generation.options_of, scheduler, watched): a draw is among
the ``--max-top-k`` likeliest tokens, so a step asks the graph for that many candidates, never
the whole vocabulary, and under static batching sampled requests share a batch (each row drawing
with its own seed). The draws still follow the distribution: first tokens drawn for 2,000 seeds
against softmax(logits / T) of transformers' own model on the same prompt (a chi-square test),
whole for a vocabulary under the cap, and cut to the cap's likeliest tokens for a smaller cap."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from serve_inprocess import answered

pytest.importorskip("starlette")
scipy_stats = pytest.importorskip("scipy.stats")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

PROMPT = [1, 40, 41, 42, 43]
TEMPERATURE = 0.8
DRAWS = 2000


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    from serve_inprocess import llama_export

    return llama_export(tmp_path_factory.mktemp("llama"))


def reference(hf, top: int | None) -> np.ndarray:
    """softmax(logits / T) of transformers' model for the next token after ``PROMPT``; ``top``:
    the likeliest ``top`` kept and renormalized, the rest 0."""
    model = transformers.AutoModelForCausalLM.from_pretrained(hf).eval()
    with torch.no_grad():
        logits = model(torch.tensor([PROMPT])).logits[0, -1].double() / TEMPERATURE
    probs = torch.softmax(logits, -1).numpy()
    if top is not None:
        probs[np.argsort(-probs)[top:]] = 0
    return probs / probs.sum()


class Asked:
    """The export's decoder, recording the candidates (``k``) each step is asked for."""

    def __init__(self, decoder):
        self.decoder, self.ks = decoder, []

    def __getattr__(self, name):
        return getattr(self.decoder, name)

    def step(self, state, tokens, k, **kw):
        self.ks.append(k)
        return self.decoder.step(state, tokens, k, **kw)


def drawn(batcher, cap: int) -> np.ndarray:
    """First tokens of ``DRAWS`` one-token sampled requests (seeds 0..), as the server makes them
    (end of sequence included)."""
    from dataclasses import replace

    from tfspec.serve.batcher import Job
    from tfspec.serve.generation import options_of
    from tfspec.serve.schemas import CompletionRequest

    loop = asyncio.new_event_loop()
    jobs = []
    for seed in range(DRAWS):
        body = CompletionRequest(model="m", prompt="x", max_tokens=1, temperature=TEMPERATURE, seed=seed)
        options = options_of(body, 1, cap)
        jobs.append(Job([PROMPT], options, ("complete", replace(options, sampling=None), None), loop.create_future()))
    for job in jobs:
        batcher.submit(job)
    got = answered(batcher, jobs, loop)
    eos = batcher.decoder.eos
    return np.array([out[0][0] if out[0] else eos for out in got])  # an end of sequence is not output


def fits(tokens: np.ndarray, probs: np.ndarray) -> float:
    """The chi-square test's p-value of ``tokens`` drawn from ``probs`` (bins expecting fewer
    than 5 pooled; a token of probability 0 drawn: p = 0)."""
    counts = np.bincount(tokens, minlength=len(probs))
    if counts[probs == 0].any():
        return 0.0
    expected = probs * len(tokens)
    big = expected >= 5
    observed = np.r_[counts[big], counts[~big].sum()]
    wanted = np.r_[expected[big], expected[~big].sum()]
    if wanted[-1] < 5:  # the pooled rest too small to test on its own: folded into the last bin
        observed, wanted = np.r_[observed[:-2], observed[-2:].sum()], np.r_[wanted[:-2], wanted[-2:].sum()]
    return scipy_stats.chisquare(observed, wanted).pvalue


def test_continuous_draws_follow_softmax_cut_to_the_cap(llama):
    from tfspec.backends.onnx import OnnxModel
    from tfspec.serve.scheduler import ContinuousBatcher

    cap = 20
    asked = Asked(OnnxModel(llama, threads=1).decoder())
    tokens = drawn(ContinuousBatcher(asked, 1 << 16, DRAWS), cap)
    assert max(asked.ks) <= cap + 2  # the cap and the end-of-sequence ids a step may have to skip
    assert len(set(tokens.tolist())) > 10 and fits(tokens, reference(llama.parent / "hf", cap)) > 1e-3


def test_static_batches_sampled_requests_together_and_draws_follow_softmax(llama):
    from tfspec.backends.onnx import OnnxModel
    from tfspec.serve.batcher import Batcher

    decoder = Asked(OnnxModel(llama, threads=1).decoder())
    batches, cap = [], decoder.vocab  # the whole vocabulary: draws follow the whole softmax
    tokens = drawn(Batcher(decoder, True, 1 << 16, DRAWS, on_batch=batches.append), cap)
    assert max(map(len, batches)) > DRAWS // 2  # not one request at a time
    assert fits(tokens, reference(llama.parent / "hf", None)) > 1e-3
