"""Stop tokens as data: a configuration that lists several end-of-sequence ids (Llama 3.1
Instruct: <|end_of_text|>, <|eom_id|>, <|eot_id|>) imports with all of them, and generation
stops on each, as transformers' ``generate`` does."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from tfspec.backends.torch import TorchDecoder, build_module
from tfspec.backends.torch.checkpoint import load_weights
from tfspec.search import SearchOptions, search
from tfspec.spec import Spec, load_spec

transformers = pytest.importorskip("transformers")

SMALL = {"vocab_size": 120, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64,
         "bos_token_id": 1, "eos_token_id": 2}
NEW = 12


def greedy(model, prompts: torch.Tensor, **options) -> list[list[int]]:
    """transformers' greedy continuation, cut after the first end-of-sequence id it emits."""
    out = model.generate(prompts, max_new_tokens=NEW, do_sample=False, pad_token_id=0, **options)
    stops = set(options.get("eos_token_id") or [])
    rows = []
    for row in out[:, prompts.shape[1]:].tolist():
        ends = [i for i, token in enumerate(row) if token in stops]
        rows.append(row[: ends[0]] if ends else row)  # tfspec returns what precedes the stop
    return rows


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A random Llama whose eos_token_id lists 2 and two tokens its greedy paths reach early."""
    path = tmp_path_factory.mktemp("stops") / "hf"
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**SMALL)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.2) if p.dim() > 1 else p.normal_(1.0, 0.2)
    prompts = torch.randint(6, 120, (3, 4), generator=torch.Generator().manual_seed(1))
    first, second = greedy(model, prompts, min_new_tokens=NEW)[:2]
    i = next(i for i in range(2, NEW) if first[i] not in first[:i])
    j = next(j for j in range(2, NEW) if second[j] not in second[:j] + [first[i]] and first[i] not in second[:j]
             and second[j] not in first[:i])
    stops = [2, first[i], second[j]]
    model.config.eos_token_id = model.generation_config.eos_token_id = stops
    model.save_pretrained(path)
    return path, model, prompts, stops, (i, j)


def test_import_keeps_every_end_of_sequence_id(checkpoint, cli, tmp_path):
    path, _, _, stops, _ = checkpoint
    assert cli("import", path, "-o", tmp_path / "ours", "--quiet")[0] == 0
    vocab = load_spec(tmp_path / "ours").vocab
    assert vocab.eos_id == 2 and vocab.stop_ids == tuple(sorted(stops))


def test_generation_stops_on_each_listed_id_as_transformers_does(checkpoint, cli, tmp_path):
    path, model, prompts, stops, ends = checkpoint
    want = greedy(model, prompts, eos_token_id=stops)
    assert [len(row) for row in want[:2]] == list(ends)  # the first two rows end on different listed ids
    assert cli("import", path, "-o", tmp_path / "ours", "--quiet")[0] == 0
    ours = build_module(load_spec(tmp_path / "ours")).eval()
    load_weights(ours, tmp_path / "ours" / "model.safetensors")
    options = SearchOptions(beam=1, max_length=NEW, max_extra=NEW)
    assert search(TorchDecoder(ours), None, options, prefix=prompts.numpy()) == want
    code, out, err = cli("export", tmp_path / "ours", "--weights", tmp_path / "ours" / "model.safetensors",
                         "-o", tmp_path / "onnx")
    assert code == 0, out + err
    from tfspec.backends.onnx import OnnxModel

    onnx = OnnxModel(tmp_path / "onnx").decoder()
    assert search(onnx, None, options, prefix=prompts.numpy()) == want
    for beam in (2, 3):  # every hypothesis a beam keeps ends at a listed id or at the limit
        for row in search(onnx, None, SearchOptions(beam=beam, max_length=NEW, max_extra=NEW), prefix=prompts.numpy()):
            assert not set(row) & set(stops)


def test_export_hf_writes_the_list_back(checkpoint, cli, tmp_path):
    path, _, _, stops, _ = checkpoint
    assert cli("import", path, "-o", tmp_path / "ours", "--quiet")[0] == 0
    code, out, err = cli("export", tmp_path / "ours", "--weights", tmp_path / "ours" / "model.safetensors",
                         "--format", "hf", "-o", tmp_path / "back")
    assert code == 0, out + err
    written = json.loads((tmp_path / "back" / "config.json").read_text())["eos_token_id"]
    assert written[0] == 2 and sorted(written) == sorted(stops)  # a set, eos_id first


def test_stop_ids_are_checked_against_the_vocabulary():
    base = {"name": "m", "vocab": {"size": 64, "eos_ids": [2, 70]}, "family": "decoder-only",
            "decoder": {"layers": 1, "block": ["causal_self_attention", "ffn"]}}
    with pytest.raises(ValueError, match="eos_ids"):
        Spec.model_validate(base)
    spec = Spec.model_validate(base | {"vocab": {"size": 64, "eos_ids": [9, 2, 9]}})
    assert spec.vocab.stop_ids == (2, 9) and np.array_equal(spec.vocab.stop_ids, [2, 9])
