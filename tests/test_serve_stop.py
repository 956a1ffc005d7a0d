"""Stop strings end a row's decoding (continuous and static batching alike), not only its text;
the text is read incrementally (tfspec/serve/detokenize.py), each token decoding a short window,
and equals the whole continuation decoded at once."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("starlette")
pytest.importorskip("transformers")

PROMPT = "Select the cell and click"


@pytest.fixture(scope="module")
def export(tmp_path_factory):
    from serve_inprocess import chat_export

    return chat_export(tmp_path_factory.mktemp("stop"))[0]


@pytest.fixture(scope="module", params=["continuous", "static"])
def served(request, export):
    from serve_inprocess import InProcess
    from tfspec.serve.service import ServeConfig

    s = InProcess(ServeConfig(export, threads=1, batching=request.param))
    assert s.service.continuous == (request.param == "continuous")
    yield s
    s.stop()


def complete(url: str, **fields) -> dict:
    from test_serve import request

    status, answer, _ = request(url + "/v1/completions", {"model": "m", "prompt": PROMPT, "temperature": 0} | fields)
    assert status == 200, answer
    return answer


def streamed(url: str, **fields) -> list[dict]:
    from test_serve import request

    status, text, _ = request(url + "/v1/completions", {"model": "m", "prompt": PROMPT, "temperature": 0,
                                                        "stream": True} | fields)
    assert status == 200, text
    events = [line.removeprefix("data: ") for line in text.split("\n\n") if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    return [json.loads(e) for e in events[:-1]]


def test_a_stop_string_ends_decoding(served):
    full = complete(served.url, max_tokens=40)
    text, tokens = full["choices"][0]["text"], full["usage"]["completion_tokens"]
    assert tokens == 40, full  # a random model: no end of sequence in 40 tokens for this prompt
    stop = text[len(text) // 3: len(text) // 3 + 3]
    cut = complete(served.url, max_tokens=40, stop=[stop, "\x00never"])
    assert cut["choices"][0]["text"] == text[: text.index(stop)] and cut["choices"][0]["finish_reason"] == "stop"
    assert cut["usage"]["completion_tokens"] < 30  # decoding ended at the stop string, not at max_tokens
    chunks = streamed(served.url, max_tokens=40, stop=stop)
    assert "".join(c["choices"][0]["text"] for c in chunks) == text[: text.index(stop)]
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_incremental_text_equals_decoding_at_once_in_a_short_window(kind):
    from test_generate_cli import bpe
    from tfspec.serve.detokenize import Detokenizer

    tok, windows = bpe(kind), []

    def decode(ids):
        windows.append(len(ids))
        return tok.decode(ids, skip_special_tokens=True)
    ids = tok.encode("Select the cell and click on the menu. Héllo wörld ☃ done " * 4).ids
    for cut in range(1, len(ids), 7):
        text = Detokenizer(decode, ids[:cut], [])
        for token in ids[cut:]:
            text.push(token)
        whole = tok.decode(ids, skip_special_tokens=True)
        assert text.finish(ids[cut:]) == whole[len(tok.decode(ids[:cut], skip_special_tokens=True)):]
    assert max(windows) <= 12  # a few tokens per step, however long the text
    stopped = Detokenizer(decode, ids[:3], ["menu"])
    ends, sent = [], ""
    for token in ids[3:]:
        ends.append(stopped.push(token))
        sent += stopped.release()
        assert "m" not in sent  # what may begin "menu" is held back until it cannot
    assert stopped.text.endswith("on the ") and ends.index(True) < 20 and sent == stopped.text
