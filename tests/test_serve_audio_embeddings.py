"""`tfspec serve`'s `/v1/audio/transcriptions` and `/v1/embeddings`, end to end in a real server
process: a random tiny WhisperForConditionalGeneration (forced and suppressed tokens, a word-level
tokenizer) exported as `tfspec export CHECKPOINT` writes it transcribes tests/data/speech.wav, sent
as multipart/form-data by the official `openai` client and by hand, into the text `tfspec
transcribe` prints and transformers' `generate` decodes to (a random Wav2Vec2ForCTC's export: the
best path transformers' argmax gives); a random CLIPTextModelWithProjection's
export answers the `openai` client's embeddings with the ONNX graph's run directly (1e-5) and
transformers' `text_embeds`; a malformed form, an oversized upload, too long a recording and a
route the export does not serve are each one OpenAI-style error object."""

from __future__ import annotations

import io
import json
import uuid
import wave
from pathlib import Path

import numpy as np
import pytest
import torch

from hf_checkpoints import perturb, save_random
from test_serve import Server, request

pytest.importorskip("starlette")
transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

SPEECH = Path(__file__).parent / "data" / "speech.wav"
START, END = 94, 95
WHISPER = dict(vocab_size=96, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
               decoder_attention_heads=4, encoder_ffn_dim=48, decoder_ffn_dim=40, max_source_positions=1500,
               max_target_positions=32, num_mel_bins=80, pad_token_id=END, bos_token_id=END, eos_token_id=END,
               decoder_start_token_id=START, begin_suppress_tokens=None)
"""test_import_whisper's tiny Whisper: 32 decoder positions, so the route decodes 30 after its prompt."""
PROMPT = (START, 7)
"""decoder_start_token_id, then the forced token at position 1."""
MAX_BODY = 200_000
"""--max-body of the Whisper server: speech.wav (89 kB) fits, 300 kB does not."""


def _whisper_tokenizer():
    """Words w0..w93, then <|startoftranscript|> and <|endoftext|> (special: skipped when decoding)."""
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import WhitespaceSplit

    words = [f"w{i}" for i in range(START)] + ["<|startoftranscript|>", "<|endoftext|>"]
    backend = tokenizers.Tokenizer(WordLevel({w: i for i, w in enumerate(words)}, unk_token="w0"))
    backend.pre_tokenizer = WhitespaceSplit()
    return transformers.PreTrainedTokenizerFast(tokenizer_object=backend, bos_token=words[START],
                                                eos_token=words[END], pad_token=words[END],
                                                clean_up_tokenization_spaces=False)


@pytest.fixture(scope="module")
def whisper(tmp_path_factory):
    """(transformers' model, its tokenizer, the export, the server over it)."""
    from tfspec.cli import main

    root = tmp_path_factory.mktemp("whisper-serve")
    transformers.utils.logging.disable_progress_bar()
    torch.manual_seed(0)
    ref = perturb(transformers.WhisperForConditionalGeneration(transformers.WhisperConfig(**WHISPER)).eval(),
                  embed_positions=1.0, encoder_attn=0.1)
    config = ref.generation_config
    config.forced_decoder_ids, config.suppress_tokens, config.begin_suppress_tokens = [[1, 7]], [3, 40], [12]
    tok = _whisper_tokenizer()
    ref.save_pretrained(root / "hf")
    tok.save_pretrained(root / "hf")
    assert main(["export", str(root / "hf"), "-o", str(root / "onnx")]) == 0
    server = Server(root / "onnx", "--max-body", MAX_BODY, tmp=root)
    yield ref, tok, root / "onnx", server
    server.stop()


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    """(transformers' CLIPTextModelWithProjection, its tokenizer, the export, the server over it)."""
    from test_import_clip import TEXT, _tokenizer
    from tfspec.cli import main

    root = tmp_path_factory.mktemp("clip-serve")
    ref = save_random("CLIPTextModelWithProjection", transformers.CLIPTextConfig(**TEXT, projection_dim=24),
                      root / "hf")
    tok = _tokenizer()
    tok.save_pretrained(root / "hf")
    assert main(["export", str(root / "hf"), "-o", str(root / "onnx")]) == 0
    server = Server(root / "onnx", tmp=root)
    yield ref, tok, root / "onnx", server
    server.stop()


def _client(server):
    openai = pytest.importorskip("openai")
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0)


def _form(fields: dict, files: dict, boundary: str | None = None) -> tuple[bytes, str]:
    """(body, Content-Type) of a multipart/form-data form, written out as RFC 7578 has it."""
    boundary = boundary or uuid.uuid4().hex
    parts = [f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode()
             for k, v in fields.items()]
    parts += [f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"; filename="{name}"\r\n'
              f"Content-Type: audio/wav\r\n\r\n".encode() + data + b"\r\n" for k, (name, data) in files.items()]
    return b"".join(parts) + f"--{boundary}--\r\n".encode(), f"multipart/form-data; boundary={boundary}"


