"""Granite (``model_type: granite``): transformers' GraniteForCausalLM and GraniteModel as tfspec
specs (ibm-granite/granite-3.0-2b-base, -8b-base, granite-3.1-*, granite-3.3-* and their -instruct
models).

Llama (``llama.py``) with four multipliers, each one spec field: the token embeddings times
``embedding_multiplier`` (``embed_multiplier``; 12 in granite-3.0); attention scores times
``attention_multiplier`` in place of 1 / sqrt(head_dim) (the attention's ``scale``); each
sub-layer's output times ``residual_multiplier`` before it joins the residual stream
(``residual_scale``: 0.22); the logits divided by ``logits_scaling`` (``output_scale``, its
inverse, on the last hidden states: the output projection has no bias; GraniteModel, without one,
ties a plain one to the embedding). Defaults are GraniteConfig's (Llama 2 7B's shape with every
multiplier 1, so scores are not divided by sqrt(head_dim)). ``export --format hf`` writes
Granite only for specs Llama does not compute (``export_rank`` 1).
"""

from __future__ import annotations

from tfspec.errors import TfspecError
from tfspec.interop.hf.family import Source, _show, number, register
from tfspec.interop.hf.llama import Llama

MULTIPLIERS = ("embedding_multiplier", "attention_multiplier", "residual_multiplier", "logits_scaling")


@register
class Granite(Llama):
    model_type = "granite"
    title = "Granite"
    architectures = {"GraniteForCausalLM": "model.", "GraniteModel": ""}
    export_architecture = "GraniteForCausalLM"
    export_rank = 1
    mapped = Llama.mapped + MULTIPLIERS

    def spec_data(self, source: Source) -> dict:
        c, where = source.config, source.where
        multiplier = {key: number(c, key, where, float, 1.0) for key in MULTIPLIERS}
        for key, value in multiplier.items():
            if value <= 0:
                raise TfspecError(f"{where}: {key}: {_show(value)} is not supported; tfspec imports Granite with "
                                  "positive multipliers")
        return super().spec_data(source) | {"embed_multiplier": multiplier["embedding_multiplier"],
                                            "residual_scale": multiplier["residual_multiplier"],
                                            "output_scale": 1 / multiplier["logits_scaling"]
                                            if source.architecture.endswith("ForCausalLM") else 1.0}

    def _attention(self, c: dict, where: str):
        return {"kind": "causal_self_attention", "scale": number(c, "attention_multiplier", where, float, 1.0)}

    def config(self, spec) -> dict:
        attention = spec.plan("decoder")[0].attention
        return super().config(spec) | {
            "embedding_multiplier": spec.embed_multiplier, "residual_multiplier": spec.residual_scale,
            "logits_scaling": 1 / spec.output_scale,
            "attention_multiplier": attention.d_k ** -0.5 if attention.scale is None else attention.scale}
