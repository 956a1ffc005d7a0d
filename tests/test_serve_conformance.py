"""OpenAI's routes of `tfspec serve` as the official `openai` client reads them: every field the
client declares nullable, sent as None, is its default (the answer is the one without it); and
every logprobs shape spells the text it scores, streamed as unary: completions' `tokens` joined
are the text and `text[text_offset:]` starts with each token, chat's `bytes` joined decode to
the content. Two tokenizers: GPT-2's byte-level BPE and Llama 2's SentencePiece layout
(Metaspace with byte fallback), where a token decoded alone loses its leading space and a
character may span several tokens (tfspec/serve/detokenize.py)."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

pytest.importorskip("starlette")
transformers = pytest.importorskip("transformers")
openai = pytest.importorskip("openai")

PROMPT = "Select the cell and click"
MESSAGES = [{"role": "user", "content": "Select the cell"}]


@pytest.fixture(scope="module", params=["gpt2", "llama"])
def export(request, tmp_path_factory):
    from serve_inprocess import chat_export, llama_chat_export

    return (chat_export if request.param == "gpt2" else llama_chat_export)(tmp_path_factory.mktemp(request.param))


@pytest.fixture(scope="module", params=["continuous", "static"])
def served(request, export):
    from serve_inprocess import InProcess
    from tfspec.serve.service import ServeConfig

    s = InProcess(ServeConfig(export[0], threads=1, batching=request.param))
    s.client = openai.OpenAI(base_url=s.url + "/v1", api_key="none", max_retries=0)
    yield s
    s.stop()


def nullable(method) -> list[str]:
    """The parameters the `openai` client declares nullable (``Optional[...]``, or None in a
    union), but ``prompt``: OpenAI documents it as required (the type allows None for an old
    default of its own models)."""
    declared = inspect.signature(method).parameters.items()
    return [name for name, p in declared if name != "prompt" and not name.startswith("extra_")
            and name != "timeout" and ("Optional[" in str(p.annotation) or ", None]" in str(p.annotation))]


def test_every_field_the_client_declares_nullable_is_accepted_as_none(served):
    completion_nulls, chat_nulls = nullable(served.client.completions.create), nullable(
        served.client.chat.completions.create)
    assert {"max_tokens", "temperature", "top_p", "echo", "presence_penalty"} <= set(completion_nulls)
    assert {"temperature", "top_p", "frequency_penalty", "logprobs", "n"} <= set(chat_nulls)
    done = served.client.completions.create(model="m", prompt=PROMPT, **dict.fromkeys(completion_nulls))
    assert done.usage.completion_tokens <= 16 and done.choices[0].logprobs is None  # OpenAI's default max_tokens
    chat = served.client.chat.completions.create(model="m", messages=MESSAGES, **dict.fromkeys(chat_nulls))
    assert chat.choices[0].message.role == "assistant" and chat.choices[0].logprobs is None


@pytest.mark.parametrize("route", ["completions", "chat"])
def test_an_optional_field_sent_as_null_answers_as_if_left_out(served, route):
    """Field by field, from the request schema itself (OpenAI's fields tfspec does not implement
    included): null is the default. ``top_k`` 1 keeps the answer greedy whatever the seed."""
    from test_serve import request
    from tfspec.serve.schemas import ChatRequest, CompletionRequest

    model, path, base = (CompletionRequest, "/v1/completions", {"prompt": PROMPT}) if route == "completions" else \
        (ChatRequest, "/v1/chat/completions", {"messages": MESSAGES})
    base = {"model": "m", "max_tokens": 4, "seed": 3, "top_k": 1} | base
    fields = [name for name, f in model.model_fields.items() if not f.is_required()] + list(model.unasked)
    for name in fields:
        left_out = {k: v for k, v in base.items() if k != name}
        without, with_null = (request(served.url + path, body) for body in (left_out, left_out | {name: None}))
        assert with_null[0] == without[0] == 200, (name, with_null[1])
        assert choice_text(with_null[1]) == choice_text(without[1]), name


def choice_text(answer: dict) -> str:
    choice = answer["choices"][0]
    return choice["text"] if "text" in choice else choice["message"]["content"]


def spelled_completion(text: str, logprobs, asked: int) -> None:
    """``logprobs`` (completions') against ``text``: tokens joined are the text, each at its
    offset; greedy: each token is the likeliest of its alternatives, under its own spelling."""
    tokens, offsets = logprobs.tokens, logprobs.text_offset
    assert "".join(tokens) == text
    assert offsets == np.cumsum([0] + [len(t) for t in tokens])[:-1].tolist()
    assert all(text[at:].startswith(token) for token, at in zip(tokens, offsets))
    for i, (token, logprob, top) in enumerate(zip(tokens, logprobs.token_logprobs, logprobs.top_logprobs)):
        assert len(top) <= asked and logprob <= 0
        incomplete = i == len(tokens) - 1 and text.endswith("\ufffd")  # the last token ends mid-character
        if asked and not incomplete:
            assert top[token] == pytest.approx(logprob) == pytest.approx(max(top.values())), (i, token, top)


def joined_completion(chunks) -> tuple[str, dict]:
    """(text, logprobs fields) of a completions stream, the chunks' concatenated."""
    text, fields = "", {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
    for chunk in chunks:
        for choice in chunk.choices:
            text += choice.text
            for key in fields:
                fields[key] += getattr(choice.logprobs, key) if choice.logprobs is not None else []
    return text, fields


@pytest.mark.parametrize("asked", [0, 3])
def test_completion_logprobs_spell_the_text_streamed_as_unary(served, asked):
    ask = dict(model="m", prompt=PROMPT, max_tokens=24, temperature=0, logprobs=asked)
    unary = served.client.completions.create(**ask)
    choice = unary.choices[0]
    spelled_completion(choice.text, choice.logprobs, asked)
    assert len(choice.logprobs.tokens) == unary.usage.completion_tokens
    text, fields = joined_completion(served.client.completions.create(**ask, stream=True))
    assert text == choice.text and fields == {key: getattr(choice.logprobs, key) for key in fields}
    stop = next((choice.text[i:i + 2] for i in range(3, len(choice.text) - 2)
                 if "\ufffd" not in choice.text[:i + 2] and choice.text[i:i + 2].strip()), None)
    if stop is not None:  # a stop string cuts the text and the last token's piece with it
        cut = served.client.completions.create(**ask, stop=stop).choices[0]
        assert cut.text == choice.text[:choice.text.index(stop)]
        spelled_completion(cut.text, cut.logprobs, asked)
        assert joined_completion(served.client.completions.create(**ask, stop=stop, stream=True))[0] == cut.text


def spelled_chat(content: str, entries, asked: int) -> None:
    """Chat's ``logprobs.content`` against ``content``: tokens and bytes joined are the content."""
    assert "".join(e.token for e in entries) == content
    assert bytes(b for e in entries for b in e.bytes).decode() == content
    for i, e in enumerate(entries):
        assert e.bytes == list(e.token.encode()) and len(e.top_logprobs) == asked
        assert all(t.bytes == list(t.token.encode()) for t in e.top_logprobs)
        if asked and not (i == len(entries) - 1 and content.endswith("\ufffd")):
            assert (e.top_logprobs[0].token, e.top_logprobs[0].logprob) == (e.token, pytest.approx(e.logprob))


@pytest.mark.parametrize("asked", [None, 2])
def test_chat_logprobs_bytes_join_to_the_content_streamed_as_unary(served, asked):
    ask = dict(model="m", messages=MESSAGES, max_tokens=24, temperature=0, logprobs=True, top_logprobs=asked)
    unary = served.client.chat.completions.create(**ask).choices[0]
    spelled_chat(unary.message.content, unary.logprobs.content, asked or 0)
    content, entries = "", []
    for chunk in served.client.chat.completions.create(**ask, stream=True):
        for choice in chunk.choices:
            content += choice.delta.content or ""
            entries += choice.logprobs.content if choice.logprobs is not None else []
    assert content == unary.message.content and entries == unary.logprobs.content


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_pieces_of_any_tokens_join_to_the_library_decoding(kind):
    """The detokenizer's pieces against the tokenizer library's decoding of the whole sequence:
    random continuations (byte tokens, lone spaces and special tokens among them) of prompts of
    real text; each token's piece is what its spelling in place gives, stop strings cut both.
    Where the library's decoding of a complete prefix is not a prefix of its decoding of the
    whole (byte fallback: a stray continuation byte after a one-byte token turns both into
    U+FFFD), no incremental reader can match it (TGI's and vLLM's read as this one): there the
    pieces join to the text read."""
    from test_generate_cli import bpe

    from serve_inprocess import byte_fallback_llama
    from tfspec.serve.detokenize import Detokenizer

    tok = bpe("gpt2") if kind == "gpt2" else byte_fallback_llama().backend_tokenizer
    decode = lambda ids: tok.decode(ids, skip_special_tokens=True)  # noqa: E731  (HFCodec.decode)
    rng, checked = np.random.default_rng(0), 0
    for trial in range(200):
        prompt = tok.encode(["Select the cell", "café 東京", "a"][trial % 3]).ids
        out = rng.integers(0, tok.get_vocab_size(), rng.integers(1, 20)).tolist()
        text = Detokenizer(decode, prompt, [])
        for token in out:
            text.push(token)
        whole = text.finish(out)
        assert whole == "".join(text.pieces)
        library = decode(prompt + out)
        readable = all(library.startswith(seen) or seen.endswith("\ufffd")
                       for seen in (decode(prompt + out[:k]) for k in range(len(out))))
        checked += readable
        assert whole == library[len(decode(prompt)):] or not readable, (trial, out)
        last = len(out) - 1 if whole.endswith("\ufffd") else len(out)  # the final read completes no character
        assert [text.spell(i, [t])[0] for i, t in enumerate(out[:last])] == text.pieces[:last], (trial, out)
        if len(whole) > 4 and whole[2:4].strip():
            cut = Detokenizer(decode, prompt, [whole[2:4]])
            cut.finish(out)
            assert cut.text == whole[:whole.index(whole[2:4])] == "".join(cut.pieces)
    assert checked > 100  # most random sequences read alike either way


def test_a_stream_sends_each_token_with_the_text_that_completes_it():
    """``Detokenizer.release``: the tokens settled are those whose pieces the released text
    holds, never one still waiting for the rest of its character or held back for a stop string."""
    from serve_inprocess import byte_fallback_llama
    from tfspec.serve.detokenize import Detokenizer

    tok = byte_fallback_llama().backend_tokenizer
    decode = lambda ids: tok.decode(ids, skip_special_tokens=True)  # noqa: E731
    prompt, out = tok.encode("Select").ids, tok.encode("the café 東京 menu").ids[1:]
    text, sent, settled = Detokenizer(decode, prompt, ["menu"]), "", []
    for k, token in enumerate(out, 1):
        text.push(token)
        sent += text.release()
        settled.append(text.settled)
        assert "".join(text.pieces[:text.settled]) == sent[:text.settled_chars] and text.settled_chars <= len(sent)
        if decode(prompt + out[:k]).endswith("\ufffd"):  # a character begun, not complete: its tokens wait
            assert text.settled < text.tokens
    assert sent == text.text == " the café 東京 " and text.stopped
    assert settled == sorted(settled) and settled[-1] == text.tokens and "".join(text.pieces) == text.text