def _post(url: str, body: bytes, content_type: str):
    """(status, JSON or text) of a POST of ``body``."""
    import urllib.error
    import urllib.request

    req = urllib.request.Request(url, data=body, headers={"Content-Type": content_type})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            status, raw = r.status, r.read()
    except urllib.error.HTTPError as e:
        status, raw = e.code, e.read()
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw.decode()


def _one_error(status: int, answer, param: str | None, expected: int) -> str:
    """The message of an OpenAI-style error object, checked: its status, shape and field."""
    assert status == expected, answer
    assert set(answer) == {"error"} and set(answer["error"]) == {"message", "type", "param", "code"}, answer
    assert answer["error"]["type"] == "invalid_request_error" and answer["error"]["param"] == param, answer
    assert "Traceback" not in answer["error"]["message"]
    return answer["error"]["message"]


@torch.no_grad()
def test_transcription_equals_transcribe_and_generate(whisper, cli):
    from tfspec.data.audio import log_mel, read_wav

    ref, tok, export, server = whisper
    room = WHISPER["max_target_positions"] - len(PROMPT)
    features = torch.from_numpy(log_mel(read_wav(SPEECH))[None])
    ids = ref.generate(input_features=features, generation_config=ref.generation_config, max_new_tokens=room,
                       do_sample=False, num_beams=1)[0].tolist()
    ids = ids[:ids.index(END)] if END in ids else ids
    assert len(set(ids)) > 2  # not one token repeated: the comparison tells decoders apart
    want = tok.decode(ids, skip_special_tokens=True)
    assert len(want.split()) > 2, want
    code, out, err = cli("transcribe", export, SPEECH, "--max-new", room)
    assert code == 0 and out.strip() == want, err
    with SPEECH.open("rb") as f:
        assert _client(server).audio.transcriptions.create(model="whisper", file=f).text == want
    body, kind = _form({"model": "whisper", "response_format": "text", "temperature": "0"},
                       {"file": ("speech.wav", SPEECH.read_bytes())})
    assert _post(server.url + "/v1/audio/transcriptions", body, kind) == (200, want)
    assert request(server.url + "/v1/models")[1]["data"][0]["serves"] == ["/v1/audio/transcriptions"]


@pytest.fixture(scope="module")
def wav2vec2(tmp_path_factory):
    """(transformers' Wav2Vec2ForCTC, the export's directory, the server over it)."""
    from test_import_wav2vec2 import TINY, VOCAB
    from tfspec.cli import main

    root = tmp_path_factory.mktemp("wav2vec2-serve")
    ref = save_random("Wav2Vec2ForCTC", transformers.Wav2Vec2Config(**TINY), root / "hf")
    (root / "hf" / "vocab.json").write_text(json.dumps({token: i for i, token in enumerate(VOCAB)}))
    assert main(["import", str(root / "hf"), "-o", str(root / "ours"), "--quiet"]) == 0
    assert main(["export", str(root / "ours"), "--weights", str(root / "ours" / "model.safetensors"),
                 "-o", str(root / "onnx")]) == 0
    server = Server(root / "onnx", tmp=root)
    yield ref, root / "onnx", server
    server.stop()


@torch.no_grad()
def test_waveform_ctc_transcription_equals_transcribe_and_transformers(wav2vec2, cli):
    from itertools import groupby

    from test_import_wav2vec2 import VOCAB
    from tfspec.data.audio import read_wav
    from tfspec.data.waveform import Normalisation

    ref, export, server = wav2vec2
    values, mask = Normalisation().batch([read_wav(SPEECH)])
    argmax = ref(input_values=torch.from_numpy(values), attention_mask=torch.from_numpy(mask)).logits[0].argmax(-1)
    ids = [int(k) for k, _ in groupby(argmax.tolist()) if k != ref.config.pad_token_id]
    want = "".join(" " if VOCAB[i] == "|" else VOCAB[i] if len(VOCAB[i]) == 1 else chr(0xE000 + i) for i in ids)
    assert len(ids) > 3
    code, out, err = cli("transcribe", export, SPEECH)
    assert code == 0 and out.rstrip("\n") == want, err
    with SPEECH.open("rb") as f:
        assert _client(server).audio.transcriptions.create(model="wav2vec2", file=f).text == want


def _wav(seconds: float, rate: int = 1000) -> bytes:
    """8-bit mono silence of ``seconds`` at ``rate`` Hz."""
    out = io.BytesIO()
    with wave.open(out, "wb") as f:
        f.setnchannels(1), f.setsampwidth(1), f.setframerate(rate)
        f.writeframes(bytes([128]) * int(seconds * rate))
    return out.getvalue()


