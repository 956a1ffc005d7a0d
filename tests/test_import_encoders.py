"""`tfspec import` of the BERT-like encoders (RoBERTa, XLM-RoBERTa, CamemBERT, DistilBERT) against
transformers: small random models written by ``save_pretrained``, every weight perturbed, imported
through the CLI; outputs of the PyTorch backend and of the exported ONNX graph equal transformers'
on a right-padded batch (real positions only: transformers places RoBERTa's padding at row
padding_idx, tfspec after the row's tokens); ``export --format hf`` gives back the original
outputs; each configuration class's defaults imported config-only count what transformers counts."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from hf_checkpoints import perturb
from tfspec.backends.torch import build_module
from tfspec.backends.torch.checkpoint import load_weights
from tfspec.spec import load_spec

transformers = pytest.importorskip("transformers")

VOCAB, POSITIONS = 100, 40
ROBERTA = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
               max_position_embeddings=POSITIONS + 2, type_vocab_size=1, layer_norm_eps=1e-3)
"""roberta-base's shape, shrunk: positions start at row pad_token_id + 1 = 2, one token type.
layer_norm_eps off its default, so that an importer ignoring it computes something else."""
DISTILBERT = dict(vocab_size=VOCAB, dim=32, n_layers=2, n_heads=4, hidden_dim=48, max_position_embeddings=POSITIONS)
CASES = {
    "roberta": ("RobertaConfig", "RobertaModel", ROBERTA),
    "roberta-mlm": ("RobertaConfig", "RobertaForMaskedLM", ROBERTA),
    "xlm-roberta-mlm": ("XLMRobertaConfig", "XLMRobertaForMaskedLM", ROBERTA),
    # padding at id 3: positions start at row 4; two token types; the layers' ReLU
    "camembert": ("CamembertConfig", "CamembertModel", ROBERTA | dict(
        pad_token_id=3, max_position_embeddings=POSITIONS + 4, type_vocab_size=2, hidden_act="relu")),
    "distilbert": ("DistilBertConfig", "DistilBertModel", DISTILBERT | dict(activation="relu")),
    "distilbert-mlm": ("DistilBertConfig", "DistilBertForMaskedLM", DISTILBERT),
    # the sinusoids only initialise the stored table, which transformers reads (and trains)
    "distilbert-sinusoidal-mlm": ("DistilBertConfig", "DistilBertForMaskedLM",
                                  DISTILBERT | dict(sinusoidal_pos_embds=True, activation="gelu_new")),
}
SAVE = {"xlm-roberta-mlm": {"max_shard_size": "40KB"}, "distilbert-mlm": {"dtype": torch.float16}}


def save(case: str, path: Path):
    """A random ``case`` model written to ``path``; returns it in float32 (eval mode)."""
    config_class, model_class, fields = CASES[case]
    transformers.utils.logging.disable_progress_bar()
    torch.manual_seed(0)
    model = perturb(getattr(transformers, model_class)(getattr(transformers, config_class)(**fields)).eval())
    options = dict(SAVE.get(case, {}))
    model.to(options.pop("dtype", torch.float32)).save_pretrained(path, **options)  # in place: what was written
    return model.float()


def imported(case: str, tmp_path: Path, cli):
    """(transformers' model, the import's directory, tfspec's model with the imported weights)."""
    ref = save(case, tmp_path / "hf")
    code, _, err = cli("import", tmp_path / "hf", "-o", tmp_path / "ours", "--quiet")
    assert code == 0, err
    model = build_module(load_spec(tmp_path / "ours")).eval()
    load_weights(model, tmp_path / "ours" / "model.safetensors")
    return ref, tmp_path / "ours", model


def padded_batch(case: str, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Tokens (3, 13), row 1 right-padded after 8 tokens, and the mask of real tokens."""
    pad = CASES[case][2].get("pad_token_id", 0 if case.startswith("distilbert") else 1)
    gen = torch.Generator().manual_seed(seed)
    tokens = torch.randint(5, VOCAB - 1, (3, 13), generator=gen)
    tokens[1, 8:] = pad
    return tokens, tokens != pad


@torch.no_grad()
def outputs(model, tokens, keep) -> dict[str, torch.Tensor]:
    """transformers' outputs named as tfspec's ports."""
    out = model(input_ids=tokens, attention_mask=keep.long())
    if hasattr(out, "logits"):
        return {"logits": out.logits}
    pooled = {"pooled": out.pooler_output} if getattr(out, "pooler_output", None) is not None else {}
    return {"memory": out.last_hidden_state, **pooled}


def assert_close(got: dict, want: dict, keep) -> None:
    assert set(got) == set(want)
    for name, value in want.items():
        ours = torch.as_tensor(np.asarray(got[name]))
        if value.dim() == 3:  # real tokens only: padded positions are compared nowhere
            ours, value = ours[keep], value[keep]
        torch.testing.assert_close(ours, value, atol=1e-4, rtol=0, msg=name)


@pytest.mark.parametrize("case", CASES)
@torch.no_grad()
def test_import_matches_transformers(case, cli, tmp_path):
    ref, _, model = imported(case, tmp_path, cli)
    tokens, keep = padded_batch(case)
    want = outputs(ref, tokens, keep)
    assert_close(model.run({"src": tokens}, tuple(want)), want, keep)


@pytest.mark.parametrize("case", ["roberta", "camembert", "distilbert-mlm"])
def test_onnx_export_of_import_matches_transformers(case, cli, tmp_path):
    from tfspec.backends.onnx import OnnxModel

    ref, ours, _ = imported(case, tmp_path, cli)
    code, out, err = cli("export", ours, "--weights", ours / "model.safetensors", "-o", tmp_path / "onnx")
    assert code == 0, out + err
    tokens, keep = padded_batch(case)
    want = outputs(ref, tokens, keep)
    graph = "model" if "logits" in want else "encoder"
    got = OnnxModel(tmp_path / "onnx", device="cpu").run(graph, list(want), {"src": tokens.numpy()})
    assert_close(dict(zip(want, got)), want, keep)


@pytest.mark.parametrize("case, architecture", [
    ("roberta", "RobertaModel"), ("xlm-roberta-mlm", "XLMRobertaForMaskedLM"), ("camembert", "CamembertModel"),
    ("distilbert", "DistilBertModel"), ("distilbert-mlm", "DistilBertForMaskedLM")])
def test_hf_export_round_trip_gives_the_original_outputs(case, architecture, cli, tmp_path):
    """XLM-RoBERTa and CamemBERT compute what RoBERTa computes and come back under their own names."""
    ref, ours, _ = imported(case, tmp_path, cli)
    code, out, err = cli("export", ours, "--format", "hf", "-o", tmp_path / "exported")
    assert code == 0 and "parity: ok" in out, out + err
    config = json.loads((tmp_path / "exported" / "config.json").read_text())
    assert config["architectures"] == [architecture]
    back = getattr(transformers, architecture).from_pretrained(tmp_path / "exported").float().eval()
    tokens, keep = padded_batch(case, seed=7)
    assert_close(outputs(back, tokens, keep), outputs(ref, tokens, keep), keep)


DEFAULTS = [("RobertaConfig", "RobertaModel"), ("RobertaConfig", "RobertaForMaskedLM"),
            ("XLMRobertaConfig", "XLMRobertaModel"), ("XLMRobertaConfig", "XLMRobertaForMaskedLM"),
            ("CamembertConfig", "CamembertModel"), ("CamembertConfig", "CamembertForMaskedLM"),
            ("DistilBertConfig", "DistilBertModel"), ("DistilBertConfig", "DistilBertForMaskedLM")]
PUBLISHED = [("roberta-base", None), ("roberta-base", "RobertaModel"), ("xlm-roberta-base", None),
             ("camembert-base", None), ("distilbert-base-uncased", None),
             ("distilbert-base-uncased", "DistilBertModel")]
"""Published config.json files (tests/fixtures/hf), as their architecture and as the base model."""


@pytest.mark.parametrize("source, architecture", DEFAULTS + PUBLISHED)
def test_config_only_import_counts_as_transformers(source, architecture, cli, tmp_path):
    """A configuration class's defaults (roberta-base's layers with 512 rows of positions and two
    token types; distilbert-base-uncased's) or a published config.json, config only, counts
    every parameter transformers counts: RoBERTa's rows before the first position's are in
    tfspec's table too."""
    if source.endswith("Config"):
        config = getattr(transformers, source)()
        (tmp_path / "hf").mkdir()
        (tmp_path / "hf" / "config.json").write_text(config.to_json_string())
        directory = tmp_path / "hf"
    else:
        directory = Path(__file__).parent / "fixtures" / "hf" / source
        config = transformers.AutoConfig.from_pretrained(directory)
    architecture = architecture or config.architectures[0]
    code, _, err = cli("import", directory, "-o", tmp_path / "ours", "--architecture", architecture, "--quiet")
    assert code == 0, err
    with torch.device("meta"):
        expected = getattr(transformers, architecture)(config).num_parameters()
    code, out, _ = cli("report", tmp_path / "ours", "--format", "json")
    assert code == 0 and json.loads(out)["params"]["total"] == expected


@pytest.mark.parametrize("case, change, needle", [
    ("roberta", {"rotary_value": 1}, "unknown field rotary_value"),
    ("roberta", {"hidden_act": "gelu_fast"}, "hidden_act: \"gelu_fast\" is not supported"),
    ("roberta-mlm", {"hidden_act": "relu"}, "lm_head applies exact GELU whatever hidden_act says"),
    ("roberta", {"max_position_embeddings": 2}, "max_position_embeddings (2) must exceed pad_token_id + 1 (2)"),
    ("roberta", {"pad_token_id": None}, "pad_token_id must be an integer, got null"),
    ("roberta", {"position_embedding_type": "relative_key"}, "position_embedding_type: \"relative_key\""),
    ("xlm-roberta-mlm", {"type_vocab_size": 0}, "type_vocab_size must be at least 1"),
    ("distilbert", {"sinusoidal_pos_embds": "yes"}, "sinusoidal_pos_embds must be true or false, got \"yes\""),
    ("distilbert", {"activation": "quick_gelu"}, "activation: \"quick_gelu\" is not supported"),
    ("distilbert", {"dim": "32"}, "dim must be an integer, got \"32\""),
    ("distilbert-mlm", {"tie_word_embeddings": False}, "tie_word_embeddings: false is not supported"),
])
def test_unsupported_configs_are_refused_by_name(case, change, needle, cli, tmp_path):
    config_class, architecture, fields = CASES[case]
    config = json.loads(getattr(transformers, config_class)(**fields).to_json_string()) | change
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text(json.dumps(config | {"architectures": [architecture]}))
    code, _, err = cli("import", tmp_path / "hf", "-o", tmp_path / "ours")
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1, err
