"""`tfspec import` of XLM, FlauBERT and RemBERT against transformers: small random models written by
``save_pretrained``, every weight perturbed, imported through the CLI; outputs of the PyTorch
backend and of the exported ONNX graph equal transformers' within 1e-4 at the real tokens of a
right-padded batch (XLM's language model tied and untied, ReLU over a sinusoid-initialised table,
a 3-language model without language embeddings, FlauBERT's pre-norm layers, RemBERT's
decoupled input and output embeddings, their task heads); ``export --format hf`` gives the
original logits back; each configuration class's defaults (and xlm-mlm-100-1280's shape), config
only, count what transformers counts; configurations tfspec cannot compute exactly are one error
line naming the field."""

from __future__ import annotations

import functools
import json

import numpy as np
import pytest
import torch

from hf_checkpoints import (assert_config_imports_at_count, assert_hf_round_trip, right_padded, save_random,
                            transformers_count)
from tfspec.backends.onnx import OnnxModel
from tfspec.backends.torch import build_module
from tfspec.backends.torch.checkpoint import load_weights
from tfspec.errors import TfspecError
from tfspec.interop.hf.imports import import_checkpoint
from tfspec.spec import load_spec

transformers = pytest.importorskip("transformers")

VOCAB, POSITIONS = 100, 40
XLM = dict(vocab_size=VOCAB, emb_dim=32, n_layers=2, n_heads=4, max_position_embeddings=POSITIONS,
           layer_norm_eps=1e-3)
"""xlm-mlm-en-2048's shape, shrunk (feed-forward 4 x 32 wide); pad 2 as in XLM's vocabulary;
layer_norm_eps off its default, so that an importer ignoring it computes something else."""
REMBERT = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
               input_embedding_size=16, output_embedding_size=24, max_position_embeddings=POSITIONS,
               layer_norm_eps=1e-3, bos_token_id=1, eos_token_id=2, hidden_dropout_prob=0.1)
"""google/rembert's decoupling, shrunk: inputs 16 wide under 32, the head's output embedding 24."""
CASES = {
    "xlm-lm": ("XLMConfig", "XLMWithLMHeadModel", XLM),
    # an output embedding of its own, ReLU, the sinusoids only initialising the stored table
    "xlm-untied": ("XLMConfig", "XLMWithLMHeadModel", XLM | dict(
        tie_word_embeddings=False, gelu_activation=False, sinusoidal_embeddings=True)),
    # xlm-mlm-100-1280's way: several languages, no language embeddings
    "xlm-languages": ("XLMConfig", "XLMModel", XLM | dict(n_langs=3, use_lang_emb=False)),
    "xlm-tokens": ("XLMConfig", "XLMForTokenClassification", XLM | dict(num_labels=3)),
    # sequence_summary: the first position itself, projected to the labels
    "xlm-sequence": ("XLMConfig", "XLMForSequenceClassification", XLM | dict(num_labels=3)),
    "flaubert-sequence": ("FlaubertConfig", "FlaubertForSequenceClassification", XLM | dict(num_labels=2)),
    "xlm-answers": ("XLMConfig", "XLMForQuestionAnsweringSimple", XLM),
    # LayerNorms before the sub-layers, the embeddings' one kept, none after the last layer
    "flaubert-lm": ("FlaubertConfig", "FlaubertWithLMHeadModel", XLM | dict(pre_norm=True, layerdrop=0.2)),
    "flaubert-post": ("FlaubertConfig", "FlaubertWithLMHeadModel", XLM | dict(gelu_activation=False)),
    "rembert": ("RemBertConfig", "RemBertModel", REMBERT),
    "rembert-lm": ("RemBertConfig", "RemBertForMaskedLM", REMBERT | dict(output_embedding_size=16)),
    "rembert-sequence": ("RemBertConfig", "RemBertForSequenceClassification", REMBERT | dict(num_labels=3)),
}
PAD = {"rembert": 0}  # XLM and FlauBERT pad with 2


