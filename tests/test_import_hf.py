"""``tfspec import``: Hugging Face checkpoints in, checked against transformers and onnxruntime.

Each case saves a small random transformers model (single file, shards, float16, bfloat16,
pytorch_model.bin, TensorFlow's LayerNorm names), every weight far from its initialisation,
imports it through the CLI and compares tfspec's PyTorch backend, then the exported ONNX
graphs, with what transformers computes from the same files.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hf_checkpoints import ARCHITECTURES, GPT2_EOS, make_config, padded_batch, reference, save_checkpoint
from tfspec import load_spec
from tfspec.backends.torch import TorchDecoder, build_module
from tfspec.backends.torch.checkpoint import load_weights
from tfspec.search import SearchOptions, search

transformers = pytest.importorskip("transformers")

CASES = {
    "gpt2": ("gpt2", {}),
    "gpt2-sharded": ("gpt2", {"max_shard_size": "30KB"}),
    "gpt2-fp16": ("gpt2", {"dtype": torch.float16}),
    "gpt2-bf16": ("gpt2", {"dtype": torch.bfloat16}),
    "gpt2-pickled": ("gpt2", {"pickled": True}),
    "bert": ("bert", {}),
    "bert-sharded": ("bert", {"max_shard_size": "30KB"}),
    "bert-fp16": ("bert", {"dtype": torch.float16}),
    "bert-mlm": ("bert-mlm", {}),
    "bert-tf-names": ("bert", {"pickled": True, "tf_names": True}),
}


def imported(cli, tmp_path, case):
    """(kind, checkpoint dir, import dir, tfspec model with the imported weights)."""
    kind, save = CASES[case]
    checkpoint, out = tmp_path / case, tmp_path / "imported"
    save_checkpoint(kind, checkpoint, **save)
    code, stdout, err = cli("import", checkpoint, "-o", out)
    assert code == 0, err
    assert f"{ARCHITECTURES[kind]} -> {out}" in stdout
    model = build_module(load_spec(out)).eval()
    load_weights(model, out / "model.safetensors")
    return kind, checkpoint, out, model


def expected(kind, checkpoint, tokens, keep) -> dict[str, torch.Tensor]:
    """transformers' outputs on the batch, named as tfspec's ports."""
    with torch.no_grad():
        out = reference(checkpoint, kind)(input_ids=tokens, attention_mask=keep.long())
    if kind == "bert":
        return {"memory": out.last_hidden_state, "pooled": out.pooler_output}
    return {"logits": out.logits}


def assert_close(got, want, keep):
    for name, value in want.items():
        ours = torch.as_tensor(got[name])
        if value.dim() == 3:  # padded positions are compared nowhere: only real tokens
            ours, value = ours[keep], value[keep]
        assert torch.allclose(ours, value, atol=1e-4), f"{name}: max diff {(ours - value).abs().max():.2e}"


@pytest.mark.parametrize("case", CASES)
@torch.no_grad()
def test_import_matches_transformers(cli, tmp_path, case):
    kind, checkpoint, _, model = imported(cli, tmp_path, case)
    tokens, keep = padded_batch(kind)
    want = expected(kind, checkpoint, tokens, keep)
    port = "tgt" if kind == "gpt2" else "src"
    assert_close(model.run({port: tokens}, tuple(want)), want, keep)


@pytest.mark.parametrize("case", ["gpt2", "bert", "bert-mlm"])
def test_onnx_export_of_import_matches_transformers(cli, tmp_path, case):
    from tfspec.backends.onnx import OnnxModel

    kind, checkpoint, out, _ = imported(cli, tmp_path, case)
    code, stdout, err = cli("export", out, "--weights", out / "model.safetensors", "-o", tmp_path / "onnx")
    assert code == 0, stdout + err
    tokens, keep = padded_batch(kind)
    want = expected(kind, checkpoint, tokens, keep)
    onnx = OnnxModel(tmp_path / "onnx", device="cpu")
    port = "tgt" if kind == "gpt2" else "src"
    kind_of_graph = "encoder" if kind == "bert" else "model"
    got = dict(zip(want, onnx.run(kind_of_graph, list(want), {port: tokens.numpy()})))
    assert_close(got, want, keep)


def test_gpt2_greedy_generation_matches_transformers(cli, tmp_path):
    _, checkpoint, _, model = imported(cli, tmp_path, "gpt2")
    prompts = torch.tensor([[5, 17, 42, 8, 23], [61, 3, 77, 12, 30]])
    theirs = reference(checkpoint, "gpt2")
    generated = theirs.generate(prompts, attention_mask=torch.ones_like(prompts), do_sample=False,
                                max_new_tokens=20, pad_token_id=GPT2_EOS)[:, prompts.shape[1]:]
    ours = search(TorchDecoder(model), None, SearchOptions(beam=1, max_extra=20), prefix=prompts.numpy())
    for row, tokens in zip(generated.tolist(), ours):
        stop = row.index(GPT2_EOS) if GPT2_EOS in row else len(row)  # both end at <|endoftext|>
        assert tokens == row[:stop]
    assert sum(map(len, ours)) > 20  # the comparison covered real generation, not an immediate stop


@pytest.mark.parametrize("name, architecture, published", [
    ("bert-base-uncased", None, None), ("bert-base-uncased", "BertModel", 109_482_240),
    ("gpt2", None, 124_439_808), ("gpt2-medium", None, 354_823_168), ("distilgpt2", None, 81_912_576)])
def test_config_only_import_reports_transformers_count(cli, tmp_path, name, architecture, published):
    import json

    from conftest import REPO

    source = REPO / "tests/fixtures/hf" / name
    extra = ["--architecture", architecture] if architecture else []
    code, stdout, err = cli("import", source, "-o", tmp_path / name, *extra)
    assert code == 0, err
    assert sorted(p.name for p in (tmp_path / name).iterdir()) == ["spec.yaml"]
    code, stdout, _ = cli("report", tmp_path / name, "--format", "json")
    config = transformers.AutoConfig.from_pretrained(str(source))
    arch = architecture or config.architectures[0]
    with torch.device("meta"):
        counted = sum(p.numel() for p in getattr(transformers, arch)(config).parameters())
    assert json.loads(stdout)["params"]["total"] == counted
    assert published is None or counted == published


def test_import_copies_tokenizer_files_and_names_special_tokens(cli, tmp_path):
    checkpoint = tmp_path / "bert-ckpt"
    save_checkpoint("bert", checkpoint)
    words = ["[PAD]", "[unused0]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(94)]
    (checkpoint / "vocab.txt").write_text("\n".join(words) + "\n")
    (checkpoint / "tokenizer_config.json").write_text('{"do_lower_case": true}')
    code, _, err = cli("import", checkpoint, "-o", tmp_path / "out", "--name", "my-bert")
    assert code == 0, err
    assert {"vocab.txt", "tokenizer_config.json"} <= {p.name for p in (tmp_path / "out").iterdir()}
    spec = load_spec(tmp_path / "out")
    assert spec.name == "my-bert"
    assert (spec.vocab.unk_id, spec.vocab.bos_id, spec.vocab.eos_id, spec.vocab.mask_id) == (2, 3, 4, 5)
    assert np.isclose(spec.norm_eps, make_config("bert").layer_norm_eps)
    assert spec.reference.source.startswith("Hugging Face checkpoint my-bert")
