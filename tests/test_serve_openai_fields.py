"""The OpenAI request fields common clients send, honoured (tfspec/serve/logits.py and the
routes): stream_options.include_usage (a last chunk of usage and no choices, as OpenAI sends),
top_k, min_tokens, ignore_eos, presence and frequency penalties, logit_bias, echo, logprobs;
what cannot be honoured is a 422 naming the field; continuous and static batching alike. The
official `openai` client where it can."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("starlette")
pytest.importorskip("transformers")
openai = pytest.importorskip("openai")

PROMPT = "Select the cell and click"


@pytest.fixture(scope="module")
def export(tmp_path_factory):
    from serve_inprocess import chat_export

    return chat_export(tmp_path_factory.mktemp("fields"))


@pytest.fixture(scope="module", params=["continuous", "static"])
def served(request, export):
    from serve_inprocess import InProcess
    from tfspec.serve.service import ServeConfig

    directory, tok = export
    s = InProcess(ServeConfig(directory, threads=1, batching=request.param))
    assert s.service.continuous == (request.param == "continuous")
    s.client = openai.OpenAI(base_url=s.url + "/v1", api_key="none", max_retries=0)
    s.tok = tok
    yield s
    s.stop()


def test_stream_options_include_usage_ends_with_a_usage_chunk(served):
    chunks = list(served.client.completions.create(model="m", prompt=PROMPT, max_tokens=12, temperature=0,
                                                   stream=True, stream_options={"include_usage": True}))
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 12
    assert chunks[-1].usage.prompt_tokens > 3 and all(c.usage is None for c in chunks[:-1])
    whole = served.client.completions.create(model="m", prompt=PROMPT, max_tokens=12, temperature=0)
    assert text == whole.choices[0].text and whole.usage.total_tokens == whole.usage.prompt_tokens + 12


def test_continuous_usage_stats_count_the_tokens_so_far_in_every_chunk(served):
    """vLLM's ``stream_options.continuous_usage_stats`` (guidellm sends it): each chunk carries
    the usage so far, never decreasing, the finishing chunk the whole answer's."""
    chunks = list(served.client.completions.create(
        model="m", prompt=PROMPT, max_tokens=12, temperature=0, stream=True,
        stream_options={"include_usage": True, "continuous_usage_stats": True}))
    counts = [c.usage.completion_tokens for c in chunks]
    assert all(c.usage is not None for c in chunks) and counts == sorted(counts) and counts[-1] == 12
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert {c.usage.prompt_tokens for c in chunks} == {chunks[-1].usage.total_tokens - 12}


def test_logit_bias_min_tokens_and_ignore_eos(served):
    eos = str(served.service.spec.vocab.eos_id)
    ask = dict(model="m", prompt=PROMPT, max_tokens=9, temperature=0)
    ended = served.client.completions.create(**ask, logit_bias={eos: 100})
    assert ended.usage.completion_tokens == 0 and ended.choices[0].finish_reason == "stop"
    assert served.client.completions.create(**ask, logit_bias={eos: 100}, extra_body={"min_tokens": 3}) \
        .usage.completion_tokens == 3
    ignored = served.client.completions.create(**ask, logit_bias={eos: 100}, extra_body={"ignore_eos": True})
    assert ignored.usage.completion_tokens == 9 and ignored.choices[0].finish_reason == "length"


def penalized(decoder, prompt: list[int], n: int, presence: float, frequency: float) -> list[int]:
    """Greedy tokens with OpenAI's penalties taken from the whole vocabulary's log-probabilities."""
    state = decoder.select(decoder.start(None), np.zeros(1, dtype=np.int64), cross=True)
    tokens, out, used = np.array([prompt]), [], {}
    for _ in range(n):
        values, ids, state = decoder.step(state, tokens, 10**6)
        shaped = [v - frequency * used.get(i, 0) - presence * (i in used) for v, i in zip(values[0], ids[0].tolist())]
        out.append(int(ids[0][int(np.argmax(shaped))]))
        used[out[-1]] = used.get(out[-1], 0) + 1
        tokens = np.array([[out[-1]]])
    return out


def test_penalties_and_top_k(served):
    decoder, prompt = served.service.batcher.decoder.decoder, served.service.codec.prompt(PROMPT)
    ask = dict(model="m", prompt=PROMPT, max_tokens=12, temperature=0, extra_body={"ignore_eos": True})
    plain = served.client.completions.create(**ask).choices[0].text
    for presence, frequency in ((2, 0), (0, 2), (0.5, -1)):
        want = served.tok.decode(penalized(decoder, prompt, 12, presence, frequency))
        got = served.client.completions.create(**ask, presence_penalty=presence, frequency_penalty=frequency)
        assert got.choices[0].text == want != plain
    greedy = served.client.completions.create(model="m", prompt=PROMPT, max_tokens=8, temperature=0)
    drawn = served.client.completions.create(model="m", prompt=PROMPT, max_tokens=8, temperature=1.5, seed=3,
                                             extra_body={"top_k": 1})
    assert drawn.choices[0].text == greedy.choices[0].text