class NoCache:
    """Stands in for the key/value cache transformers 5's Flaubert creates and, with pre_norm,
    indexes per layer (``cache[i]``: a TypeError on its EncoderDecoderCache, before any output):
    each layer gets none, which is all an encoder's forward reads."""

    def get_seq_length(self) -> int:
        return 0

    def __getitem__(self, layer: int) -> None:
        return None


def _save(case: str, path):
    config_class, architecture, fields = CASES[case]
    ref = save_random(architecture, getattr(transformers, config_class)(**fields), path)
    return functools.partial(ref, cache=NoCache()) if fields.get("pre_norm") else ref


def _batch(case: str, seed: int = 1):
    return right_padded(VOCAB, PAD.get(case.split("-")[0], 2), seed)


@torch.no_grad()
def _expected(ref, tokens, keep) -> dict[str, torch.Tensor]:
    """transformers' outputs named as tfspec's ports (question answering's start and end stacked last)."""
    out = ref(input_ids=tokens, attention_mask=keep.long())
    if getattr(out, "start_logits", None) is not None:
        return {"logits": torch.stack([out.start_logits, out.end_logits], -1)}
    if getattr(out, "logits", None) is not None:
        return {"logits": out.logits}
    pooled = {"pooled": out.pooler_output} if getattr(out, "pooler_output", None) is not None else {}
    return {"memory": out.last_hidden_state, **pooled}


def _assert_close(got: dict, want: dict, keep) -> None:
    assert set(got) == set(want)
    for name, value in want.items():
        ours = torch.as_tensor(np.asarray(got[name]))
        if value.dim() == 3:  # real tokens only: padded positions are compared nowhere
            ours, value = ours[keep], value[keep]
        torch.testing.assert_close(ours, value, atol=1e-4, rtol=0, msg=name)


@pytest.mark.parametrize("case", CASES)
def test_import_matches_transformers_in_pytorch_and_onnx(case, cli, tmp_path):
    ref = _save(case, tmp_path / "hf")
    ours = tmp_path / "ours"
    code, _, err = cli("import", tmp_path / "hf", "-o", ours, "--quiet")
    assert code == 0, err
    tokens, keep = _batch(case)
    want = _expected(ref, tokens, keep)
    model = build_module(load_spec(ours)).eval()
    load_weights(model, ours / "model.safetensors")
    with torch.no_grad():
        _assert_close(model.run({"src": tokens}, tuple(want)), want, keep)
    code, out, err = cli("export", ours, "-o", tmp_path / "onnx")
    assert code == 0, out + err
    graph = "model" if "logits" in want else "encoder"
    got = OnnxModel(tmp_path / "onnx", device="cpu").run(graph, list(want), {"src": tokens.numpy()})
    _assert_close(dict(zip(want, got)), want, keep)


@pytest.mark.parametrize("case, architecture", [
    ("xlm-lm", "XLMWithLMHeadModel"), ("xlm-untied", "XLMWithLMHeadModel"),
    ("xlm-tokens", "XLMForTokenClassification"), ("xlm-sequence", "XLMForSequenceClassification"),
    ("rembert-lm", "RemBertForMaskedLM"),
    # a post-norm FlauBERT is XLM's computation
    ("flaubert-post", "XLMWithLMHeadModel"),
    # RemBertModel and its task classes compute what ALBERT's do with no layers shared: kept as RemBERT
    ("rembert-sequence", "RemBertForSequenceClassification")])
def test_hf_export_round_trip_gives_the_original_logits(case, architecture, cli, tmp_path):
    ref = _save(case, tmp_path / "hf")
    tokens, keep = _batch(case, seed=7)
    if case.endswith("sequence"):
        keep = torch.ones(len(tokens), dtype=torch.bool)  # one row per text
    assert_hf_round_trip(cli, tmp_path / "hf", ref, architecture, tokens, keep)


