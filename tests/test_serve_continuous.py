"""Continuous batching of `tfspec serve` (tfspec/serve/scheduler.py) on an imported random tiny
Llama: prompts join the running batch between steps and leave it when done, and each gets the
tokens it gets alone. References: `tfspec generate` on each request alone (over HTTP, 20
concurrent clients of different prompt lengths, max_tokens, greedy, sampled and streamed), and
`tfspec.search.search` alone for the rows of a batch whose membership the test steers step by step."""

from __future__ import annotations

import asyncio
import json
import random
import re
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from tfspec.data import read_split, sample_dir

pytest.importorskip("starlette")
openai = pytest.importorskip("openai")


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    from serve_inprocess import llama_export

    return llama_export(tmp_path_factory.mktemp("llama"))


@pytest.fixture(scope="module")
def fused(llama, tmp_path_factory):
    """The same model exported with `--fused`: the in-place step graph beside the standard one."""
    from tfspec.cli import main

    out = tmp_path_factory.mktemp("fused") / "fused"
    assert main(["export", str(llama.parent / "ours"), "-o", str(out), "--fused", "--no-check"]) == 0
    assert "decoder_inplace" in json.loads((out / "tfspec.json").read_text())["graphs"]
    return out


@pytest.fixture(params=["standard", "in place"])
def served(request, llama, fused):
    """The export the server runs: rows join and leave over the standard step graph's cache, or
    over the in-place one's buffers (a `--fused` export)."""
    return llama if request.param == "standard" else fused


ALONE: dict = {}
"""Each request's `tfspec generate` alone, computed once for every export served."""


def requests(count: int) -> list[dict]:
    """Prompts of 1 to 12 words from the sample corpus with their own max_tokens; every fifth
    sampled with its own seed and temperature, every seventh streamed."""
    rng = random.Random(5)
    lines = [en for en, _ in read_split(sample_dir(), "dev") if re.fullmatch(r"[A-Za-z ,.]+", en)]  # text that
    # the tokenizer gives back as it was, so prompt + completion is generate's whole text
    out = []
    for i in range(count):
        words = rng.choice(lines).split()[: rng.randint(1, 12)]
        body = {"prompt": " ".join(words), "max_tokens": rng.randint(2, 30), "temperature": 0}
        if i % 5 == 1:
            body |= {"temperature": round(rng.uniform(0.5, 1.5), 2), "seed": rng.randint(0, 1000)}
        out.append(body | {"stream": i % 7 == 3})
    return out


def alone(cli, directory, body) -> tuple[str, int]:
    """(text, new tokens) of `tfspec generate` on this request alone."""
    flags = ["--prompt", body["prompt"], "--max-new-tokens", body["max_tokens"]]
    if body["temperature"]:
        flags += ["--sample", "--temperature", body["temperature"], "--seed", body["seed"]]
    code, out, err = cli("generate", directory, *flags)
    assert code == 0, err
    return out.rstrip("\n"), int(re.search(r"\+ (\d+) new tokens", err).group(1))


def test_20_concurrent_clients_get_generates_tokens(llama, served, cli, tmp_path):
    from test_serve import Server

    bodies = requests(20)
    want = ALONE.get("want") or ALONE.setdefault("want", [alone(cli, llama, body) for body in bodies])
    server = Server(served, "--max-batch-tokens", 4096, "--max-top-k", 400, tmp=tmp_path)  # the whole vocabulary, as generate
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0)

    def ask(i: int):
        # arrivals spread over the running batch's steps; how many join a running batch depends on the
        # machine's speed (test_rows_join_and_leave_between_steps steers joins step by step)
        time.sleep(0.005 * i)
        body = bodies[i]
        answer = client.completions.create(model="llama", **body)
        if body["stream"]:
            return "".join(chunk.choices[0].text for chunk in answer), None
        return answer.choices[0].text, answer.usage.completion_tokens
    try:
        with ThreadPoolExecutor(len(bodies)) as pool:
            got = list(pool.map(ask, range(len(bodies))))
    finally:
        assert server.stop() == 0
    assert [body["prompt"] + text for body, (text, _) in zip(bodies, got)] == [text for text, _ in want]
    assert [n for _, n in got if n is not None] == [n for (_, n), b in zip(want, bodies) if not b["stream"]]


class Steered:
    """The export's decoder, recording each step's batch size and calling ``at[step]()`` first."""

    def __init__(self, decoder, at: dict):
        self.decoder, self.at, self.sizes, self.states = decoder, at, [], set()

    def __getattr__(self, name):
        return getattr(self.decoder, name)

    def step(self, state, tokens, k, **kw):
        if len(self.sizes) in self.at:
            self.at.pop(len(self.sizes))()
        self.sizes.append(len(tokens))
        self.states.add(type(state).__name__)
        return self.decoder.step(state, tokens, k, **kw)


def test_rows_join_and_leave_between_steps(llama, served):
    """A (sampled) runs alone; B (a longer prompt) and C arrive during step 3 and are prefilled
    at step 4, C is cancelled during step 6 and B reaches its limit at step 7: both leave
    before step 8. A and B equal their search alone; each join and leave takes effect at once."""
    from tfspec.backends.onnx import OnnxModel
    from tfspec.search import Sampling, SearchOptions, search
    from tfspec.serve.batcher import Job
    from tfspec.serve.scheduler import ContinuousBatcher, continuous

    model = OnnxModel(served, threads=1)
    decoder = model.decoder()
    assert continuous(decoder)
    prompts = [[1, 40, 41, 42], [1] + list(range(50, 62)), [1, 70, 71]]
    options = [SearchOptions(beam=1, max_extra=n, max_length=n) for n in (12, 4, 30)]
    options[0] = SearchOptions(beam=1, max_extra=12, max_length=12, sampling=Sampling(temperature=1.3, seed=4))
    loop = asyncio.new_event_loop()
    jobs = [Job([p], o, (), loop.create_future()) for p, o in zip(prompts, options)]

    def join():
        batcher.submit(jobs[1])
        batcher.submit(jobs[2])

    def cancel():
        jobs[2].cancelled = True
    steered = Steered(decoder, {3: join, 6: cancel})
    batcher = ContinuousBatcher(steered, 4096, 8)
    batcher.submit(jobs[0])
    batcher.start()
    try:
        got = loop.run_until_complete(asyncio.wait_for(asyncio.gather(*(job.future for job in jobs[:2])), 30))
    finally:
        batcher.stop()
        loop.close()
    want = [search(model.decoder(), None, o, prefix=np.array([p]))[0] for p, o in zip(prompts[:2], options[:2])]
    assert [g[0] for g in got] == want and [len(w) for w in want] == [12, 4]
    assert steered.sizes == [1, 1, 1, 1, 2, 3, 3, 2] + [1] * 5  # A's 12 tokens take 12 steps, one more prefills B, C
    assert steered.states == ({"Buffers"} if served.name == "fused" else {"DeviceState"})  # joins keep buffers
    assert not jobs[2].future.done()  # a cancelled request is never answered (the server has answered 504 or 499)


def test_a_fused_export_batches_continuously_over_its_in_place_buffers(fused):
    """`export --fused` writes the in-place step graph: the server batches continuously over its
    buffers (a step writes its keys and values where they lie; joins splice the buffers)."""
    from tfspec.backends.onnx.runtime.inplace import InPlaceDecoder
    from tfspec.serve.service import ServeConfig, Service

    for batching in ("continuous", "static"):
        service = Service(ServeConfig(fused, threads=1, batching=batching))
        assert service.continuous == (batching == "continuous")
        assert type(service.batcher.decoder) is InPlaceDecoder
