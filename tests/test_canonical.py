"""Specs compare by what they compute (``Spec.canonical``): the shipped published decoders export
with ``--format hf`` as their family, with transformers' own parameter count, and a spec whose
layers differ is refused in one line."""

from __future__ import annotations

import json

import pytest

from hf_checkpoints import transformers_count
from tfspec import load_spec
from tfspec.interop.hf.export import family_form, fitting_family
from tfspec.spec import Spec

transformers = pytest.importorskip("transformers")

PUBLISHED = {  # model -> (family, transformers' count on the meta device, as published)
    "zoo/qwen2.5-0.5b": ("qwen2", 494_032_768),
    "zoo/llama-2-7b": ("llama", 6_738_415_616),
    "zoo/mistral-7b": ("mistral", 7_241_732_096),
    "zoo/tinyllama-1.1b": ("llama", 1_100_048_384),
}


def count_of(config: dict) -> int:
    """Parameters of the class ``config`` names, built by transformers on the meta device."""
    built = transformers.AutoConfig.for_model(**{k: v for k, v in config.items() if k != "architectures"})
    return transformers_count(built, config["architectures"][0])


@pytest.mark.parametrize("name", PUBLISHED)
def test_published_decoders_fit_their_family_at_transformers_count(name):
    spec = load_spec(name)
    family = fitting_family(spec)
    model_type, count = PUBLISHED[name]
    assert family.model_type == model_type
    assert count_of(family.config(family_form(spec))) == count


@pytest.mark.parametrize("name", ["zoo/qwen2.5-0.5b", "zoo/mistral-7b", "zoo/tinyllama-1.1b"])
def test_published_decoders_export_shrunk_and_transformers_loads_them(cli, tmp_path, write_spec, name):
    """Each, shrunk (layers as groups, to show they compare resolved), exports with random weights,
    passes export's parity with transformers, and loads with the count transformers gives it."""
    window = "[{kind: restricted_self_attention, r: 5, causal: true}, ffn]" if "mistral" in name else None
    block = window or "[causal_self_attention, ffn]"
    spec = write_spec(f"""
        extends: {name}
        name: small
        vocab: {{size: 300, pad_id: 0, unk_id: 0, bos_id: 1, eos_id: 2}}
        d_model: 64
        heads: 4
        kv_heads: 2
        d_ff: 96
        positional: {{kind: rotary, max_len: 64}}
        decoder: {{groups: [{{layers: 1, block: {block}}}, {{layers: 1, block: {block}}}], layers: null,
                  block: null}}
    """)
    code, out, err = cli("export", spec, "--format", "hf", "-o", tmp_path / "hf")
    assert code == 0, out + err
    assert "parity: ok" in out
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert config["model_type"] == PUBLISHED[name][0] and config["num_hidden_layers"] == 2
    loaded = getattr(transformers, config["architectures"][0]).from_pretrained(tmp_path / "hf")
    code, report, _ = cli("report", spec, "--format", "json")
    assert sum(p.numel() for p in loaded.parameters()) == json.loads(report)["params"]["total"]


def test_layers_that_differ_are_refused_in_one_line(cli, tmp_path, write_spec):
    spec = write_spec("""
        extends: zoo/tinyllama-1.1b
        name: mixed
        decoder: {groups: [{layers: 1, block: [causal_self_attention, ffn]},
                           {layers: 1, block: [{kind: restricted_self_attention, r: 3, causal: true}, ffn]}],
                  layers: null, block: null}
    """)
    code, out, err = cli("export", spec, "--format", "hf", "-o", tmp_path / "hf")
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: ")
    assert "decoder layers are not all alike" in lines[0] and not (tmp_path / "hf").exists()


def spec(**fields) -> Spec:
    return Spec.model_validate({"name": "m", "vocab": 64, "d_model": 32, "heads": 4, "d_ff": 64,
                                "family": "decoder-only", "decoder": {"layers": 2, "block": ["causal_self_attention",
                                                                                             "ffn"]}} | fields)


def test_specs_written_differently_that_compute_alike_are_equal():
    plain = spec()
    same = [spec(kv_heads=4), spec(biases={"q": True, "o": True}), spec(final_norm=False),
            spec(description="other words", reference={"source": "a paper"}),
            spec(decoder={"groups": [{"layers": 1, "block": ["causal_self_attention", "ffn"]}] * 2})]
    for other in same:
        assert other == plain and hash(other) == hash(plain) and other.canonical() == plain.canonical()
    differ = [spec(kv_heads=2), spec(biases={"o": False}), spec(final_norm=True), spec(name="n"),
              spec(decoder={"layers": 3, "block": ["causal_self_attention", "ffn"]}),
              spec(decoder={"groups": [{"layers": 1, "block": ["causal_self_attention", "ffn"]},
                                       {"layers": 1, "block": ["ffn", "causal_self_attention"]}]})]
    for other in differ:
        assert other != plain