def test_pre_norm_flaubert_is_not_exported(cli, tmp_path):
    """transformers 5 cannot run a pre-norm FlauBERT (nor check its parity): export refuses it."""
    _save("flaubert-lm", tmp_path / "hf")
    assert cli("import", tmp_path / "hf", "-o", tmp_path / "ours", "--quiet")[0] == 0
    code, out, err = cli("export", tmp_path / "ours", "--format", "hf", "-o", tmp_path / "exported")
    assert code == 2 and "fits no Hugging Face family" in err and len(err.strip().splitlines()) == 1, out + err
    assert not (tmp_path / "exported").exists()


def test_question_answering_simple_exports_as_its_class(cli, tmp_path):
    """XLMForQuestionAnsweringSimple's answer_span head is written back under that class's name."""
    ref = _save("xlm-answers", tmp_path / "hf")
    assert cli("import", tmp_path / "hf", "-o", tmp_path / "ours", "--quiet")[0] == 0
    code, out, err = cli("export", tmp_path / "ours", "--format", "hf", "-o", tmp_path / "exported")
    assert code == 0 and "parity: ok" in out, out + err
    back = transformers.XLMForQuestionAnsweringSimple.from_pretrained(tmp_path / "exported").eval()
    tokens, keep = _batch("xlm-answers")
    _assert_close(_expected(back, tokens, keep), _expected(ref, tokens, keep), keep)


MLM_100 = dict(vocab_size=200000, emb_dim=1280, n_layers=16, n_heads=16, n_langs=100, use_lang_emb=False)
"""FacebookAI/xlm-mlm-100-1280's shape."""


@pytest.mark.parametrize("config_class, fields, architecture", [
    ("XLMConfig", {}, "XLMModel"), ("XLMConfig", {}, "XLMWithLMHeadModel"),
    ("XLMConfig", MLM_100, "XLMWithLMHeadModel"), ("XLMConfig", {"num_labels": 5}, "XLMForTokenClassification"),
    ("FlaubertConfig", {}, "FlaubertWithLMHeadModel"), ("FlaubertConfig", {"pre_norm": True}, "FlaubertModel"),
    ("RemBertConfig", {}, "RemBertModel"), ("RemBertConfig", {}, "RemBertForSequenceClassification"),
    ("RemBertConfig", {"output_embedding_size": 256}, "RemBertForMaskedLM"),
])
def test_config_only_import_counts_as_transformers(config_class, fields, architecture, cli, tmp_path):
    config = getattr(transformers, config_class)(**fields)
    config.architectures = [architecture]
    assert_config_imports_at_count(cli, tmp_path / "hf", config, architecture)


REMBERT_PUBLISHED = {
    "_name_or_path": "artefacts/pt_model", "architectures": ["RemBertModel"], "attention_probs_dropout_prob": 0,
    "bos_token_id": 312, "embedding_dropout_prob": 0, "embedding_size": 256, "eos_token_id": 313, "hidden_act": "gelu",
    "hidden_dropout_prob": 0, "hidden_size": 1152, "initializer_range": 0.02, "input_embedding_size": 256,
    "intermediate_size": 4608, "layer_norm_eps": 1e-12, "max_position_embeddings": 512, "model_type": "rembert",
    "num_attention_heads": 18, "num_hidden_layers": 32, "output_embedding_size": 1664, "pad_token_id": 0,
    "tie_word_embeddings": False, "transformers_version": "4.4.0.dev0", "type_vocab_size": 2, "use_cache": True,
    "vocab_size": 250300}
"""google/rembert's config.json, with the conversion's leftovers (embedding_size, embedding_dropout_prob)."""


def test_published_rembert_config_imports_at_transformers_count(cli, tmp_path):
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text(json.dumps(REMBERT_PUBLISHED))
    assert cli("import", tmp_path / "hf", "-o", tmp_path / "ours", "--quiet")[0] == 0
    code, out, _ = cli("report", tmp_path / "ours", "--format", "json")
    config = transformers.RemBertConfig.from_pretrained(tmp_path / "hf")
    assert code == 0 and json.loads(out)["params"]["total"] == transformers_count(config, "RemBertModel")


