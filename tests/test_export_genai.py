"""`tfspec export --format genai`: small random Llama and GPT-2 checkpoints written by
transformers, imported, exported for ONNX Runtime GenAI; onnxruntime-genai loads the directory
unchanged and its greedy tokens (batch 1, and batch 2 with prompts of different lengths, which
the runtime pads) equal tfspec's own ONNX decoding and transformers' `generate`."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from tfspec.backends.onnx import OnnxModel
from tfspec.search import SearchOptions, search

try:
    import onnxruntime_genai as og
    MISSING = ""
except ImportError as e:  # the README's environment installs it (tfspec[dev] and tfspec[genai])
    og, MISSING = None, f"onnxruntime-genai cannot be imported ({e}); pip install tfspec[genai]"
needs_genai = pytest.mark.skipif(og is None, reason=MISSING)

NEW = 20
PROMPTS = ([1, 17, 42, 9, 88, 23, 61], [1, 54, 7])


@pytest.fixture(scope="module", params=["llama", "gpt2"])
def exported(request, tmp_path_factory):
    """(kind, import directory, tfspec's ONNX export of it, transformers model, its tokenizer, weights file)."""
    from tests.test_generate_cli import saved_model, transformers  # skips without transformers
    from tfspec.cli import main

    kind, tmp = request.param, tmp_path_factory.mktemp(request.param)
    model, tok = saved_model(kind, tmp / "hf")
    special = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"} if kind == "llama" else \
        {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>"}
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, **special)
    tokenizer.save_pretrained(tmp / "hf")
    ours = tmp / "ours"
    assert main(["import", str(tmp / "hf"), "-o", str(ours), "--quiet"]) == 0
    weights = str(ours / "model.safetensors")
    assert main(["export", str(ours), "--weights", weights, "-o", str(tmp / "onnx"), "--no-check"]) == 0
    return kind, ours, tmp / "onnx", model, tokenizer, weights


def test_export_writes_genai_config_and_checks_parity(exported, cli, tmp_path):
    kind, ours, _, model, _, weights = exported
    code, out, err = cli("export", ours, "--weights", weights, "--format", "genai", "-o", tmp_path)
    assert code == 0 and "parity: ok" in out, out + err
    assert out.count("ok   ") == 4 and "tokenizer: tokenizer.json, tokenizer_config.json" in out
    config = json.loads((tmp_path / "genai_config.json").read_text())
    decoder = config["model"]["decoder"]
    assert config["model"]["type"] == {"llama": "llama", "gpt2": "decoder"}[kind]
    assert (decoder["num_hidden_layers"], decoder["num_key_value_heads"]) == (2, 2 if kind == "llama" else 4)
    assert config["search"]["past_present_share_buffer"] is False


@pytest.fixture(scope="module")
def genai_dir(exported, tmp_path_factory):
    from tfspec.cli import main

    _, ours, _, _, _, weights = exported
    directory = tmp_path_factory.mktemp("genai")
    assert main(["export", str(ours), "--weights", weights, "--format", "genai", "-o", str(directory),
                 "--no-check"]) == 0
    return directory


def genai_greedy(directory, prompts, pad: int) -> list[list[int]]:
    """Exactly NEW greedy tokens per prompt from onnxruntime-genai, prompts padded on the right."""
    model = og.Model(str(directory))
    width = max(map(len, prompts))
    params = og.GeneratorParams(model)
    params.set_search_options(batch_size=len(prompts), max_length=width + NEW, min_length=width + NEW)
    generator = og.Generator(model, params)
    generator.append_tokens(np.array([p + [pad] * (width - len(p)) for p in prompts], np.int32))
    while not generator.is_done():
        generator.generate_next_token()
    return [list(map(int, generator.get_sequence(i)[width:])) for i in range(len(prompts))]


@needs_genai
@pytest.mark.parametrize("batch", [1, 2])
def test_genai_greedy_tokens_equal_tfspec_and_transformers(exported, genai_dir, batch):
    _, _, onnx_dir, model, _, _ = exported
    prompts = list(PROMPTS[:batch])
    pad = json.loads((genai_dir / "genai_config.json").read_text())["model"]["pad_token_id"]
    decoder = OnnxModel(onnx_dir, device="cpu").decoder()
    options = SearchOptions(beam=1, min_length=NEW, max_length=NEW, max_extra=NEW)
    ours = [search(decoder, None, options, np.array([p]))[0] for p in prompts]
    with torch.no_grad():
        theirs = [model.generate(torch.tensor([p]), max_new_tokens=NEW, min_new_tokens=NEW, do_sample=False,
                                 pad_token_id=model.config.eos_token_id)[0, len(p):].tolist() for p in prompts]
    assert genai_greedy(genai_dir, prompts, pad) == ours == theirs


@needs_genai
def test_genai_tokenizer_reads_the_copied_files(exported, genai_dir):
    """GPT-2's byte-level BPE reads the same in onnxruntime-genai's tokenizer as in transformers'
    (for other tokenizer.json flavours that is onnxruntime-extensions' business, not the graph's)."""
    from tests.test_generate_cli import PROMPT

    kind, _, _, _, tokenizer, _ = exported
    if kind != "gpt2":
        pytest.skip("the test's Llama tokenizer (Metaspace BPE) is not one onnxruntime-extensions reads")
    ids = og.Tokenizer(og.Model(str(genai_dir))).encode(PROMPT)
    assert list(map(int, ids)) == tokenizer(PROMPT).input_ids


@pytest.mark.parametrize("spec,needle", [("tiny", "tiny is encoder-decoder"), ("zoo/bert-base", "is encoder-only"),
                                         ("zoo/mistral-7b", "is restricted_self_attention"),
                                         ("zoo/image-transformer-1d", "is local_1d_self_attention")])
def test_specs_genai_cannot_represent_are_refused(spec, needle, cli, tmp_path):
    code, out, err = cli("export", spec, "--format", "genai", "-o", tmp_path / "out")
    assert code == 2 and needle in err and err.startswith("error:") and len(err.strip().splitlines()) == 1, err
