"""Defects of `tfspec serve` found by trying to break it (issue 51), each reproduced: a port in
use or a host that does not resolve is one `error:` line and exit 2 in every worker mode; a
too-long `stop` list or a malformed token-id prompt is a 422 saying so at the field's own path;
the batch metrics count every batch, a lone request's too; and `prompt` takes token ids as
OpenAI's completions route does, so that an export without a tokenizer is served (its answers'
text is empty, their `token_ids` are transformers' greedy tokens)."""

from __future__ import annotations

import shutil
import socket
from concurrent.futures import ThreadPoolExecutor

import pytest

pytest.importorskip("starlette")
transformers = pytest.importorskip("transformers")
openai = pytest.importorskip("openai")
torch = pytest.importorskip("torch")

PROMPT = "Select the cell and click"


@pytest.fixture(scope="module")
def export(tmp_path_factory):
    from serve_inprocess import chat_export

    return chat_export(tmp_path_factory.mktemp("defects"))


def served(directory, **config):
    from serve_inprocess import InProcess
    from tfspec.serve.service import ServeConfig

    s = InProcess(ServeConfig(directory, threads=1, **config))
    s.client = openai.OpenAI(base_url=s.url + "/v1", api_key="none", max_retries=0)
    return s


@pytest.mark.parametrize("workers", [1, 2])
def test_a_port_in_use_or_an_unknown_host_is_one_error_line(export, cli, workers):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, _, err = cli("serve", export[0], "--port", port, "--workers", workers, "--threads", 1)
    assert code == 2 and err.splitlines() == [f"error: cannot listen on 127.0.0.1:{port}: Address already in use"]
    code, _, err = cli("serve", export[0], "--host", "no-such-host.invalid", "--workers", workers, "--threads", 1)
    assert code == 2 and len(err.splitlines()) == 1 and err.startswith("error: cannot listen on no-such-host.invalid:")


@pytest.mark.parametrize("fields,param,words", [
    ({"stop": ["a", "b", "c", "d", "e"]}, "stop", "at most 4 items"),
    ({"stop": 5}, "stop", "a string or a list of strings"),
    ({"prompt": [[1, 2], [3, "x"]]}, "prompt.1.1", "valid integer"),
    ({"prompt": [1, 2, 10**6]}, "prompt.2", "outside the vocabulary"),
    ({"prompt": [[1, 2], [3, 10**6]]}, "prompt.1.1", "outside the vocabulary"),
    ({"prompt": {"ids": [1]}}, "prompt", "a list of token ids"),
])
def test_a_malformed_union_field_is_a_422_at_its_own_path(export, fields, param, words):
    from test_serve import request

    s = served(export[0])
    try:
        status, answer, _ = request(s.url + "/v1/completions", {"model": "m", "prompt": PROMPT} | fields)
    finally:
        s.stop()
    assert status == 422 and answer["error"]["param"] == param and words in answer["error"]["message"], answer


def batch_metrics(url: str) -> dict[str, float]:
    from test_serve import request

    return {line.split()[0]: float(line.split()[1]) for line in request(url + "/metrics")[1].splitlines()
            if line.startswith(("tfspec_batch_requests_", "tfspec_batch_tokens_")) and "_bucket" not in line}


@pytest.mark.parametrize("batching", ["continuous", "static"])
def test_batch_metrics_count_every_batch_a_lone_request_too(export, batching):
    s = served(export[0], batching=batching)
    try:
        alone = s.client.completions.create(model="m", prompt=PROMPT, max_tokens=4, temperature=0)
        first = batch_metrics(s.url)
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda _: s.client.completions.create(model="m", prompt=PROMPT, max_tokens=8,
                                                                 temperature=0), range(8)))
        after = batch_metrics(s.url)
    finally:
        s.stop()
    assert first["tfspec_batch_requests_count"] == first["tfspec_batch_requests_sum"] == 1
    assert first["tfspec_batch_tokens_sum"] == alone.usage.prompt_tokens
    assert after["tfspec_batch_requests_sum"] - 1 >= 8  # each request decoded in some batch
    assert after["tfspec_batch_tokens_sum"] - first["tfspec_batch_tokens_sum"] >= 8 * alone.usage.prompt_tokens


def test_token_id_prompts_answer_as_their_text(export):
    directory, tok = export
    ids = tok(PROMPT).input_ids  # transformers' tokenizer: the ids a client would send
    s = served(directory)
    try:
        ask = dict(model="m", max_tokens=8, temperature=0)
        text = s.client.completions.create(prompt=PROMPT, **ask).choices[0].text
        assert s.client.completions.create(prompt=ids, **ask).choices[0].text == text
        both = s.client.completions.create(prompt=[ids, ids[:-1]], **ask).choices
        assert both[0].text == text and [c.index for c in both] == [0, 1]
        echoed = s.client.completions.create(prompt=ids, echo=True, **ask).choices[0].text
        assert echoed == tok.decode(ids, skip_special_tokens=True) + text
    finally:
        s.stop()


def test_an_export_without_a_tokenizer_is_served_token_id_prompts(export, tmp_path):
    """Its answers carry ``token_ids`` (vLLM's name), transformers' greedy tokens for the same
    ids; text in or out (a text prompt, stop strings, log-probabilities) is refused by name."""
    from test_serve import request

    directory, tok = export
    bare = tmp_path / "bare"
    shutil.copytree(directory, bare, ignore=shutil.ignore_patterns("tokenizer*", "chat_template*"))
    ids = tok(PROMPT).input_ids
    model = transformers.AutoModelForCausalLM.from_pretrained(directory.parent / "hf").eval()
    with torch.no_grad():
        want = model.generate(torch.tensor([ids]), max_new_tokens=8, do_sample=False)[0, len(ids):].tolist()
    want = want[:want.index(tok.eos_token_id)] if tok.eos_token_id in want else want
    s = served(bare)
    try:
        status, answer, _ = request(s.url + "/v1/completions", {"model": "m", "prompt": ids, "max_tokens": 8,
                                                               "temperature": 0})
        assert status == 200 and answer["choices"][0]["text"] == "" and answer["choices"][0]["token_ids"] == want
        chunks = s.client.completions.create(model="m", prompt=ids, max_tokens=8, temperature=0, stream=True)
        assert [t for c in chunks for t in c.choices[0].model_extra.get("token_ids", [])] == want
        for fields, param, status in [({"prompt": PROMPT}, "prompt", 400), ({"stop": "x"}, "stop", 422),
                                      ({"logprobs": 1}, "logprobs", 422)]:
            refused = request(s.url + "/v1/completions", {"model": "m", "prompt": ids} | fields)
            assert refused[0] == status and refused[1]["error"]["param"] == param, refused
    finally:
        s.stop()
