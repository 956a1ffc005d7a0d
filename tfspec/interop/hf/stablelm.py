"""StableLM (``model_type: stablelm``): transformers' StableLmForCausalLM and StableLmModel as
tfspec specs (stabilityai/stablelm-3b-4e1t, stablelm-2-1_6b, stablelm-zephyr-3b).

Llama (``llama.py``) with three differences: LayerNorms with a shift (``layer_norm_eps``) in
place of RMSNorms; rotary positions on the first ``partial_rotary_factor`` of each head's
features (0.25 by default; ``positional.fraction``, rotate-half within those features as
transformers' ``rotary_ndims``), the rest passed through; and biases on the query, key and value
projections when ``use_qkv_bias`` (stablelm-2-1_6b), never on the output or the MLP. Two options of
stablelm-2-12b: ``use_parallel_residual`` (attention and MLP read the layer's one norm and are
added in parallel, ``residual: parallel_shared_norm``) and ``qk_layernorm`` (a LayerNorm without
shift per head on queries and keys, ``qk_norm: per_head``, stored one module per head and stacked
into the (heads, head_dim) gains). Defaults are StableLmConfig's.
"""

from __future__ import annotations

from dataclasses import replace

from tfspec.interop.hf.family import Rule, Source, flag, number, register, repeated_layer
from tfspec.interop.hf.layouts import Stack
from tfspec.interop.hf.llama import Llama

PARTIAL_ROTARY = 0.25
"""StableLmConfig's partial_rotary_factor when a configuration leaves it out."""


@register
class StableLm(Llama):
    model_type = "stablelm"
    title = "StableLM"
    architectures = {"StableLmForCausalLM": "model.", "StableLmModel": ""}
    export_architecture = "StableLmForCausalLM"
    mapped = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
              "num_key_value_heads", "hidden_act", "max_position_embeddings", "layer_norm_eps", "rope_parameters",
              "rope_theta", "rope_scaling", "partial_rotary_factor", "use_qkv_bias", "tie_word_embeddings",
              "bos_token_id", "eos_token_id", "pad_token_id", "attention_dropout", "hidden_dropout",
              "use_parallel_residual", "qk_layernorm")
    required = {}
    ignored = {}
    partial_rotary = True
    defaults = {"vocab_size": 50304, "hidden_size": 2560, "intermediate_size": 6912, "num_hidden_layers": 32,
                "num_attention_heads": 32, "max_position_embeddings": 4096, "bos_token_id": 0, "eos_token_id": 0}
    """StableLmConfig's values where Llama's differ (those ``Llama.spec_data`` falls back on)."""

    def spec_data(self, source: Source) -> dict:
        c, where = self.defaults | source.config, source.where
        qkv = flag(c, "use_qkv_bias", where, False)
        return super().spec_data(replace(source, config=c)) | {
            "norm_type": "layer", "norm_eps": number(c, "layer_norm_eps", where, float, 1e-5),
            "dropout": number(c, "hidden_dropout", where, float, 0.0),
            "biases": {"q": qkv, "k": qkv, "v": qkv, "o": False, "ffn": False},
            "residual": "parallel_shared_norm" if flag(c, "use_parallel_residual", where, False) else "sequential"}

    def _attention(self, c: dict, where: str):
        if flag(c, "qk_layernorm", where, False):
            return {"kind": "causal_self_attention", "qk_norm": "per_head"}
        return "causal_self_attention"

    def _rotary(self, c: dict, where: str) -> dict:
        return super()._rotary(with_rotated_share(c, PARTIAL_ROTARY, where), where)

    def rules(self, spec, architecture: str) -> list[Rule]:
        """Llama's (with the norms' shifts), less the second norm of parallel layers; per-head
        norm gains stacked from one LayerNorm per head."""
        rules = [r for r in with_shifts(super().rules(spec, architecture))
                 if spec.residual == "sequential" or "ffn_norm" not in r.ir]
        for layer in spec.plan("decoder"):
            a, theirs = layer.attention, f"layers.{layer.index}.self_attn."
            if a.qk_norm == "per_head":
                rules += [Rule(f"{layer.names[0]}.{p}_norm", tuple(f"{theirs}{p}_layernorm.norms.{i}.weight"
                                                                   for i in range(heads)), Stack())
                          for p, heads in (("q", a.heads), ("k", a.kv_heads))]
        return rules

    def config(self, spec) -> dict:
        """Llama's fields this family shares, and its own (written the transformers 4 way, which
        transformers 5 reads too)."""
        shared = {k: v for k, v in super().config(spec).items() if k in self.mapped + ("architectures", "model_type")}
        positions = repeated_layer(spec, "decoder")[0].positions
        return shared | {"layer_norm_eps": spec.norm_eps, "partial_rotary_factor": positions.fraction,
                         "use_qkv_bias": spec.has_bias("q"), "hidden_dropout": spec.dropout,
                         "use_parallel_residual": spec.residual == "parallel_shared_norm",
                         "qk_layernorm": repeated_layer(spec, "decoder")[0].qk_norm == "per_head"}


def with_rotated_share(c: dict, default: float, where: str) -> dict:
    """``c`` with the rotated share where Llama's rotary settings read it: the fraction from the
    rotary settings (``rope_parameters``, or ``rope_scaling`` which replaces it), else from the
    top-level ``partial_rotary_factor`` (transformers 4 files), else ``default`` (StableLM's
    0.25, Phi-3's 1.0)."""
    key = "rope_scaling" if c.get("rope_scaling") else "rope_parameters"
    rope = c.get(key) or {}
    if not isinstance(rope, dict):  # Llama's to refuse
        return c
    return c | {key: {"partial_rotary_factor": number(c, "partial_rotary_factor", where, float, default), **rope}}


def with_shifts(rules: list[Rule]) -> list[Rule]:
    """``rules`` and, beside each norm's gain, its shift (``.bias``): LayerNorm where Llama has RMSNorm."""
    return rules + [Rule(r.ir.removesuffix("weight") + "bias", (r.hf[0].removesuffix("weight") + "bias",))
                    for r in rules if r.ir.endswith("norm.weight")]
