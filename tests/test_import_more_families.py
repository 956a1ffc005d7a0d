"""`tfspec import` of mT5, Blenderbot, Megatron-BERT and ELECTRA against transformers: small random
models (every weight perturbed, Blenderbot's final_logits_bias drawn) written by
``save_pretrained``, imported through the CLI; outputs of the PyTorch backend and of the exported
ONNX graphs equal transformers' at the real tokens of a right-padded batch, greedy decoding of the
encoder-decoders (PyTorch, and onnxruntime's KV-cached step graph) equal to ``generate`` from each
model's decoder start, each default configuration counted as transformers counts, import ->
``export --format hf`` -> ``from_pretrained`` giving the original outputs back, and what tfspec
cannot compute refused in one line naming the field.

BlenderbotSmall is not imported: its decoder normalises the token embeddings before adding the
positions, where tfspec's ``embed_norm`` normalises embeddings + positions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from hf_checkpoints import perturb
from tfspec.backends.torch import build_module
from tfspec.backends.torch.checkpoint import load_weights
from tfspec.spec import load_spec
from test_import_encoders import assert_close, outputs
from test_import_seq2seq import assert_onnx_and_greedy_match

transformers = pytest.importorskip("transformers")

VOCAB = 90
BERT = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
            max_position_embeddings=40, layer_norm_eps=1e-3)
"""bert-base's shape, shrunk; layer_norm_eps off its default, so that an importer ignoring it computes
something else."""
MT5 = dict(vocab_size=VOCAB, d_model=32, d_kv=6, d_ff=48, num_layers=2, num_heads=4, relative_attention_num_buckets=8,
           relative_attention_max_distance=12, layer_norm_epsilon=1e-3)
"""MT5Config's gated-gelu and ids (pad 0 = decoder start, eos 1)."""
BLENDERBOT = dict(vocab_size=VOCAB, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                  decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=48, max_position_embeddings=40,
                  scale_embedding=True)
"""BlenderbotConfig's ids (pad 0, decoding from <s> 1, eos 2); scaled embeddings as published."""
CASES = {
    "mt5": ("MT5Config", "MT5ForConditionalGeneration", MT5),  # with an lm_head of its own, as published
    "mt5-model": ("MT5Config", "MT5Model", MT5),
    "blenderbot": ("BlenderbotConfig", "BlenderbotForConditionalGeneration", BLENDERBOT),
    "megatron": ("MegatronBertConfig", "MegatronBertModel", BERT),
    # the head's activation is hidden_act, as BERT's
    "megatron-mlm": ("MegatronBertConfig", "MegatronBertForMaskedLM", BERT | dict(hidden_act="gelu_new")),
    "electra": ("ElectraConfig", "ElectraModel", BERT | dict(embedding_size=32, hidden_act="relu")),
    "electra-mlm": ("ElectraConfig", "ElectraForMaskedLM", BERT | dict(embedding_size=32)),
}
SEQ2SEQ = ("mt5", "mt5-model", "blenderbot")


def save(case: str, path: Path):
    """A random ``case`` model written to ``path``; returns it (eval mode)."""
    config_class, model_class, fields = CASES[case]
    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
    torch.manual_seed(0)
    model = getattr(transformers, model_class)(getattr(transformers, config_class)(**fields)).eval()
    if case == "mt5":  # transformers 5 loads an lm_head.weight the checkpoint holds untied
        model.lm_head.weight = torch.nn.Parameter(torch.empty_like(model.shared.weight))
    perturb(model, relative_attention_bias=1.0)  # T5's bias tables wide, so that every bucket matters
    if hasattr(model, "final_logits_bias"):
        with torch.no_grad():  # a buffer, which transformers initialises to zeros
            model.final_logits_bias.normal_(0.0, 0.2)
    model.save_pretrained(path)
    return model


def imported(case: str, tmp_path: Path, cli, *options):
    ref = save(case, tmp_path / "hf")
    code, _, err = cli("import", tmp_path / "hf", "-o", tmp_path / "ours", "--quiet", *options)
    assert code == 0, err
    model = build_module(load_spec(tmp_path / "ours")).eval()
    load_weights(model, tmp_path / "ours" / "model.safetensors")
    return ref, model


def ids(case: str) -> tuple[int, int, int]:
    """(pad, eos, decoder start) of ``case``, as its configuration class gives them."""
    config = getattr(transformers, CASES[case][0])()
    return config.pad_token_id, config.eos_token_id, config.decoder_start_token_id


def seq2seq_batch(case: str, seed: int = 1):
    """Sources (3, 11), row 1 right-padded after 6 tokens, each ending in eos; targets (3, 9)
    starting from the decoder start token."""
    pad, eos, start = ids(case)
    gen = torch.Generator().manual_seed(seed)
    src = torch.randint(3, VOCAB, (3, 11), generator=gen)
    src[:, -1] = eos
    src[1, 5], src[1, 6:] = eos, pad
    tgt = torch.randint(3, VOCAB, (3, 9), generator=gen)
    tgt[:, 0] = start
    return src, tgt