def test_logprobs_and_echo(served):
    got = served.client.completions.create(model="m", prompt=PROMPT, max_tokens=6, temperature=0, logprobs=2)
    echoed = served.client.completions.create(model="m", prompt=PROMPT, max_tokens=6, temperature=0, echo=True)
    choice = got.choices[0]
    assert echoed.choices[0].text == PROMPT + choice.text and len(choice.logprobs.tokens) == 6
    for lp, top in zip(choice.logprobs.token_logprobs, choice.logprobs.top_logprobs):
        # greedy: the likeliest (two alternatives may read alike: parts of one UTF-8 character)
        assert 1 <= len(top) <= 2 and lp == pytest.approx(max(top.values())) and lp < 0
    chat = served.client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}],
                                                 max_tokens=4, temperature=0, logprobs=True, top_logprobs=3)
    content = chat.choices[0].logprobs.content
    assert len(content) == chat.usage.completion_tokens == 4 and all(len(t.top_logprobs) == 3 for t in content)
    assert "".join(t.token for t in content) == chat.choices[0].message.content


@pytest.mark.parametrize("fields,param", [
    ({"logit_bias": {"abc": 1}}, "logit_bias.abc"),
    ({"logit_bias": {"99999999": 1}}, "logit_bias.99999999"),
    ({"logit_bias": {"5": 101}}, "logit_bias.5"),
    ({"min_tokens": 20, "max_tokens": 5}, "min_tokens"),
    ({"echo": True, "logprobs": 1}, "echo"),
    ({"best_of": 2}, "best_of"),
    ({"stream_options": {"include_usage": True}}, "stream_options"),
])
def test_what_cannot_be_honoured_is_a_422_naming_the_field(served, fields, param):
    from test_serve import request

    status, answer, _ = request(served.url + "/v1/completions", {"model": "m", "prompt": PROMPT} | fields)
    assert status == 422 and answer["error"]["param"] == param, answer



def fuzzed_fields():
    from test_serve import JSON

    number = st.integers(-3, 30) | st.floats(-3, 3) | JSON
    return st.fixed_dictionaries({}, optional={
        "logit_bias": JSON | st.dictionaries(st.sampled_from(["0", "5", "x", "-1", "99999"]), number, max_size=2),
        "stream_options": JSON | st.fixed_dictionaries({"include_usage": JSON}), "stream": st.booleans(),
        "logprobs": number, "top_logprobs": number, "echo": JSON, "min_tokens": number, "top_k": number,
        "presence_penalty": number, "frequency_penalty": number, "ignore_eos": JSON, "stop": JSON,
        "temperature": number, "seed": number})


def test_fuzzed_openai_fields_never_500(served):
    from test_serve import request

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(fields=fuzzed_fields(), chat=st.booleans())
    def check(fields, chat):
        route, base = ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}) if chat else \
            ("/v1/completions", {"prompt": PROMPT})
        status, answer, _ = request(served.url + route, {"model": "m", "max_tokens": 3} | base | fields, timeout=30)
        assert status in (200, 400, 413, 422), (fields, answer)
    check()


def test_a_row_that_only_lowers_tokens_asks_for_k_plus_those_and_picks_as_from_the_whole_vocabulary():
    """Penalties and negative biases move tokens down only: the k likeliest after reshaping are
    among the k + (tokens lowered) likeliest before, checked against reshaping the whole
    vocabulary; a raised token (positive bias, negative penalty) needs the whole vocabulary."""
    from tfspec.serve.logits import WHOLE_VOCABULARY, Shaper, Tweaks

    rng = np.random.default_rng(0)
    vocab = 300
    for trial in range(50):
        logprobs = rng.normal(size=vocab).astype(np.float32)
        order = np.argsort(-logprobs)  # the step's candidates, likeliest first
        bias = tuple((int(t), -float(rng.uniform(0.1, 5))) for t in rng.choice(order[:20], 3, replace=False))
        shaper = Shaper(Tweaks(presence=0.7, frequency=0.4, bias=bias), vocab)
        for token in rng.choice(order[:30], 5):
            shaper.took(int(token))
        for k in (1, 4):
            n = shaper.candidates(k)
            assert n < vocab
            whole = np.argsort(-(logprobs + shaper.adjust), kind="stable")[:k]
            ids = order[:n]
            part = ids[np.argsort(-shaper(logprobs[ids], ids), kind="stable")[:k]]
            assert set(part) == set(whole), trial
    raised = Shaper(Tweaks(bias=((7, 2.0),)), vocab)
    assert raised.candidates(1) == WHOLE_VOCABULARY
    assert Shaper(Tweaks(frequency=-1.0), vocab).candidates(1) == 1  # nothing seen yet
