"""`POST /v1/chat/completions` of `tfspec serve` (tfspec/serve/chat.py) on an imported random
GPT-2 whose tokenizer carries a chat template (saved by transformers: chat_template.jinja beside
tokenizer_config.json). References: transformers' `apply_chat_template` (the rendered text and
its ids), `tfspec generate` on that text alone (the answer), the `openai` client (the wire
shapes, streamed and not); the template runs sandboxed (an escape attempt is a JSON error)."""

from __future__ import annotations

import shutil

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tfspec.errors import TfspecError

pytest.importorskip("starlette")
pytest.importorskip("jinja2")
openai = pytest.importorskip("openai")
transformers = pytest.importorskip("transformers")

CHATML = ("{{ bos_token }}{% for m in messages %}{% if m['role'] == 'system' and not loop.first %}"
          "{{ raise_exception('the system message must come first') }}{% endif %}"
          "{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}{% endfor %}"
          "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
"""ChatML (Qwen2's, OpenHermes') with a BOS and a refusal, as published templates write them."""
MESSAGES = [{"role": "system", "content": "You help."}, {"role": "user", "content": "Select the cell"}]


@pytest.fixture(scope="module")
def chat_model(tmp_path_factory):
    """(ONNX export of an imported random GPT-2 of 256 positions, transformers' tokenizer)."""
    from serve_inprocess import chat_export

    return chat_export(tmp_path_factory.mktemp("chat"))


@pytest.fixture(scope="module")
def server(chat_model, tmp_path_factory):
    from test_serve import Server

    s = Server(chat_model[0], tmp=tmp_path_factory.mktemp("log"))
    yield s
    assert s.stop() == 0


def test_openai_chat_equals_generate_on_transformers_rendering(chat_model, server, cli):
    directory, tok = chat_model
    assert (directory / "chat_template.jinja").is_file()  # import and export carried it
    rendered = tok.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True)
    ids = tok.apply_chat_template(MESSAGES, tokenize=True, add_generation_prompt=True)["input_ids"]
    code, want, err = cli("generate", directory, "--prompt", rendered, "--max-new-tokens", 20)
    assert code == 0, err
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0)
    got = client.chat.completions.create(model="gpt2", messages=MESSAGES, max_tokens=20, temperature=0)
    chunks = list(client.chat.completions.create(model="gpt2", messages=MESSAGES, max_tokens=20, temperature=0,
                                                 stream=True))
    with pytest.raises(openai.UnprocessableEntityError) as refused:
        client.chat.completions.create(model="gpt2", messages=MESSAGES[::-1], max_tokens=2)
    with pytest.raises(openai.UnprocessableEntityError) as typo:
        client.chat.completions.create(model="gpt2", messages=[{"role": "usr", "content": "hi"}])
    answer = got.choices[0].message
    assert want.rstrip("\n") == tok.decode(ids, skip_special_tokens=True) + answer.content
    assert answer.role == "assistant" and got.usage.prompt_tokens == len(ids) and got.usage.completion_tokens > 5
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == answer.content
    assert chunks[0].choices[0].delta.role == "assistant" and chunks[-1].choices[0].finish_reason == "length"
    assert refused.value.body["param"] == "messages" and "system message must come first" in refused.value.message
    assert typo.value.body["param"] == "messages.0.role"


def test_template_renders_as_transformers_and_stays_sandboxed(chat_model, tmp_path):
    from tfspec.serve.errors import ApiError
    from tfspec.serve.chat_template import read_chat_template

    directory, tok = chat_model
    fancy = ("{% set ns = namespace(n=0) %}{% for m in messages %}{% if m.role == 'system' %}{% continue %}{% endif %}"
             "{% set ns.n = ns.n + 1 %}{% generation %}{{ ns.n }}: {{ m | tojson }}{% endgeneration %}\n{% endfor %}"
             "{{ eos_token }}")
    (tmp_path / "chat_template.jinja").write_text(fancy)
    shutil.copy(directory / "tokenizer_config.json", tmp_path)
    tok.chat_template = fancy
    want = tok.apply_chat_template(MESSAGES + [{"role": "user", "content": "<b>ü</b>"}], tokenize=False)
    ours = read_chat_template(tmp_path).render(MESSAGES + [{"role": "user", "content": "<b>ü</b>"}])
    assert ours == want
    marker = tmp_path / "escaped"
    (tmp_path / "chat_template.jinja").write_text(
        "{{ cycler.__init__.__globals__.os.system('touch " + str(marker) + "') }}")
    with pytest.raises(ApiError) as e:
        read_chat_template(tmp_path).render(MESSAGES)
    assert e.value.status == 422 and e.value.param == "messages" and not marker.exists()
    (tmp_path / "chat_template.jinja").write_text("{% for %}")
    with pytest.raises(TfspecError, match="does not compile"):
        read_chat_template(tmp_path)


ROLES = st.sampled_from(["system", "developer", "user", "assistant", "tool", "usr"])
TEXT = st.text(max_size=12)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(messages=st.lists(st.fixed_dictionaries({"role": ROLES, "content": TEXT | st.lists(
    st.fixed_dictionaries({"type": st.just("text"), "text": TEXT}), max_size=2)}), max_size=3))
def test_fuzzed_conversations_never_500(server, messages):
    from test_serve import request

    status, answer, _ = request(server.url + "/v1/chat/completions",
                                {"model": "gpt2", "messages": messages, "max_tokens": 1})
    assert status in (200, 413, 422), answer