@pytest.mark.parametrize("model_type", ["xlm", "flaubert", "rembert"])
def test_a_config_without_fields_takes_the_config_class_defaults(model_type, tmp_path):
    """As tests/test_import_defaults.py checks every family: the fallbacks are the class's defaults."""
    full = transformers.AutoConfig.for_model(model_type).to_dict()
    assert _canonical(tmp_path, "bare", {"model_type": model_type}) == _canonical(tmp_path, "full", full)


def test_old_field_names_read_as_transformers_reads_them(tmp_path):
    """n_words, pad_index, bos_index and eos_index (xlm-mlm-en-2048's config.json) set the fields
    transformers' attribute_map gives them; the original code's share_inout_emb agrees with the tie."""
    new = json.loads(transformers.XLMConfig(**XLM).to_json_string())
    renames = {"vocab_size": "n_words", "pad_token_id": "pad_index", "bos_token_id": "bos_index",
               "eos_token_id": "eos_index"}
    old = {renames.get(k, k): v for k, v in new.items()} | {"share_inout_emb": True, "bptt": 256}
    assert _canonical(tmp_path, "old", old) == _canonical(tmp_path, "new", new)


def _canonical(tmp_path, name: str, config: dict) -> dict:
    (tmp_path / name).mkdir()
    (tmp_path / name / "config.json").write_text(json.dumps(config))
    return import_checkpoint(tmp_path / name, tmp_path / f"{name}-spec", name="m", progress=False).spec.canonical()


@pytest.mark.parametrize("case, change, needle", [
    ("xlm-lm", {"n_langs": 2}, "n_langs: 2 with use_lang_emb true is not supported"),
    ("xlm-lm", {"n_langs": 0}, "n_langs must be at least 1"),
    ("xlm-lm", {"causal": True}, "causal: true is not supported"),
    ("xlm-lm", {"asm": True}, "asm: true is not supported"),
    ("xlm-lm", {"is_encoder": False}, "is_encoder: false is not supported"),
    ("xlm-lm", {"gelu_activation": "true"}, "gelu_activation must be true or false, got \"true\""),
    ("xlm-lm", {"n_words": 50}, "n_words (50) differs from vocab_size (100)"),
    ("xlm-lm", {"share_inout_emb": False}, "share_inout_emb (false) differs from tie_word_embeddings (true)"),
    ("xlm-sequence", {"summary_type": "mean"}, "summary_type: \"mean\" is not supported"),
    ("xlm-sequence", {"summary_activation": "tanh"}, "summary_activation: \"tanh\" is not supported"),
    ("xlm-lm", {"architectures": ["XLMForQuestionAnswering"]}, "its SQuAD head"),
    ("flaubert-lm", {"pre_norm": 1}, "pre_norm must be true or false, got 1"),
    ("rembert-lm", {"output_embedding_size": 24}, "output_embedding_size: 24 is not supported with "
                                                  "input_embedding_size 16"),
    ("rembert", {"is_decoder": True}, "is_decoder: true is not supported"),
    ("rembert", {"embedding_size": 8}, "embedding_size (8) differs from input_embedding_size (16)"),
    ("rembert", {"type_vocab_size": 0}, "type_vocab_size must be at least 1"),
    ("rembert", {"architectures": ["RemBertForCausalLM"]}, "architecture 'RemBertForCausalLM' is not supported"),
])
def test_unsupported_configs_are_refused_by_name(case, change, needle, cli, tmp_path):
    config_class, architecture, fields = CASES[case]
    config = json.loads(getattr(transformers, config_class)(**fields).to_json_string())
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text(json.dumps(config | {"architectures": [architecture]} | change))
    code, _, err = cli("import", tmp_path / "hf", "-o", tmp_path / "ours")
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "ours").exists()


def test_language_embeddings_are_refused_rather_than_dropped(tmp_path):
    """A checkpoint holding lang_embeddings (xlm-mlm-enfr-1024's kind) is not imported without them."""
    save_random("XLMWithLMHeadModel", transformers.XLMConfig(**XLM, n_langs=2), tmp_path / "hf")
    with pytest.raises(TfspecError, match="use_lang_emb true is not supported"):
        import_checkpoint(tmp_path / "hf", tmp_path / "ours", name="m", progress=False)
