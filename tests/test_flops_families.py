"""FLOPs of every importable Hugging Face family against ``torch.utils.flop_counter`` counting
transformers' own model. Dense families: the default configuration (the published model's
shape) built on the meta device, eval mode, eager attention, 32 tokens. Families whose forward
pass cannot run on meta (routing picks rows by value, DeBERTa reads values): the tiny
configurations of their import tests, run on the CPU with eager experts. tfspec's count of the
imported configuration must equal transformers', or differ by what ``DIFFERENCES`` names."""

from __future__ import annotations

import sys
import tempfile
import warnings
from pathlib import Path

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from tfspec import build_graph
from tfspec.analysis.flops import analyze_flops, at, layer_values, op_flops

transformers = pytest.importorskip("transformers")
from transformers.models.auto.configuration_auto import CONFIG_MAPPING  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools" / "generators"))
import hf_coverage  # noqa: E402

from tfspec.interop.hf.family import FAMILIES  # noqa: E402
from tfspec.interop.hf.imports import import_checkpoint  # noqa: E402

N = 32
NOT_ON_META = {"deberta", "deberta-v2", "esm", "flaubert", "ibert", "megatron-bert", "nemotron", "rembert",
               "roformer", "xlm", "deepseek_v2", "deepseek_v3", "gpt_oss", "mixtral", "nemotron_h",
               "nllb-moe", "olmoe", "phimoe", "qwen2_moe", "qwen3_moe", "qwen3_next", "switch_transformers"}
"""Types counted on tiny configurations on the CPU instead (``TINY``), or not at all (``UNCOUNTED``)."""
UNCOUNTED = {
    "nllb-moe": "capacity-bounded routing: transformers' experts skip the tokens over capacity, which tfspec "
                "counts as routed",
    "switch_transformers": "capacity-bounded routing: as nllb-moe",
}


def _default_types() -> dict[str, str]:
    types, _ = hf_coverage.text_types()
    chosen = {}
    for model_type, classes in sorted(types.items()):
        family = FAMILIES.get(CONFIG_MAPPING[model_type].model_type)
        if family is not None and model_type not in NOT_ON_META:
            chosen[model_type] = next((c for c in classes if c in family.architectures), classes[0])
    return chosen


DEFAULTS = _default_types()


