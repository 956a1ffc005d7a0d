"""``tfspec export --format hf``: import -> export -> ``from_pretrained`` gives back the
original model's outputs; specs that are not exactly BERT or GPT-2 are refused with the reason."""

from __future__ import annotations

import json

import pytest
import torch

from hf_checkpoints import ARCHITECTURES, padded_batch, reference, save_checkpoint

transformers = pytest.importorskip("transformers")


@pytest.mark.parametrize("kind", ["gpt2", "bert", "bert-mlm"])
@torch.no_grad()
def test_round_trip_gives_the_original_outputs(cli, tmp_path, kind):
    original = save_checkpoint(kind, tmp_path / "original")
    imported, exported = tmp_path / "imported", tmp_path / "exported"
    assert cli("import", tmp_path / "original", "-o", imported)[0] == 0
    code, stdout, err = cli("export", imported, "--weights", imported / "model.safetensors", "--format", "hf",
                            "-o", exported)
    assert code == 0, stdout + err
    assert "parity: ok" in stdout
    assert json.loads((exported / "config.json").read_text())["architectures"] == [ARCHITECTURES[kind]]
    tokens, keep = padded_batch(kind, seed=7)
    want = original(input_ids=tokens, attention_mask=keep.long())
    got = reference(exported, kind)(input_ids=tokens, attention_mask=keep.long())
    for field in ("logits",) if kind != "bert" else ("last_hidden_state", "pooler_output"):
        a, b = getattr(got, field), getattr(want, field)
        a, b = (a[keep], b[keep]) if a.dim() == 3 else (a, b)
        assert torch.allclose(a, b, atol=1e-4), field


@torch.no_grad()
def test_shipped_zoo_spec_exports_as_its_family(cli, tmp_path, write_spec):
    """zoo/bert-base-mlm, shrunk, is BertForMaskedLM: written with random weights, transformers
    loads it and computes what tfspec computes from the same file (imported back)."""
    from tfspec import load_spec
    from tfspec.backends.torch import build_module
    from tfspec.backends.torch.checkpoint import load_weights

    spec = write_spec("""
        extends: zoo/bert-base-mlm
        name: small-bert
        d_model: 64
        heads: 4
        d_ff: 128
        vocab: {size: 200}
        encoder: {layers: 1}
    """)
    code, stdout, err = cli("export", spec, "--format", "hf", "-o", tmp_path / "hf")
    assert code == 0, stdout + err
    assert "BERT as BertForMaskedLM" in stdout and "parity: ok" in stdout
    assert "randomly initialised" in err
    assert cli("import", tmp_path / "hf", "-o", tmp_path / "back", "--quiet")[0] == 0
    ours = build_module(load_spec(tmp_path / "back")).eval()
    load_weights(ours, tmp_path / "back" / "model.safetensors")
    tokens, keep = padded_batch("bert")
    want = reference(tmp_path / "hf", "bert-mlm")(input_ids=tokens, attention_mask=keep.long()).logits
    assert torch.allclose(ours(tokens)[keep], want[keep], atol=1e-4)


@pytest.mark.parametrize("text, says", [
    ("extends: zoo/gpt2\nnorm: post\nfinal_norm: false\n", 'norm is "post" (GPT-2: "pre")'),
    ("extends: zoo/gpt2\npositional: {kind: sinusoidal}\n", 'positional.kind is "sinusoidal" (GPT-2: "learned")'),
    # without the pooler it is ElectraModel, which has no output bias
    ("extends: zoo/bert-base\npooler: false\noutput_bias: true\n", "closest: not ELECTRA: output_bias is true "
     "(ELECTRA: false)"),
    # the nearest families, with what to change, not every family's reason
    ("extends: tiny\n", 'closest: not Marian: output_bias is false (Marian: true), positional.layout is '
     '"interleaved" (Marian: "halves"); not BlenderbotSmall'),
    ("extends: zoo/t5-small\noutput_scale: 0.5\n", "output_scale is 0.5 (T5: 0.04419417382415922)"),
    ("extends: zoo/t5-small\npositional: {kind: relative, max_distance: 128}\n",
     'positional.kind is "relative" (T5: "relative_bias")'),
])
def test_spec_that_is_not_the_family_is_refused(cli, tmp_path, write_spec, text, says):
    code, _, err = cli("export", write_spec(text), "--format", "hf", "-o", tmp_path / "hf")
    assert code == 2 and len(err.splitlines()) == 1 and says in err, err
    assert err.count("; not ") < 3  # the closest families' reasons, not sixty
    assert not (tmp_path / "hf").exists()