def encoder_batch(seed: int = 1):
    """Tokens (3, 13), row 1 right-padded (pad 0) after 8 tokens, and the mask of real tokens."""
    tokens = torch.randint(5, VOCAB, (3, 13), generator=torch.Generator().manual_seed(seed))
    tokens[1, 8:] = 0
    return tokens, tokens != 0


@torch.no_grad()
def seq2seq_logits(model, case: str, src, tgt):
    """transformers' logits; MT5Model's, which has no lm_head, through the shared embedding its
    spec ties the output to."""
    out = model(input_ids=src, attention_mask=(src != ids(case)[0]).long(), decoder_input_ids=tgt)
    return out.last_hidden_state @ model.shared.weight.T if case == "mt5-model" else out.logits


@pytest.mark.parametrize("case", CASES)
@torch.no_grad()
def test_outputs_match_transformers(case, cli, tmp_path):
    ref, model = imported(case, tmp_path, cli)
    if case in SEQ2SEQ:
        src, tgt = seq2seq_batch(case)
        torch.testing.assert_close(model(src, tgt), seq2seq_logits(ref, case, src, tgt), atol=1e-4, rtol=0)
    else:
        tokens, keep = encoder_batch()
        want = outputs(ref, tokens, keep)
        assert_close(model.run({"src": tokens}, tuple(want)), want, keep)
    if case.startswith("mt5"):
        assert model.graph.spec.tie_embeddings == ("inputs" if case == "mt5" else "all")


@pytest.mark.parametrize("case", ["mt5", "blenderbot"])
def test_onnx_export_and_greedy_decoding_match_transformers(case, cli, tmp_path):
    ref, _ = imported(case, tmp_path, cli)
    assert_onnx_and_greedy_match(ref, *seq2seq_batch(case), ids(case), cli, tmp_path)


@pytest.mark.parametrize("case", ["megatron-mlm", "electra"])
def test_onnx_export_of_encoders_matches_transformers(case, cli, tmp_path):
    from tfspec.backends.onnx import OnnxModel

    ref, _ = imported(case, tmp_path, cli)
    ours = tmp_path / "ours"
    code, out, err = cli("export", ours, "--weights", ours / "model.safetensors", "-o", tmp_path / "onnx")
    assert code == 0, out + err
    tokens, keep = encoder_batch()
    want = outputs(ref, tokens, keep)
    got = OnnxModel(tmp_path / "onnx", device="cpu").run("model" if "logits" in want else "encoder", list(want),
                                                          {"src": tokens.numpy()})
    assert_close(dict(zip(want, got)), want, keep)


@torch.no_grad()
def test_electra_discriminator_imports_as_its_base_model(cli, tmp_path):
    """The published discriminators (google/electra-base-discriminator) are ElectraForPreTraining:
    refused by name with the way out, ``--architecture ElectraModel``, which leaves their head out."""
    torch.manual_seed(0)
    discriminator = transformers.ElectraForPreTraining(transformers.ElectraConfig(**CASES["electra"][2])).eval()
    perturb(discriminator).save_pretrained(tmp_path / "hf")
    code, _, err = cli("import", tmp_path / "hf", "-o", tmp_path / "ours")
    assert code == 2 and "`--architecture ElectraModel` imports the base model" in err, err
    code, out, err = cli("import", tmp_path / "hf", "-o", tmp_path / "ours", "--architecture", "ElectraModel")
    assert code == 0 and "discriminator_predictions.dense.bias, ...): the discriminator's head" in out + err, out + err
    model = build_module(load_spec(tmp_path / "ours")).eval()
    load_weights(model, tmp_path / "ours" / "model.safetensors")
    tokens, keep = encoder_batch()
    want = outputs(discriminator.electra, tokens, keep)
    assert_close(model.run({"src": tokens}, tuple(want)), want, keep)


DEFAULTS = [("MT5Config", {}, "MT5ForConditionalGeneration"), ("MT5Config", {}, "MT5Model"),
            ("BlenderbotConfig", {}, "BlenderbotForConditionalGeneration"),
            ("BlenderbotConfig", {}, "BlenderbotModel"),
            ("MegatronBertConfig", {}, "MegatronBertModel"), ("MegatronBertConfig", {}, "MegatronBertForMaskedLM"),
            # electra-small with equal sizes, and electra-base-discriminator's shape (ElectraConfig() itself, with
            # narrower embeddings: test_import_embed_projection.py)
            ("ElectraConfig", {"embedding_size": 256}, "ElectraModel"),
            ("ElectraConfig", {"embedding_size": 768, "hidden_size": 768, "num_attention_heads": 12,
                               "intermediate_size": 3072}, "ElectraModel")]
