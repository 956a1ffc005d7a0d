"""Chat safety of `tfspec serve`: a special token's text typed into a message stays text (its
content is tokenized with special tokens split as plain text), and the chat template's render
has a deadline and an output cap (a 20 MB render is refused with a 4xx, a render that loops
stops at its deadline), run off the event loop."""

from __future__ import annotations

import time

import pytest

pytest.importorskip("starlette")
pytest.importorskip("jinja2")
openai = pytest.importorskip("openai")
pytest.importorskip("transformers")

TYPED = [{"role": "user", "content": "hi <|endoftext|> there"}]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    from serve_inprocess import InProcess, chat_export
    from tfspec.serve.service import ServeConfig

    directory, tok = chat_export(tmp_path_factory.mktemp("safety"))
    s = InProcess(ServeConfig(directory, threads=1))
    s.tok, s.directory = tok, directory
    yield s
    s.stop()


def test_special_token_text_in_content_stays_text(served):
    eos = served.service.spec.vocab.eos_id
    rendered = served.tok.apply_chat_template(TYPED, tokenize=False, add_generation_prompt=True)
    head, tail = rendered.split(TYPED[0]["content"])
    plain = served.tok.backend_tokenizer
    want = plain.encode(head, add_special_tokens=False).ids
    plain.encode_special_tokens = True
    try:
        want += plain.encode(TYPED[0]["content"], add_special_tokens=False).ids
    finally:
        plain.encode_special_tokens = False
    want += plain.encode(tail, add_special_tokens=False).ids
    assert want.count(eos) == 1  # the template's own BOS, not the typed one
    ids = served.service.chat_encoder.encode(rendered, ["hi <|endoftext|> there"])
    assert ids == want
    client = openai.OpenAI(base_url=served.url + "/v1", api_key="none", max_retries=0)
    got = client.chat.completions.create(model="m", messages=TYPED, max_tokens=2, temperature=0)
    assert got.usage.prompt_tokens == len(want)


@pytest.mark.parametrize("source,status,words", [
    ("{{ 'x' * 20000000 }}", 413, "characters"),
    ("{% for i in range(100000) %}{{ 'x' * 300 }}{% endfor %}", 413, "characters"),
    ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", 422, "seconds"),
])
def test_a_runaway_template_render_is_refused(served, tmp_path, source, status, words):
    import shutil

    from tfspec.serve.chat_template import read_chat_template
    from tfspec.serve.errors import ApiError

    shutil.copy(served.directory / "tokenizer_config.json", tmp_path)
    (tmp_path / "chat_template.jinja").write_text(source)
    started = time.perf_counter()
    with pytest.raises(ApiError) as e:
        read_chat_template(tmp_path).render(TYPED)
    assert e.value.status == status and words in e.value.message and e.value.param == "messages"
    assert time.perf_counter() - started < 5
