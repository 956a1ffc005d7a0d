"""`tfspec export --int4` and the streamed export: the packing against onnxruntime's own
quantiser and its MatMulNBits kernel (numpy reference here), int4 exports of tiny imported
Llama, Qwen2 and Mistral checkpoints against transformers' float32 logits, a streamed export
holding one checkpoint tensor at a time, and decoding from int4 exports (generate, genai)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper

from tfspec.backends.onnx import OnnxModel
from tfspec.backends.onnx.passes.int4 import quantize
from tfspec.backends.onnx.passes.int4 import FLOAT_RMS
from tfspec.backends.onnx.streamed import export_streamed
from tfspec.tensors import read_header
from tfspec.ir import build_graph
from tfspec.spec import load_spec

transformers = pytest.importorskip("transformers")


def reference_dequantize(packed, scales, zero_points, k: int) -> np.ndarray:
    """MatMulNBits' weight as its documentation defines it, element by element in numpy:
    B[n, b, j] holds elements 2j (low nibble) and 2j+1 (high) of block b of row n; zero points
    pack two blocks a byte the same way (8 when absent)."""
    n, blocks = scales.shape
    w = np.zeros((n, blocks * packed.shape[2] * 2), np.float32)
    for row in range(n):
        for block in range(blocks):
            zp = 8 if zero_points is None else (zero_points[row, block // 2] >> (4 * (block % 2))) & 15
            for j, byte in enumerate(packed[row, block]):
                for half in (0, 1):
                    w[row, block * packed.shape[2] * 2 + 2 * j + half] = \
                        (((byte >> (4 * half)) & 15) - float(zp)) * scales[row, block]
    return w[:, :k]


@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("block", [32, 64])
def test_packing_equals_onnxruntime_quantizer(block, symmetric):
    from onnxruntime.capi._pybind_state import quantize_matmul_4bits

    n, k = 24, 160  # K not a multiple of 64: the last block is padded
    w = np.random.default_rng(0).standard_normal((n, k)).astype(np.float32)
    blocks = -(-k // block)
    theirs = np.zeros((n, blocks, block // 2), np.uint8), np.zeros((n, blocks), np.float32)
    their_zero = np.zeros((n, (blocks + 1) // 2), np.uint8)
    quantize_matmul_4bits(theirs[0], np.ascontiguousarray(w.T), theirs[1], their_zero, block, n, k, symmetric)
    packed, scales, zero = quantize(w, 4, block, symmetric)
    np.testing.assert_allclose(scales, theirs[1], rtol=1e-6)
    ours_w = reference_dequantize(packed, scales, zero, k)
    their_w = reference_dequantize(theirs[0], theirs[1], None if symmetric else their_zero, k)
    step = np.repeat(scales, block, axis=1)[:, :k]
    assert np.all(np.abs(ours_w - their_w) <= np.abs(step) * 1.001)  # a rounding tie may go either way
    real = (slice(None), slice(k // 2))  # bytes past K in the padded last block are never read
    assert (packed.reshape(n, -1)[real] == theirs[0].reshape(n, -1)[real]).mean() > 0.99
    if not symmetric:
        assert (zero == their_zero).all()


@pytest.mark.parametrize("symmetric", [True, False])
def test_matmulnbits_multiplies_by_our_weights(symmetric):
    """onnxruntime's kernel (accuracy_level 0: float products) times our packed bytes equals
    x W^T with W dequantised by the reference above."""
    n, k, block = 16, 96, 32
    rng = np.random.default_rng(1)
    w, x = rng.standard_normal((n, k)).astype(np.float32), rng.standard_normal((5, k)).astype(np.float32)
    packed, scales, zero = quantize(w, 4, block, symmetric)
    inits = [onnx.numpy_helper.from_array(a, name) for a, name in
             ((packed, "B"), (scales, "scales")) + (() if symmetric else ((zero, "zp"),))]
    node = helper.make_node("MatMulNBits", ["x", "B", "scales"] + ([] if symmetric else ["zp"]), ["y"],
                            domain="com.microsoft", K=k, N=n, bits=4, block_size=block, accuracy_level=0)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [5, n])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("com.microsoft", 1)])
    y = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    want = x @ reference_dequantize(packed, scales, zero, k).T
    np.testing.assert_allclose(y, want, atol=1e-4)
    assert np.abs(want - x @ w.T).max() < 0.3 * np.abs(x @ w.T).max()  # and it is w, quantised


SMALL = {"vocab_size": 120, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64,
         "bos_token_id": 1, "eos_token_id": 2, "rms_norm_eps": 1e-3}
CASES = {"llama": ("LlamaConfig", "LlamaForCausalLM", {}),
         "mistral": ("MistralConfig", "MistralForCausalLM", {"sliding_window": 6}),
         "qwen2-tied": ("Qwen2Config", "Qwen2ForCausalLM", {"tie_word_embeddings": True, "bos_token_id": 5,
                                                            "eos_token_id": 5})}


def imported(case: str, tmp, cli, dtype=torch.float32, **changes):
    """A tiny random ``case`` checkpoint (weights ~N(0, 0.05): a trained model's spread, not
    the parity tests' 0.2 that makes every logit a near-tie), imported through the CLI."""
    from hf_checkpoints import perturb

    config_class, model_class, extra = CASES[case]
    torch.manual_seed(0)
    model = perturb(getattr(transformers, model_class)(getattr(transformers, config_class)(**SMALL | extra | changes)), 0.05)
    model.to(dtype).save_pretrained(tmp / "hf")
    code, _, err = cli("import", tmp / "hf", "-o", tmp / "ours", "--quiet")
    assert code == 0, err
    return model.float().eval(), tmp / "ours"


@pytest.mark.parametrize("case,options", [("llama", []), ("mistral", ["--int4-zero-points", "--int4-block", "64"]),
                                          ("qwen2-tied", ["--int4-embeddings", "int4"])])
def test_int4_export_of_imported_checkpoints_matches_float32_logits(case, options, cli, tmp_path):
    model, ours = imported(case, tmp_path, cli)
    code, out, err = cli("export", ours, "-o", tmp_path / "q4", "--int4", *options)
    assert code == 0 and "parity: ok" in out, out + err
    assert "at most 1 in memory at once" in out
    graph = onnx.load(str(tmp_path / "q4" / "decoder.onnx"), load_external_data=False).graph
    ops = [n.op_type for n in graph.node]
    assert ops.count("MatMulNBits") == 2 * 5 + 1 and "Gemm" not in ops  # qkv, o, w1, w3, w2 per layer; output
    tokens = torch.randint(6, 120, (2, 20))
    with torch.no_grad():
        want = model(tokens).logits.numpy()
    got = OnnxModel(tmp_path / "q4", device="cpu").logits(tgt=tokens.numpy())
    block = 64 if "64" in options else 32
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < FLOAT_RMS[block]
    manifest = json.loads((tmp_path / "q4" / "tfspec.json").read_text())
    assert manifest["int4"]["block_size"] == block and manifest["weights"]["file"] == "model.onnx.data"


def test_streamed_float_export_reads_each_tensor_once(cli, tmp_path):
    """The full-sequence and step graphs share one data file: every checkpoint tensor is read
    once, one at a time, and the float32 graphs equal transformers."""
    model, ours = imported("llama", tmp_path, cli, torch.bfloat16)
    assert {e.dtype for e in read_header(ours / "model.safetensors")[0].values()} == {"BF16"}  # kept bf16
    graph = build_graph(load_spec(ours))
    result, reader = export_streamed(graph, ours / "model.safetensors", tmp_path / "onnx", ["model", "decoder"],
                                     progress=False)
    assert reader.peak == 1 and reader.reads == len(graph.params)
    assert set(result.files) == {"model.onnx", "decoder.onnx", "model.onnx.data", "tfspec.json"}
    tokens = torch.randint(6, 120, (2, 20))
    with torch.no_grad():
        want = model(tokens).logits.numpy()
    np.testing.assert_allclose(OnnxModel(tmp_path / "onnx", device="cpu").logits(tgt=tokens.numpy()), want, atol=1e-4)


def test_int4_export_decodes_with_generate_and_onnxruntime_genai(cli, tmp_path):
    from tests.test_generate_cli import PROMPT, bpe

    tok = bpe("llama")
    model, ours = imported("llama", tmp_path, cli, vocab_size=tok.get_vocab_size())
    tok.save(str(ours / "tokenizer.json"))
    code, out, err = cli("export", ours, "-o", tmp_path / "q4", "--int4", "--generate")
    assert code == 0 and "parity: ok" in out and "generate.onnx" in out, out + err
    code, out, err = cli("generate", tmp_path / "q4", "--prompt", PROMPT, "--max-new-tokens", "8")
    assert code == 0 and "onnxruntime" in err and len(out) > len(PROMPT), err
    og = pytest.importorskip("onnxruntime_genai")
    code, out, err = cli("export", ours, "-o", tmp_path / "genai", "--int4", "--format", "genai")
    assert code == 0 and "parity: ok" in out, out + err
    prompt = [1, 17, 42, 9]
    params = og.GeneratorParams(genai := og.Model(str(tmp_path / "genai")))
    params.set_search_options(max_length=len(prompt) + 6, min_length=len(prompt) + 6)
    generator = og.Generator(genai, params)
    generator.append_tokens(np.array([prompt], np.int32))
    while not generator.is_done():
        generator.generate_next_token()
    from tfspec.search import SearchOptions, search

    options = SearchOptions(beam=1, min_length=6, max_length=6, max_extra=6)
    ours_tokens = search(OnnxModel(tmp_path / "q4", device="cpu").decoder(), None, options, np.array([prompt]))[0]
    assert list(map(int, generator.get_sequence(0)[len(prompt):])) == ours_tokens


@pytest.mark.parametrize("flags,needle", [(["--int8"], "leave out --int8"), (["--fp16"], "leave out --fp16"),
                                          ([], "add --int4")])
def test_int4_conflicts_are_refused(flags, needle, cli, tmp_path):
    extra = [] if flags else ["--int4-block", "64"]
    code, _, err = cli("export", "base", "-o", tmp_path, *(["--int4"] if flags else []), *flags, *extra)
    assert code == 2 and needle in err, err


def test_activation_aware_scales_protect_salient_channels():
    """Activations with a few channels 30x larger (what AWQ observed in LLMs): the searched
    scales cut the quantised product's error well below rounding to nearest's (numpy products)."""
    from tfspec.backends.onnx.passes.awq import _search
    from tfspec.backends.onnx.passes.int4 import dequantize

    rng = np.random.default_rng(0)
    w = rng.standard_normal((64, 128)).astype(np.float32)
    x = rng.standard_normal((256, 128)).astype(np.float32)
    x[:, rng.choice(128, 4, replace=False)] *= 30
    want = x @ w.T

    def error(s):
        packed, scales, zero = quantize(w * s, 4, 32, True)
        return np.linalg.norm(x @ (dequantize(packed, scales, zero, 4, 128) / s).T - want)

    s = _search(w, x, 32, True)
    assert s is not None and error(s) < 0.7 * error(np.ones(128, np.float32))


def test_calibrated_int4_export_end_to_end(cli, tmp_path):
    from tests.test_generate_cli import PROMPT, bpe

    tok = bpe("llama")
    _, ours = imported("llama", tmp_path, cli, vocab_size=tok.get_vocab_size())
    tok.save(str(ours / "tokenizer.json"))
    (tmp_path / "calibration.txt").write_text((PROMPT + "\n") * 4, encoding="utf-8")
    code, out, err = cli("export", ours, "-o", tmp_path / "awq", "--int4", "--int4-calibrate",
                         tmp_path / "calibration.txt")
    assert code == 0 and "parity: ok" in out and "activation-aware scales" in out, out + err
    assert "calibration: 4 lines" in err
    names = [t.name for t in onnx.load(str(tmp_path / "awq" / "model.onnx"), load_external_data=False).graph.initializer]
    assert any(n.endswith(".awq") for n in names)


def test_model_too_large_for_float32_is_checked_on_its_first_layer(cli, tmp_path, monkeypatch):
    """Where the float32 model does not fit, the export says so and checks the model cut to
    one layer, exported from the same weights the same way."""
    from tfspec.backends.onnx import streamed

    _, ours = imported("llama", tmp_path, cli)
    monkeypatch.setattr(streamed, "needs", lambda graph, written: streamed.Needs(1 << 50, 1 << 20, "w"))
    code, out, err = cli("export", ours, "-o", tmp_path / "q4", "--int4")
    assert code == 0 and "parity: ok" in out, out + err
    assert "checking its first layer" in err and out.count("first layer only: ") >= 9
    assert json.loads((tmp_path / "q4" / "tfspec.json").read_text())["spec"]["decoder"]["layers"] == 2


def test_export_that_cannot_fit_even_streamed_is_refused_by_name(cli, tmp_path, monkeypatch):
    from tfspec.backends.onnx import streamed

    _, ours = imported("llama", tmp_path, cli)
    monkeypatch.setattr(streamed, "available", lambda: 1 << 20)
    code, out, err = cli("export", ours, "-o", tmp_path / "q4", "--int4")
    assert code == 2 and "even streamed" in err and "self_attn.w_qkv in float32" in err, err  # its largest tensor
    assert not (tmp_path / "q4").exists() or not any((tmp_path / "q4").iterdir())


@pytest.fixture(scope="module")
def sample_tokenizer(tmp_path_factory):
    """1,000 sentencepiece pieces of the sample (trained outside a test: sentencepiece's log
    needs a real file descriptor, which captured output has not)."""
    from tfspec.data import sample_dir
    from tfspec.data.tokenizer import train_tokenizer

    return train_tokenizer(sample_dir(), 1000, out_dir=tmp_path_factory.mktemp("spm"))


def test_calibration_reads_text_with_the_tokenizer_given(cli, tmp_path, sample_tokenizer):
    """A spec without a tokenizer of its own (as a training run's export is) calibrates with the
    sentencepiece model of --tokenizer, the one the export ships."""
    model = sample_tokenizer
    spec = tmp_path / "lm.yaml"
    examples = Path(__file__).resolve().parents[1] / "examples"
    spec.write_text(f"extends: {examples / 'llama-lm.yaml'}\n"
                    "vocab: {size: 1000, pad_id: 0, unk_id: 0, bos_id: 1, eos_id: 2}\n", encoding="utf-8")
    (tmp_path / "calibration.txt").write_text("A short line of text.\nAnother one.\n", encoding="utf-8")
    code, out, err = cli("export", spec, "-o", tmp_path / "awq", "--int4", "--tokenizer", model,
                         "--int4-calibrate", tmp_path / "calibration.txt")
    assert code == 0 and "calibration: 2 lines" in err, out + err
