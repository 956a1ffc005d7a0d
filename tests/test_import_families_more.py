"""`tfspec import` of data2vec-text, XLM-RoBERTa-XL, BertGeneration and PLBART against transformers:
small random models (every weight perturbed, PLBART's final_logits_bias drawn) written by
``save_pretrained`` and imported through the CLI; outputs of the PyTorch backend and of the
exported ONNX graph equal transformers' at the real positions of a right-padded batch, PLBART's
greedy decoding equal to ``generate`` from its decoder start (bos: PLBartConfig has no
decoder_start_token_id), each configuration class's defaults counted as transformers counts,
import -> ``export --format hf`` -> ``from_pretrained`` giving the original outputs back, and
bad configurations refused in one line naming the field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from hf_checkpoints import perturb
from test_import_encoders import assert_close, outputs
from test_import_seq2seq import assert_onnx_and_greedy_match
from tfspec.backends.torch import build_module
from tfspec.backends.torch.checkpoint import load_weights
from tfspec.spec import load_spec

transformers = pytest.importorskip("transformers")

VOCAB, POSITIONS = 100, 40
ROBERTA = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
               max_position_embeddings=POSITIONS + 2, type_vocab_size=1, layer_norm_eps=1e-3)
"""roberta-base's shape, shrunk (positions from row pad_token_id + 1 = 2); layer_norm_eps off its
default, so that an importer ignoring it computes something else."""
ENCODERS = {
    "data2vec": ("Data2VecTextConfig", "Data2VecTextModel", ROBERTA | dict(type_vocab_size=2)),
    "data2vec-mlm": ("Data2VecTextConfig", "Data2VecTextForMaskedLM", ROBERTA),
    "xlm-roberta-xl": ("XLMRobertaXLConfig", "XLMRobertaXLModel", ROBERTA | dict(hidden_act="relu")),
    "xlm-roberta-xl-mlm": ("XLMRobertaXLConfig", "XLMRobertaXLForMaskedLM", ROBERTA),
    # pad 0, positions from row 0, no token types
    "bert-generation": ("BertGenerationConfig", "BertGenerationEncoder", dict(
        vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
        max_position_embeddings=POSITIONS, layer_norm_eps=1e-3, hidden_act="gelu_new")),
}
PLBART = dict(vocab_size=VOCAB, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
              decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=48, max_position_embeddings=64)
"""plbart-base's shape, shrunk, with PLBartConfig's defaults: scaled embeddings, pad 1, eos 2,
decoding from bos 0."""
CASES = ENCODERS | {"plbart": ("PLBartConfig", "PLBartForConditionalGeneration", PLBART)}
PLBART_IDS = (1, 2, 0)
"""PLBART's (pad, eos, decoder start)."""


def save(case: str, path: Path):
    """A random ``case`` model written to ``path``; returns it (eval mode)."""
    config_class, model_class, fields = CASES[case]
    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
    torch.manual_seed(0)
    model = perturb(getattr(transformers, model_class)(getattr(transformers, config_class)(**fields)).eval())
    if hasattr(model, "final_logits_bias"):
        with torch.no_grad():  # a buffer, which transformers initialises to zeros
            model.final_logits_bias.normal_(0.0, 0.2)
    model.save_pretrained(path)
    return model


def imported(case: str, tmp_path: Path, cli):
    """(transformers' model, tfspec's model with the imported weights in ``tmp_path / "ours"``)."""
    ref = save(case, tmp_path / "hf")
    code, _, err = cli("import", tmp_path / "hf", "-o", tmp_path / "ours", "--quiet")
    assert code == 0, err
    model = build_module(load_spec(tmp_path / "ours")).eval()
    load_weights(model, tmp_path / "ours" / "model.safetensors")
    return ref, model