def test_bad_uploads_are_one_openai_error(whisper):
    *_, server = whisper
    url, speech = server.url + "/v1/audio/transcriptions", SPEECH.read_bytes()
    body, kind = _form({"model": "whisper"}, {"file": ("speech.wav", speech)}, boundary="b0undary")
    for cut in (body[:-len("--b0undary--\r\n")], body[1:], body.replace(b"form-data; ", b"", 1)):
        assert "not multipart/form-data" in _one_error(*_post(url, cut, kind), "body", 400)
    assert "multipart/form-data" in _one_error(*_post(url, body, "application/json"), "body", 400)
    assert "boundary" in _one_error(*_post(url, body, "multipart/form-data"), "body", 400)
    big, kind = _form({"model": "whisper"}, {"file": ("big.wav", b"\0" * (MAX_BODY + 100_000))})
    assert "over 200,000 bytes" in _one_error(*_post(url, big, kind), "body", 413)
    long, kind = _form({"model": "whisper"}, {"file": ("long.wav", _wav(31))})
    assert "31.0 s" in _one_error(*_post(url, long, kind), "file", 413)
    junk, kind = _form({"model": "whisper"}, {"file": ("notes.wav", b"not audio at all")})
    assert "not a PCM WAV file" in _one_error(*_post(url, junk, kind), "file", 400)
    for fields, param in [({"temperature": "0.4"}, "temperature"), ({"response_format": "verbose_json"},
                          "response_format"), ({"language": "en"}, "language"), ({"prompt": "w3 w4"}, "prompt")]:
        body, kind = _form({"model": "whisper", **fields}, {"file": ("speech.wav", speech)})
        _one_error(*_post(url, body, kind), param, 422)
    body, kind = _form({"model": "whisper"}, {})
    assert "file" in _one_error(*_post(url, body, kind), "file", 422)


def test_routes_the_export_does_not_serve_are_one_openai_error(whisper, clip):
    openai = pytest.importorskip("openai")
    *_, speech_server = whisper
    *_, text_server = clip
    status, answer, _ = request(speech_server.url + "/v1/embeddings", {"model": "whisper", "input": "w1"})
    assert "POST /v1/audio/transcriptions" in _one_error(status, answer, "model", 400)
    status, answer, _ = request(speech_server.url + "/v1/completions", {"model": "whisper", "prompt": "w1"})
    assert "does not serve POST /v1/completions" in _one_error(status, answer, "model", 400)
    body, kind = _form({"model": "clip"}, {"file": ("speech.wav", SPEECH.read_bytes())})
    status, answer = _post(text_server.url + "/v1/audio/transcriptions", body, kind)
    assert "POST /v1/embeddings" in _one_error(status, answer, "model", 400)
    with pytest.raises(openai.BadRequestError, match="does not serve"), SPEECH.open("rb") as f:
        _client(text_server).audio.transcriptions.create(model="clip", file=f)


TEXTS = ["a photo of a cat .", "an astronaut", "this is the dog ."]


@torch.no_grad()
def test_embeddings_equal_the_graph_and_transformers(clip):
    from tfspec.backends.onnx import OnnxModel

    ref, tok, export, server = clip
    got = _client(server).embeddings.create(model="clip", input=TEXTS)  # the client asks for base64
    assert [d.index for d in got.data] == [0, 1, 2]
    ids = [tok(text)["input_ids"] for text in TEXTS]
    assert got.usage.prompt_tokens == got.usage.total_tokens == sum(map(len, ids))
    model = OnnxModel(export, device="cpu", threads=1)
    for d, row in zip(got.data, ids):
        src = np.array([row], np.int64)
        direct = model.run("model", ["logits"], {"src": src, "attention_mask": np.ones_like(src)})[0][0]
        theirs = ref(input_ids=torch.from_numpy(src)).text_embeds[0].numpy()
        np.testing.assert_allclose(d.embedding, direct, atol=1e-5, rtol=0)
        np.testing.assert_allclose(d.embedding, theirs, atol=1e-5, rtol=0)
    status, floats, _ = request(server.url + "/v1/embeddings", {"model": "clip", "input": ids,
                                                                "encoding_format": "float"})
    assert status == 200 and floats["object"] == "list"
    assert [d["embedding"] for d in floats["data"]] == [list(map(float, d.embedding)) for d in got.data]
    one = request(server.url + "/v1/embeddings", {"model": "clip", "input": TEXTS[1], "dimensions": 24})[1]
    assert one["data"][0]["embedding"] == floats["data"][1]["embedding"]  # alone as in a batch of three


def test_bad_embedding_requests_are_one_openai_error(clip):
    *_, server = clip
    url = server.url + "/v1/embeddings"
    for body, param, status in [({"model": "clip", "input": "a cat", "dimensions": 8}, "dimensions", 422),
                                ({"model": "clip", "input": [[5, 999]]}, "input.0.1", 422),
                                ({"model": "clip", "input": "a " * 40}, "input", 400),
                                ({"model": "clip", "input": 5}, "input", 422),
                                ({"model": "clip", "input": "a", "encoding_format": "int8"}, "encoding_format", 422)]:
        _one_error(*request(url, body)[:2], param, status)
