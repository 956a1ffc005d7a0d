"""PhiMoE (``model_type: phimoe``): transformers' PhimoeForCausalLM and PhimoeModel as tfspec specs
(microsoft/Phi-3.5-MoE-instruct).

Mixtral (``mixtral.py``: grouped-query attention, rotary positions, every feed-forward layer a
mixture of ``num_local_experts`` SwiGLU experts stored apart, ``block_sparse_moe.experts.{j}``)
with these differences:

- LayerNorms with a shift (``input_layernorm``, ``post_attention_layernorm``, ``norm``), at
  ``rms_norm_eps`` despite the name;
- biased q, k, v and o projections with ``attention_bias`` (Phi-3.5-MoE: true), a biased output
  projection with ``lm_head_bias``;
- SparseMixer routing (the ``moe``'s ``scoring: sparsemixer``): the two experts with the highest
  logits, each weighted by the softmax over the experts near it (within 2 x router_jitter_noise,
  the ``mixer_eps``, relative to its logit) that were not chosen before it, no renormalisation.
  transformers routes to two experts whatever ``num_experts_per_tok`` says, so another value is
  refused. Training alone samples the experts (Gumbel noise) and jitters the input
  (``input_jitter_noise``); inference, what tfspec computes, does neither.

- Phi-3.5-MoE's ``longrope`` rotary scaling as transformers' PhiMoE computes it, which differs
  from Phi-3's: its forward recomputes the frequencies without the call's length, so short_factor's
  at every length (the spec's ``long_frequencies: false``; long_factor is kept, for export), and
  multiplies cos and sin by short_mscale in calls within original_max_position_embeddings and by
  long_mscale past it (``attention_factor`` and ``long_attention_factor``). (Microsoft's remote
  code for the model switches to long_factor past the original length; transformers does not.)

Refused by name, besides Mixtral's refusals: rope types other than default and longrope, and a
longrope without numeric short_mscale and long_mscale (PhimoeConfig refuses it). Defaults are
PhimoeConfig's (Phi-3.5-MoE's shape).
"""

from __future__ import annotations

from dataclasses import replace

from tfspec.errors import TfspecError
from tfspec.interop.hf.family import Rule, Source, flag, number, register
from tfspec.interop.hf.llama import Llama
from tfspec.interop.hf.mixtral import MOE_IGNORED, Mixtral, first_moe
from tfspec.interop.hf.stablelm import with_shifts

ROUTED = 2
"""Experts transformers' sparsemixer picks per token, whatever the configuration says."""


@register
class Phimoe(Mixtral):
    model_type = "phimoe"
    title = "PhiMoE"
    architectures = {"PhimoeForCausalLM": "model.", "PhimoeModel": ""}
    export_architecture = "PhimoeForCausalLM"
    mapped = Mixtral.mapped + ("attention_bias", "lm_head_bias", "router_jitter_noise",
                               "original_max_position_embeddings")
    ignored = Llama.ignored | MOE_IGNORED | {
        "input_jitter_noise": "multiplies a layer's input by random noise while training only",
        "hidden_dropout": "dropout while training only (Phi-mini-MoE's config.json; PhimoeConfig has no such field)"}
    renormalises = False
    rope_types = ("default", "longrope")
    routing = {"scoring": "sparsemixer", "score_bias": False, "groups": 1, "routed_scale": 1.0}
    defaults = {"vocab_size": 32064, "intermediate_size": 6400, "num_key_value_heads": 8,
                "max_position_embeddings": 131072, "rms_norm_eps": 1e-5, "rope_theta": 1e6, "bos_token_id": 1,
                "eos_token_id": 2, "num_local_experts": 16, "num_experts_per_tok": 2, "router_jitter_noise": 0.01}
    """PhimoeConfig's values where Llama's differ (those ``spec_data`` falls back on)."""

    def spec_data(self, source: Source) -> dict:
        c, where = self.defaults | source.config, source.where
        data = super().spec_data(replace(source, config=c))
        return data | {"norm_type": "layer",
                       "output_bias": flag(c, "lm_head_bias", where) and source.architecture.endswith("ForCausalLM")}

    def _biases(self, c: dict, where: str) -> dict:
        return Llama._biases(self, {"attention_bias": c.get("attention_bias", False)}, where)

    def _moe(self, c: dict, where: str) -> dict:
        moe = super()._moe(c, where)
        if moe["top_k"] != ROUTED:
            raise TfspecError(f"{where}: num_experts_per_tok: {moe['top_k']} is not supported; transformers' "
                              f"{self.title} routes every token to {ROUTED} experts (sparsemixer) whatever it says")
        eps = number(c, "router_jitter_noise", where, float)
        if eps < 0:
            raise TfspecError(f"{where}: router_jitter_noise must be at least 0, got {eps}")
        return moe | {"scoring": "sparsemixer", "mixer_eps": eps}

    def _rotary(self, c: dict, where: str) -> dict:
        """Llama's rotary positions; a longrope's frequencies short_factor's at every length and its
        cos and sin multiplier short_mscale's, long_mscale's past the original length."""
        key = "rope_scaling" if c.get("rope_scaling") else "rope_parameters"
        if isinstance(c.get(key), dict) and "original_max_position_embeddings" in c:  # top level first, as PhimoeConfig
            c = c | {key: c[key] | {"original_max_position_embeddings": c["original_max_position_embeddings"]}}
        positional = super()._rotary(c, where)
        if positional.get("scaling", {}).get("type") != "longrope":
            return positional
        rope = c[key]
        short, long = (number(rope, key, f"{where}: rope_scaling", float) for key in ("short_mscale", "long_mscale"))
        for key, value in (("short_mscale", short), ("long_mscale", long)):
            if not 0 < value <= 1e3:
                raise TfspecError(f"{where}: rope_scaling: {key} must be above 0 and at most 1000, got {value}")
        scaling = positional["scaling"] | {"attention_factor": float(short), "long_frequencies": False}
        return positional | {"scaling": scaling | ({"long_attention_factor": float(long)} if long != short else {})}

    def rules(self, spec, architecture: str) -> list[Rule]:
        """Mixtral's, with each norm's shift, and the output's bias."""
        rules = with_shifts(super().rules(spec, architecture))
        return rules + ([Rule("output.bias", ("lm_head.bias",))] if spec.output_bias else [])

    def dropped(self, architecture: str) -> dict[str, str]:
        return super().dropped(architecture) | {"lm_head.bias": "the output projection's bias (PhimoeModel has none)"}

    def config(self, spec) -> dict:
        config = super().config(spec) | {"attention_bias": spec.has_bias("q"), "lm_head_bias": spec.output_bias,
                                         "router_jitter_noise": first_moe(spec).mixer_eps}
        rope = config.get("rope_scaling")
        if rope is None or rope["rope_type"] != "longrope":
            return config
        rope = {k: v for k, v in rope.items() if k not in ("attention_factor", "long_attention_factor",
                                                            "long_frequencies")}
        scaling = spec.positional.scaling  # a longrope without its factor given PhiMoE refuses on reading it back
        mscales = {} if scaling.attention_factor is None else {
            "short_mscale": scaling.attention_factor,
            "long_mscale": scaling.long_attention_factor or scaling.attention_factor}
        return config | {"rope_scaling": rope | mscales}