def padded_batch(case: str, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Tokens (3, 13), row 1 right-padded after 8 tokens, and the mask of real tokens."""
    pad = 0 if case == "bert-generation" else 1
    tokens = torch.randint(5, VOCAB - 1, (3, 13), generator=torch.Generator().manual_seed(seed))
    tokens[1, 8:] = pad
    return tokens, tokens != pad


def plbart_batch(seed: int = 1):
    """Sources (3, 11), row 1 right-padded after 6 tokens, each ending in eos; targets (3, 9) from bos."""
    pad, eos, start = PLBART_IDS
    gen = torch.Generator().manual_seed(seed)
    src = torch.randint(3, VOCAB, (3, 11), generator=gen)
    src[:, -1] = eos
    src[1, 5], src[1, 6:] = eos, pad
    tgt = torch.randint(3, VOCAB, (3, 9), generator=gen)
    tgt[:, 0] = start
    return src, tgt


@pytest.mark.parametrize("case", ENCODERS)
@torch.no_grad()
def test_encoder_outputs_match_transformers_in_torch_and_onnx(case, cli, tmp_path):
    from tfspec.backends.onnx import OnnxModel

    ref, model = imported(case, tmp_path, cli)
    tokens, keep = padded_batch(case)
    want = outputs(ref, tokens, keep)
    assert_close(model.run({"src": tokens}, tuple(want)), want, keep)
    ours = tmp_path / "ours"
    code, out, err = cli("export", ours, "--weights", ours / "model.safetensors", "-o", tmp_path / "onnx")
    assert code == 0, out + err
    graph = "model" if "logits" in want else "encoder"
    got = OnnxModel(tmp_path / "onnx", device="cpu").run(graph, list(want), {"src": tokens.numpy()})
    assert_close(dict(zip(want, got)), want, keep)


def test_plbart_logits_and_greedy_decoding_match_transformers(cli, tmp_path):
    ref, model = imported("plbart", tmp_path, cli)
    src, tgt = plbart_batch()
    with torch.no_grad():
        want = ref(input_ids=src, attention_mask=(src != PLBART_IDS[0]).long(), decoder_input_ids=tgt).logits
        torch.testing.assert_close(model(src, tgt), want, atol=1e-4, rtol=0)
    assert_onnx_and_greedy_match(ref, src, tgt, PLBART_IDS, cli, tmp_path)


@pytest.mark.parametrize("case, architecture", [
    ("data2vec-mlm", "Data2VecTextForMaskedLM"), ("xlm-roberta-xl", "XLMRobertaXLModel"),
    ("xlm-roberta-xl-mlm", "XLMRobertaXLForMaskedLM"), ("bert-generation", "BertGenerationEncoder"),
    ("plbart", "PLBartForConditionalGeneration")])
@torch.no_grad()
def test_hf_export_round_trip_gives_the_original_outputs(case, architecture, cli, tmp_path):
    """data2vec-text computes what RoBERTa computes and PLBART what BART does; each comes back
    under the architecture it was imported from."""
    original = save(case, tmp_path / "hf")
    assert cli("import", tmp_path / "hf", "-o", tmp_path / "ours", "--quiet")[0] == 0
    code, out, err = cli("export", tmp_path / "ours", "--format", "hf", "-o", tmp_path / "exported")
    assert code == 0 and "parity: ok" in out, out + err
    assert json.loads((tmp_path / "exported" / "config.json").read_text())["architectures"] == [architecture]
    back = getattr(transformers, architecture).from_pretrained(tmp_path / "exported").float().eval()
    if case == "plbart":
        src, tgt = plbart_batch(seed=7)
        inputs = dict(input_ids=src, attention_mask=(src != PLBART_IDS[0]).long(), decoder_input_ids=tgt)
        torch.testing.assert_close(back(**inputs).logits, original(**inputs).logits, atol=1e-4, rtol=0)
    else:
        tokens, keep = padded_batch(case, seed=7)
        assert_close(outputs(back, tokens, keep), outputs(original, tokens, keep), keep)


DEFAULTS = [("Data2VecTextConfig", "Data2VecTextModel"), ("Data2VecTextConfig", "Data2VecTextForMaskedLM"),
            ("XLMRobertaXLConfig", "XLMRobertaXLModel"), ("XLMRobertaXLConfig", "XLMRobertaXLForMaskedLM"),
            ("BertGenerationConfig", "BertGenerationEncoder"), ("PLBartConfig", "PLBartModel"),
            ("PLBartConfig", "PLBartForConditionalGeneration")]


@pytest.mark.parametrize("config_class, architecture", DEFAULTS)
def test_default_config_counts_as_transformers(config_class, architecture, cli, tmp_path):
    """Each configuration class's defaults (data2vec-text-base, xlm-roberta-xl, the BBC encoder
    of bert_for_seq_generation, plbart-base), config only, count what transformers counts, plus
    PLBART's final_logits_bias (a buffer in transformers, tfspec's output bias)."""
    config = getattr(transformers, config_class)()
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text(config.to_json_string())
    code, _, err = cli("import", tmp_path / "hf", "-o", tmp_path / "ours", "--architecture", architecture, "--quiet")
    assert code == 0, err
    with torch.device("meta"):
        theirs = getattr(transformers, architecture)(config)
    bias = theirs.final_logits_bias.numel() if hasattr(theirs, "final_logits_bias") else 0
    code, out, _ = cli("report", tmp_path / "ours", "--format", "json")
    assert code == 0 and json.loads(out)["params"]["total"] == theirs.num_parameters() + bias


@pytest.mark.parametrize("case, change, needle", [
    ("data2vec", {"rotary_value": 1}, "unknown field rotary_value"),
    ("data2vec-mlm", {"hidden_act": "relu"}, "lm_head applies exact GELU whatever hidden_act says"),
    ("xlm-roberta-xl", {"position_embedding_type": "relative_key"}, "position_embedding_type: \"relative_key\""),
    ("xlm-roberta-xl", {"hidden_act": "swiglu"}, "hidden_act: \"swiglu\" is not supported"),
    ("bert-generation", {"type_vocab_size": 2}, "unknown field type_vocab_size"),
    ("bert-generation", {"is_decoder": True}, "is_decoder: true is not supported"),
    ("bert-generation", {"hidden_size": "32"}, "hidden_size must be an integer, got \"32\""),
    ("plbart", {"scale_embedding": "yes"}, "scale_embedding must be true or false"),
    ("plbart", {"decoder_attention_heads": 2}, "decoder_attention_heads: 2 is not supported"),
])
def test_bad_configs_are_refused_by_name(case, change, needle, cli, tmp_path):
    config_class, architecture, fields = CASES[case]
    config = json.loads(getattr(transformers, config_class)(**fields).to_json_string()) | change
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text(json.dumps(config | {"architectures": [architecture]}))
    code, _, err = cli("import", tmp_path / "hf", "-o", tmp_path / "ours")
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1, err