"""The default configurations: mt5-small's shape (its config ties the output), blenderbot-3B's,
the 345M Megatron-BERT's."""


@pytest.mark.parametrize("config_class, changes, architecture", DEFAULTS)
def test_default_config_counts_as_transformers(config_class, changes, architecture, cli, tmp_path):
    """tfspec counts BlenderbotForConditionalGeneration's final_logits_bias (a buffer in
    transformers), shown on its own line as the output's projection parameters: the rest is
    transformers' count exactly."""
    config = getattr(transformers, config_class)(**changes)
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text(config.to_json_string())
    code, _, err = cli("import", tmp_path / "hf", "-o", tmp_path / "ours", "--architecture", architecture, "--quiet")
    assert code == 0, err
    with torch.device("meta"):
        theirs = getattr(transformers, architecture)(config)
    bias = theirs.final_logits_bias.numel() if hasattr(theirs, "final_logits_bias") else 0
    code, out, _ = cli("report", tmp_path / "ours", "--format", "json")
    params = json.loads(out)["params"]
    assert code == 0 and params["total"] == theirs.num_parameters() + bias
    if bias:
        assert params["output"] == {"projection": bias, "total": bias}


ROUND_TRIPS = {"mt5": "T5ForConditionalGeneration", "blenderbot": "BlenderbotForConditionalGeneration",
               "megatron": "MegatronBertModel", "megatron-mlm": "MegatronBertForMaskedLM", "electra": "ElectraModel",
               "electra-mlm": "BertForMaskedLM"}
"""What export writes: mT5 computes what T5 computes, an ELECTRA generator what BERT's masked LM does."""


@pytest.mark.parametrize("case", ROUND_TRIPS)
@torch.no_grad()
def test_hf_export_round_trip_gives_the_original_outputs(case, cli, tmp_path):
    original, _ = imported(case, tmp_path, cli)
    ours, exported = tmp_path / "ours", tmp_path / "exported"
    code, out, err = cli("export", ours, "--format", "hf", "-o", exported)
    assert code == 0 and "parity: ok" in out, out + err
    assert json.loads((exported / "config.json").read_text())["architectures"] == [ROUND_TRIPS[case]]
    back = getattr(transformers, ROUND_TRIPS[case]).from_pretrained(exported).eval()
    if case in SEQ2SEQ:
        src, tgt = seq2seq_batch(case, seed=7)
        torch.testing.assert_close(seq2seq_logits(back, case, src, tgt), seq2seq_logits(original, case, src, tgt),
                                   atol=1e-4, rtol=0)
    else:
        tokens, keep = encoder_batch(seed=7)
        assert_close(outputs(back, tokens, keep), outputs(original, tokens, keep), keep)


@pytest.mark.parametrize("case, change, needle", [
    ("electra-mlm", {"hidden_act": "relu"}, "its generator head applies exact GELU whatever hidden_act says"),
    ("electra", {"tie_word_embeddings": False}, "tie_word_embeddings: false is not supported"),
    ("megatron", {"hidden_act": "gelu_fast"}, "hidden_act: \"gelu_fast\" is not supported"),
    ("megatron", {"type_vocab_size": 0}, "type_vocab_size must be at least 1"),
    ("megatron-mlm", {"use_rotary": True}, "unknown field use_rotary"),
    # transformers 5's mT5 never scales its output and has no such field
    ("mt5", {"scale_decoder_outputs": True}, "unknown field scale_decoder_outputs"),
    ("mt5", {"feed_forward_proj": "gated-gelu_fast"}, "feed_forward_proj: \"gated-gelu_fast\" is not supported"),
    ("mt5", {"num_heads": "six"}, "num_heads must be an integer, got \"six\""),
    ("blenderbot", {"decoder_attention_heads": 2}, "decoder_attention_heads: 2 is not supported"),
    ("blenderbot", {"max_position_embeddings": None}, "max_position_embeddings must be an integer, got null"),
    ("blenderbot", {"tie_word_embeddings": False}, "tie_word_embeddings: false is not supported"),
    # FSMT's two vocabularies and untied, unshared embeddings: not imported
    ("blenderbot", {"model_type": "fsmt"}, "model_type 'fsmt' is not supported"),
])
def test_unsupported_or_malformed_configs_are_refused_by_name(case, change, needle, cli, tmp_path):
    config_class, architecture, fields = CASES[case]
    config = json.loads(getattr(transformers, config_class)(**fields).to_json_string())
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text(json.dumps(config | change | {"architectures": [architecture]}))
    code, _, err = cli("import", tmp_path / "hf", "-o", tmp_path / "ours")
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "ours").exists()