def _tiny() -> dict[str, tuple[str, str, dict]]:
    """case -> (config class, model class, fields), from the families' own import tests."""
    from tests import test_import_latent_attention as latent, test_import_moe_families as moe
    from tests import test_import_nemotron_h as nemotron, test_import_qwen3_next as qwen3_next

    cases = {case: (config, model, moe.SHAPE | fields) for case, (config, model, fields) in moe.CASES.items()}
    cases |= {f"deepseek-{case}": (f"{model}Config", f"{model}ForCausalLM", latent.SHAPE | fields)
              for case, (model, fields) in latent.CASES.items()}
    cases |= {f"nemotron_h-{case}": ("NemotronHConfig", "NemotronHForCausalLM", nemotron.SHAPE | fields)
              for case, fields in nemotron.CASES.items()}
    cases |= {f"qwen3_next-{case}": ("Qwen3NextConfig", "Qwen3NextForCausalLM", qwen3_next.SHAPE | fields)
              for case, fields in qwen3_next.CASES.items()}
    bert = {"vocab_size": 120, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
            "intermediate_size": 48, "max_position_embeddings": 64}
    cases["deberta-v2"] = ("DebertaV2Config", "DebertaV2ForMaskedLM", bert | {"position_buckets": 8,
                                                                            "max_relative_positions": 32})
    cases["megatron-bert"] = ("MegatronBertConfig", "MegatronBertForMaskedLM", bert)
    cases["deberta"] = ("DebertaConfig", "DebertaForMaskedLM", bert)
    # transformers' defaults cannot be built (EsmConfig has no vocabulary, NemotronConfig no key/value
    # heads, RemBERT's masked LM is refused at its published widths) or call .item() on meta tensors
    cases["esm"] = ("EsmConfig", "EsmForMaskedLM", bert | {"pad_token_id": 1, "token_dropout": False,
                                                         "position_embedding_type": "rotary"})
    cases["ibert"] = ("IBertConfig", "IBertForMaskedLM", bert)
    cases["roformer"] = ("RoFormerConfig", "RoFormerForMaskedLM", bert)
    cases["rembert"] = ("RemBertConfig", "RemBertForMaskedLM", bert | {
        "input_embedding_size": 16, "output_embedding_size": 16, "bos_token_id": 2, "eos_token_id": 3})
    xlm = {"vocab_size": 120, "emb_dim": 32, "n_layers": 2, "n_heads": 4, "max_position_embeddings": 64}
    cases["xlm"] = ("XLMConfig", "XLMWithLMHeadModel", xlm)
    cases["flaubert"] = ("FlaubertConfig", "FlaubertWithLMHeadModel", xlm)
    cases["nemotron"] = ("NemotronConfig", "NemotronForCausalLM", {
        "vocab_size": 120, "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64})
    return cases


TINY = _tiny()


def theirs(model, device: str) -> int:
    ids = torch.ones(1, N, dtype=torch.long, device=device)
    inputs = {"input_ids": ids} | ({"decoder_input_ids": ids} if model.config.is_encoder_decoder else {})
    with FlopCounterMode(display=False) as counter, torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model(**inputs)
    return counter.get_total_flops()


def ours(config) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        config.to_json_file(Path(tmp) / "config.json")
        imported = import_checkpoint(tmp, Path(tmp) / "out", progress=False)
    return analyze_flops(build_graph(imported.spec), N).forward


def meta_model(model_type: str, cls: str, **changes):
    config = CONFIG_MAPPING[model_type](**changes)
    config.architectures, config._attn_implementation = [cls], "eager"
    with torch.device("meta"):
        return getattr(transformers, cls)(config).eval()


@pytest.mark.parametrize("model_type", [t for t in DEFAULTS if t not in ("bert-generation", "llama4_text")])
def test_default_configuration_counts_what_transformers_computes(model_type):
    model = meta_model(model_type, DEFAULTS[model_type])
    assert ours(model.config) == theirs(model, "meta")


def test_bert_generation_encoder_runs_no_vocabulary_projection():
    """BertGenerationEncoder has no LM head; tfspec's import keeps its tied vocabulary projection
    (BertGenerationDecoder's), 2 n d V FLOPs more."""
    model = meta_model("bert-generation", "BertGenerationEncoder")
    c = model.config
    assert ours(c) - theirs(model, "meta") == 2 * N * c.hidden_size * c.vocab_size


def test_llama4_moe_computes_every_expert_where_tfspec_counts_the_routed_ones():
    """Llama4TextMoe runs every expert on every token (the hidden states repeated, one bmm) and
    keeps the routed ones' outputs; tfspec counts top_k. With top_k = every expert, equal."""
    model = meta_model("llama4_text", DEFAULTS["llama4_text"])
    assert ours(model.config) < theirs(model, "meta")
    everyone = meta_model("llama4_text", DEFAULTS["llama4_text"], num_experts_per_tok=model.config.num_local_experts)
    assert ours(everyone.config) == theirs(model, "meta")


SCANS = {"nemotron_h": ("NemotronHMamba2Mixer", ("scan", "conv")),
         "qwen3_next": ("Qwen3NextGatedDeltaNet", ("recurrence", "conv"))}
"""Families whose layers scan the sequence: transformers' PyTorch path computes the chunked form
(products within chunks of positions: Mamba-2's SSD form, the DeltaNet's chunked delta rule) and
a causal convolution over the padded sequence, tfspec counts the recurrence, one step per
position, and the convolution's real outputs. Counted apart: what each such module computes
beside its projections (its child modules) against tfspec's terms of those names; the rest of
the model, projections included, must be equal."""


def tiny_model(case: str):
    config_class, model_class, fields = TINY[case]
    config = getattr(transformers, config_class)(**fields)
    config.architectures, config._attn_implementation = [model_class], "eager"
    config._experts_implementation = "eager"
    torch.manual_seed(0)
    return getattr(transformers, model_class)(config).eval()


@pytest.mark.parametrize("case", sorted(c for c in TINY if c.split("-")[0] not in SCANS))
def test_tiny_configuration_counts_what_transformers_computes(case):
    model = tiny_model(case)
    assert ours(model.config) == theirs(model, "cpu")


@pytest.mark.parametrize("case", sorted(c for c in TINY if c.split("-")[0] in SCANS))
def test_scanning_layers_count_all_but_the_scan_alike(case):
    model = tiny_model(case)
    module, terms = SCANS[case.split("-")[0]]
    ids = torch.ones(1, N, dtype=torch.long)
    with FlopCounterMode(display=False) as counter, torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model(input_ids=ids)
    counts = {name: sum(ops.values()) for name, ops in counter.get_flop_counts().items()}
    prefix = type(model).__name__
    scans = [f"{prefix}.{name}" for name, m in model.named_modules() if type(m).__name__ == module]
    their_scan = sum(counts.get(m, 0) - sum(v for name, v in counts.items() if name.startswith(m + ".")
                                            and "." not in name[len(m) + 1:]) for m in scans)
    with tempfile.TemporaryDirectory() as tmp:
        model.config.to_json_file(Path(tmp) / "config.json")
        graph = build_graph(import_checkpoint(tmp, Path(tmp) / "out", progress=False).spec)
    report = analyze_flops(graph, N)
    our_scan = sum(at(expr, N, layer_values(graph.spec, node.layer)) for node in graph.nodes()
                   for name, expr in op_flops(node).items() if name in terms)
    assert scans and our_scan > 0
    assert report.forward - our_scan == counter.get_total_flops() - their_scan


def test_every_family_is_counted_or_named():
    counted = set(DEFAULTS) | {case.split("-")[0] for case in TINY} | {"deepseek_v2", "deepseek_v3", "deberta-v2",
                                                                       "megatron-bert", "phimoe", "gpt_oss"}
    assert sorted(NOT_ON_META - counted - set(UNCOUNTED)) == []
