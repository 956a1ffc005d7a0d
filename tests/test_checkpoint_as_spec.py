"""A Hugging Face checkpoint directory wherever a SPEC is taken (issue 53, part 2): `validate`,
`report`, `graph` and `table1` read it as `tfspec import` reads it, without writing anything;
`export` imports it on the fly (weights streamed) and leaves nothing behind but the export.
Checked against transformers itself: its parameter count and its logits."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A random Llama (grouped keys, untied head) as `save_pretrained` writes it."""
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=211, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                      rms_norm_eps=1e-5, tie_word_embeddings=False)
    model = transformers.LlamaForCausalLM(config).eval()
    directory = tmp_path_factory.mktemp("llama")
    model.save_pretrained(directory)
    return directory, model


def test_report_and_validate_read_the_checkpoint_with_transformers_count(checkpoint, cli):
    directory, model = checkpoint
    before = sorted(p.name for p in directory.iterdir())
    code, out, err = cli("report", directory, "--format", "json")
    assert code == 0, err
    assert json.loads(out)["params"]["total"] == sum(p.numel() for p in model.parameters())
    code, out, err = cli("validate", directory)
    assert code == 0 and out.startswith(f"ok: {directory}:"), err
    code, out, _ = cli("graph", directory)
    assert code == 0 and json.loads(out)["nodes"]
    assert sorted(p.name for p in directory.iterdir()) == before  # read, nothing written beside it


def test_export_of_the_checkpoint_gives_transformers_logits(checkpoint, cli, tmp_path):
    from tfspec.backends.onnx import OnnxModel

    directory, model = checkpoint
    code, out, err = cli("export", directory, "-o", tmp_path / "onnx")
    assert code == 0 and "parity: ok" in out, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["onnx"]  # the on-the-fly import is gone
    tokens = np.random.default_rng(0).integers(4, 211, (2, 9))
    with torch.no_grad():
        reference = model(torch.from_numpy(tokens)).logits.numpy()
    ours = OnnxModel(tmp_path / "onnx", device="cpu").run("model", ["logits"], {
        "tgt": tokens, "attention_mask": np.ones_like(tokens)})[0]
    assert np.abs(ours - reference).max() < 1e-4


def test_a_directory_of_an_unknown_model_type_is_one_error_line(tmp_path, cli):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "no-such-model"}), encoding="utf-8")
    for command in (("report", tmp_path), ("export", tmp_path, "-o", tmp_path / "out")):
        code, _, err = cli(*command)
        assert code == 2 and err.startswith("error:") and "no-such-model" in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "out").exists()


def test_an_output_it_may_not_replace_is_refused_before_the_import(checkpoint, cli, tmp_path):
    """The refusal comes before a checkpoint's import, which can take minutes, and leaves no import behind."""
    directory, _ = checkpoint
    (tmp_path / "theirs").mkdir()
    (tmp_path / "theirs" / "notes.txt").write_text("not an export", encoding="utf-8")
    code, _, err = cli("export", directory, "--format", "optimum", "-o", tmp_path / "theirs")
    assert code == 2 and err.startswith("error:") and "not an earlier export" in err and "import:" not in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["theirs"]
    assert sorted(p.name for p in (tmp_path / "theirs").iterdir()) == ["notes.txt"]


def test_serve_takes_the_checkpoint_directory_and_decodes_as_transformers(checkpoint, tmp_path):
    """`tfspec serve CHECKPOINT` exports it into a scratch directory for the server's lifetime:
    its greedy continuation of token ids is transformers' `generate`, and the scratch is gone after."""
    import tempfile

    from test_serve import Server, request

    directory, model = checkpoint
    before = set(Path(tempfile.gettempdir()).glob("tfspec-serve-*"))
    server = Server(directory, tmp=tmp_path)
    try:
        prompt = [5, 6, 7, 8]
        status, body, _ = request(server.url + "/v1/completions", {"model": "m", "prompt": prompt, "max_tokens": 6,
                                                                   "temperature": 0})
    finally:
        assert server.stop() == 0
    assert status == 200, body
    with torch.no_grad():
        theirs = model.generate(torch.tensor([prompt]), max_new_tokens=6, do_sample=False, pad_token_id=0)[0].tolist()
    assert prompt + body["choices"][0]["token_ids"] == theirs, (body, theirs)
    assert set(Path(tempfile.gettempdir()).glob("tfspec-serve-*")) == before
