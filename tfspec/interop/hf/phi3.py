"""Phi-3 (``model_type: phi3``): transformers' Phi3ForCausalLM and Phi3Model as tfspec specs
(microsoft/Phi-3-mini-4k-instruct, Phi-3-medium-4k-instruct, phi-4).

Mistral (``llama.py``: pre-RMSNorm, SwiGLU, grouped-query attention, rotary positions, the
sliding window as causal restricted attention; Phi-3-mini's is 2047) with its projections fused:
``qkv_proj`` holds q, k and v stacked, as tfspec's ``w_qkv``, and ``gate_up_proj`` the gate
then the linear branch (``layouts.Split``); no projection is ever biased. Rotary
positions rotate the first ``partial_rotary_factor`` of each head's features (1.0 unless said;
``positional.fraction``, as StableLM). ``resid_pdrop`` is tfspec's ``dropout``. The long-context
``longrope`` scaling (Phi-3-mini-128k, Phi-3.5-mini, Phi-4-mini) imports with the top-level
``original_max_position_embeddings`` (default 4096), which replaces the rope settings' own.
Refused by name: other rope types (Phi3Config rejects them), among them ``su`` and ``yarn``,
older names of longrope that transformers 5 renames only after checking for the original
length in the rope settings, so that such a file loads only if it has one there. Phi3ForCausalLM's ``generate``
recomputes the whole sequence once it first passes the original length (its
``prepare_inputs_for_generation``); tfspec keeps the keys it cached with the short factors,
as transformers' other families do. Defaults are Phi3Config's (Phi-3-mini-4k-instruct's shape).
"""

from __future__ import annotations

from dataclasses import replace

from tfspec.interop.hf.family import Rule, Source, number, register, repeated_layer
from tfspec.interop.hf.layouts import Split
from tfspec.interop.hf.llama import Mistral
from tfspec.interop.hf.stablelm import with_rotated_share


ORIGINAL_CONTEXT = 4096
"""Phi3Config's original_max_position_embeddings when a configuration leaves it out."""


@register
class Phi3(Mistral):
    model_type = "phi3"
    title = "Phi-3"
    architectures = {"Phi3ForCausalLM": "model.", "Phi3Model": ""}
    export_architecture = "Phi3ForCausalLM"
    mapped = tuple(f for f in Mistral.mapped if f not in ("attention_bias", "mlp_bias")) + (
        "partial_rotary_factor", "resid_pdrop", "original_max_position_embeddings")
    ignored = {"embd_pdrop": "training only, and transformers' Phi-3 applies no dropout to the embeddings",
               "attention_bias": "written in phi-4's config; transformers' Phi-3 biases no projection and never "
                                 "reads it",
               "auto_map": "names the remote code of Microsoft's repositories (trust_remote_code); transformers' "
                           "own Phi3 classes read the same checkpoints"}
    rope_types = ("default", "longrope")
    partial_rotary = True
    defaults = {"vocab_size": 32064, "hidden_size": 3072, "intermediate_size": 8192, "max_position_embeddings": 4096,
                "rms_norm_eps": 1e-5, "bos_token_id": 1, "eos_token_id": 32000, "pad_token_id": 32000}
    """Phi3Config's values where Llama's differ (those ``Llama.spec_data`` falls back on)."""

    def spec_data(self, source: Source) -> dict:
        c, where = self.defaults | source.config, source.where
        return super().spec_data(replace(source, config=c)) | {
            "dropout": number(c, "resid_pdrop", where, float, 0.0)}

    def _biases(self, c: dict, where: str) -> dict:
        return dict.fromkeys(("q", "k", "v", "o", "ffn"), False)

    def _rotary(self, c: dict, where: str) -> dict:
        c = with_rotated_share(c, 1.0, where)
        key = "rope_scaling" if c.get("rope_scaling") else "rope_parameters"
        if not isinstance(c.get(key), dict):  # Llama's to refuse
            return super()._rotary(c, where)
        rope = dict(c[key])
        rope["original_max_position_embeddings"] = number(c, "original_max_position_embeddings", where,
                                                          default=ORIGINAL_CONTEXT)
        return super()._rotary(c | {key: rope}, where)

    def rules(self, spec, architecture: str) -> list[Rule]:
        """Llama's rules with the fused tensors: ``w_qkv`` copied whole, W1 and W3 split from gate_up_proj."""
        fused, d_ff = [], repeated_layer(spec, "decoder")[1].d_ff
        for rule in super().rules(spec, architecture):
            layer = rule.hf[0].rsplit(".", 3)[0]  # layers.{i} of layers.{i}.self_attn.q_proj.weight
            if rule.ir.endswith(".w_qkv"):
                rule = Rule(rule.ir, (f"{layer}.self_attn.qkv_proj.weight",))
            elif rule.ir.endswith((".ffn.w_1", ".ffn.w_3")):
                part = int(rule.ir.endswith("w_3"))
                rule = Rule(rule.ir, (f"{layer}.mlp.gate_up_proj.weight",), Split((d_ff,) * 2, part))
            fused.append(rule)
        return fused

    def config(self, spec) -> dict:
        """Mistral's fields this family has, and its own: the original context top-level, where
        Phi3Config reads it."""
        shared = {k: v for k, v in super().config(spec).items() if k in self.mapped + ("architectures", "model_type")}
        positions = repeated_layer(spec, "decoder")[0].positions
        held = getattr(positions.scaling, "original_max_position_embeddings", None)  # linear scaling holds none
        original = {} if held is None else {"original_max_position_embeddings": held}
        return shared | original | {"partial_rotary_factor": positions.fraction, "resid_pdrop": spec.dropout}