def test_opset_is_an_onnx_option(cli, tmp_path):
    code, _, err = cli("export", "zoo/gpt2", "--format", "hf", "--opset", "18", "-o", tmp_path / "hf")
    assert code == 2 and "--opset applies to --format onnx" in err


def _import_and_export(cli, tmp_path):
    """``tmp_path/original`` imported, then exported with --format hf (parity checked): its directory."""
    imported, exported = tmp_path / "imported", tmp_path / "exported"
    assert cli("import", tmp_path / "original", "-o", imported, "--quiet")[0] == 0
    code, stdout, err = cli("export", imported, "--weights", imported / "model.safetensors", "--format", "hf",
                            "-o", exported)
    assert code == 0, stdout + err
    assert "parity: ok" in stdout
    return exported


@pytest.mark.parametrize("case", ["llama", "llama-llama3-rope", "mistral-window", "qwen2-tied"])
@torch.no_grad()
def test_llama_family_round_trip_gives_the_original_logits(cli, tmp_path, case):
    """Llama, Llama 3 rope scaling, Mistral's window and Qwen2's biases: import -> export ->
    transformers' from_pretrained computes what the original checkpoint did."""
    from test_import_llama import CASES, save

    original = save(case, tmp_path / "original")
    exported = _import_and_export(cli, tmp_path)
    config = json.loads((exported / "config.json").read_text())
    assert config["architectures"] == [CASES[case][1]]
    tokens = torch.randint(6, 120, (2, 24))
    got = getattr(transformers, CASES[case][1]).from_pretrained(exported).eval()(tokens).logits
    assert torch.allclose(got, original(tokens).logits, atol=1e-4)


def _seq2seq(case: str):
    """(save, class name, (source, target), pad id) of an encoder-decoder test case."""
    if case.startswith("t5"):
        import test_import_t5 as t5
        return t5.save, "T5ForConditionalGeneration", t5.batch(seed=7), t5.PAD
    import test_import_seq2seq as s2s
    return s2s.save, s2s.CASES[case][1], s2s.batch(case), s2s.CASES[case][2]["pad_token_id"]


@pytest.mark.parametrize("case", ["marian", "bart", "bart-scaled-relu", "t5", "t5-v1_1"])
@torch.no_grad()
def test_seq2seq_round_trip_gives_the_original_logits(cli, tmp_path, case):
    """Marian, BART, T5 (tied, scaled output) and T5 v1.1 (gated-gelu, its own lm_head): import
    -> export -> from_pretrained computes what the original checkpoint did."""
    save, architecture, (src, tgt), pad = _seq2seq(case)
    original = save(case, tmp_path / "original")
    exported = _import_and_export(cli, tmp_path)
    inputs = dict(input_ids=src, attention_mask=(src != pad).long(), decoder_input_ids=tgt)
    got = getattr(transformers, architecture).from_pretrained(exported).eval()(**inputs).logits
    assert torch.allclose(got, original(**inputs).logits, atol=1e-4)


@torch.no_grad()
def test_mistral_spec_whose_window_covers_its_positions_exports(cli, tmp_path, write_spec):
    """zoo/mistral-7b shrunk to 64 positions keeps its 4096-token window, which then reaches
    every earlier position: plain causal attention, which transformers computes (no window,
    or one at least as long). Reference: transformers' logits of the exported checkpoint."""
    from tfspec import load_spec
    from tfspec.backends.torch import build_module
    from tfspec.backends.torch.checkpoint import load_weights

    spec = write_spec("""
        extends: zoo/mistral-7b
        name: small-mistral
        d_model: 64
        heads: 4
        kv_heads: 2
        d_ff: 96
        vocab: {size: 120}
        positional: {kind: rotary, base: 10000, max_len: 64}
        decoder: {layers: 2}
    """)
    code, stdout, err = cli("export", spec, "--format", "hf", "-o", tmp_path / "hf")
    assert code == 0 and "parity: ok" in stdout, stdout + err
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert (config.get("sliding_window") or 64) >= 64
    assert cli("import", tmp_path / "hf", "-o", tmp_path / "back", "--quiet")[0] == 0
    ours = build_module(load_spec(spec)).eval()  # the spec as written, window and all, with the exported weights
    load_weights(ours, tmp_path / "back" / "model.safetensors")
    tokens = torch.randint(3, 120, (2, 64))
    theirs = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "hf").eval()
    torch.testing.assert_close(ours(tokens), theirs(tokens).logits, atol=1e-4, rtol=0)
