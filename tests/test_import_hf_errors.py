"""What ``tfspec import`` refuses: each case exits 2 with one ``error:`` line naming the field,
file or tensor, and leaves no OUT_DIR (nor a staging directory) behind."""

from __future__ import annotations

import json
import pickle

import pytest
import torch

from hf_checkpoints import save_checkpoint

pytest.importorskip("transformers")


def refused(cli, tmp_path, checkpoint, *extra) -> str:
    out = tmp_path / "out"
    code, stdout, err = cli("import", checkpoint, "-o", out, *extra)
    assert code == 2, stdout + err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "a staging directory was left"
    return lines[0]


def edit_config(path, **changes):
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps(config | changes))


def supported() -> str:
    """The families the refusal lists: every registered one, sorted (the first release's eight among them)."""
    from tfspec.interop.hf.family import FAMILIES
    from tfspec.interop.hf.imports import family_of  # noqa: F401  (registers the families)

    assert {"bart", "bert", "gpt2", "llama", "marian", "mistral", "qwen2", "t5"} <= FAMILIES.keys()
    return ", ".join(sorted(FAMILIES))


SUPPORTED = supported()


def test_unsupported_model_type(cli, tmp_path):
    (tmp_path / "mamba").mkdir()
    (tmp_path / "mamba" / "config.json").write_text(json.dumps({"model_type": "mamba", "hidden_size": 4096}))
    line = refused(cli, tmp_path, tmp_path / "mamba")
    assert line.endswith(f"model_type 'mamba' is not supported; tfspec imports: {SUPPORTED}")


def test_model_type_of_another_type(cli, tmp_path):
    """A list for model_type was a traceback (unhashable), found by fuzzing config.json."""
    (tmp_path / "odd").mkdir()
    (tmp_path / "odd" / "config.json").write_text(json.dumps({"model_type": ["gpt2"]}))
    assert refused(cli, tmp_path, tmp_path / "odd").endswith(f"model_type ['gpt2'] is not supported; tfspec imports: "
                                                             f"{SUPPORTED}")


@pytest.mark.parametrize("kind, field, value, says", [
    ("bert", "type_vocab_size", 0, "type_vocab_size must be at least 1"),
    ("bert", "position_embedding_type", "relative_key", "position_embedding_type: \"relative_key\" is not supported"),
    ("bert", "add_cross_attention", True, "add_cross_attention: true is not supported"),
    ("bert", "is_decoder", True, "is_decoder: true is not supported"),
    ("bert", "hidden_act", "quick_gelu", "hidden_act: \"quick_gelu\" is not supported"),
    ("gpt2", "scale_attn_by_inverse_layer_idx", True, "scale_attn_by_inverse_layer_idx: true is not supported"),
    ("gpt2", "reorder_and_upcast_attn", True, "reorder_and_upcast_attn: true is not supported"),
    ("gpt2", "scale_attn_weights", False, "scale_attn_weights: false is not supported"),
    ("gpt2", "tie_word_embeddings", False, "tie_word_embeddings: false is not supported"),
    ("gpt2", "rotary_dim", 64, "unknown field rotary_dim (64) in a gpt2 config"),
])
def test_config_field_that_changes_the_computation(cli, tmp_path, kind, field, value, says):
    checkpoint = tmp_path / "ckpt"
    save_checkpoint(kind, checkpoint)
    edit_config(checkpoint, **{field: value})
    line = refused(cli, tmp_path, checkpoint)
    assert str(checkpoint / "config.json") in line and says in line


def test_architecture_not_imported(cli, tmp_path):
    checkpoint = tmp_path / "ckpt"
    save_checkpoint("gpt2", checkpoint)
    line = refused(cli, tmp_path, checkpoint, "--architecture", "GPT2ForSequenceClassification")
    assert "architecture 'GPT2ForSequenceClassification' is not supported" in line
    assert line.endswith("(`--architecture GPT2Model` imports the base model without its task head)")


def test_truncated_safetensors(cli, tmp_path):
    checkpoint = tmp_path / "ckpt"
    save_checkpoint("gpt2", checkpoint)
    weights = checkpoint / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1000])
    line = refused(cli, tmp_path, checkpoint)
    assert f"{weights}: truncated: tensor " in line


def test_corrupt_safetensors_header(cli, tmp_path):
    checkpoint = tmp_path / "ckpt"
    save_checkpoint("bert", checkpoint)
    weights = checkpoint / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[8:20] = b"not json!!!!"
    weights.write_bytes(bytes(data))
    assert f"{weights}: corrupt safetensors header" in refused(cli, tmp_path, checkpoint)


def test_missing_shard(cli, tmp_path):
    checkpoint = tmp_path / "ckpt"
    save_checkpoint("bert", checkpoint, max_shard_size="30KB")
    shards = sorted(checkpoint.glob("model-*.safetensors"))
    assert len(shards) > 1
    shards[1].unlink()
    assert refused(cli, tmp_path, checkpoint) == f"error: {shards[1]}: missing shard named in model.safetensors.index.json"


def test_wrong_shape(cli, tmp_path):
    checkpoint = tmp_path / "ckpt"
    save_checkpoint("gpt2", checkpoint)
    edit_config(checkpoint, n_positions=50)  # the weights hold 40 positions
    line = refused(cli, tmp_path, checkpoint)
    assert "tensor 'transformer.wpe.weight' has shape [40, 32]; the configuration needs [50, 32]" in line


@pytest.mark.parametrize("change, says", [
    ("drop", "tensor 'h.1.mlp.c_fc.weight' [32, 128] is missing"),
    ("add", "unexpected tensor 'transformer.h.0.mlp.extra.weight'"),
])
def test_missing_or_unexpected_tensor(cli, tmp_path, change, says):
    from safetensors.torch import load_file, save_file

    checkpoint = tmp_path / "ckpt"
    save_checkpoint("gpt2", checkpoint)
    weights = checkpoint / "model.safetensors"
    tensors = load_file(str(weights))
    if change == "drop":
        del tensors["transformer.h.1.mlp.c_fc.weight"]
    else:
        tensors["transformer.h.0.mlp.extra.weight"] = torch.zeros(3)
    save_file(tensors, str(weights), metadata={"format": "pt"})
    assert says in refused(cli, tmp_path, checkpoint)


class Payload:
    def __reduce__(self):
        return (print, ("this pickle ran code",))


def test_pickled_weights_are_never_unpickled_freely(cli, tmp_path, capsys):
    checkpoint = tmp_path / "ckpt"
    save_checkpoint("gpt2", checkpoint)
    (checkpoint / "model.safetensors").unlink()
    (checkpoint / "pytorch_model.bin").write_bytes(pickle.dumps({"wte.weight": Payload()}))
    line = refused(cli, tmp_path, checkpoint)
    assert f"{checkpoint / 'pytorch_model.bin'}: not a readable weights file" in line


def test_output_directory_in_use(cli, tmp_path):
    checkpoint = tmp_path / "ckpt"
    save_checkpoint("gpt2", checkpoint)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep.txt").write_text("mine")
    code, _, err = cli("import", checkpoint, "-o", tmp_path / "out")
    assert code == 2 and "exists and is not an empty directory" in err
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["keep.txt"]
