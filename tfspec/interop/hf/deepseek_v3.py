"""DeepSeek-V3 (``model_type: deepseek_v3``): transformers' DeepseekV3ForCausalLM and
DeepseekV3Model as tfspec specs (the shape of deepseek-ai/DeepSeek-V3 and DeepSeek-R1, which
DeepseekV3Config's defaults give; Moonlight and Kimi K2 publish the same architecture).

DeepSeek-V2 (``deepseek_v2.py``: latent attention, dense layers then mixtures of experts with
ungated shared experts, rope rows in interleaved pairs) with V3's router (transformers'
DeepseekV3TopkRouter, the ``moe`` layer's options): sigmoid scores; experts chosen by score
plus ``e_score_correction_bias`` (``score_bias``: a buffer in transformers, counted by tfspec
on its own report line, "router score bias") among the ``topk_group`` of ``n_group`` groups
whose two best scores sum highest; the chosen scores renormalised as ``norm_topk_prob`` says
and multiplied by ``routed_scaling_factor``. Rope scaling (DeepSeek-V3's published yarn) as
DeepSeek-V2's. Refused by name: ``rope_interleave: false`` (rows in rotate-half order, which
the import would permute), biases. The remote-code fields of DeepSeek's own config.json are
read where transformers computes what they say (``scoring_func: sigmoid``, ``topk_method:
noaux_tc``, ``moe_layer_freq: 1``), refused otherwise. The published weights are block-scaled FP8
(``quantization_config: {quant_method: fp8}``, matrices as ``*.weight`` and ``*.weight_scale_inv``):
read as transformers dequantizes them (``fp8.py``), one tensor at a time; checkpoints saved
unquantized import as they are.
"""

from __future__ import annotations

from tfspec.errors import TfspecError
from tfspec.interop.hf import fp8
from tfspec.interop.hf.deepseek_v2 import DeepseekV2
from tfspec.interop.hf.family import Rule, number, register
from tfspec.interop.hf.mixtral import first_moe

ROUTER_FIELDS = ("norm_topk_prob", "routed_scaling_factor", "n_group", "topk_group")


@register
class DeepseekV3(DeepseekV2):
    model_type = "deepseek_v3"
    title = "DeepSeek-V3"
    architectures = {"DeepseekV3ForCausalLM": "model.", "DeepseekV3Model": ""}
    export_architecture = "DeepseekV3ForCausalLM"
    mapped = DeepseekV2.mapped + ROUTER_FIELDS
    required = {"attention_bias": (False,), "rope_interleave": (True,), "scoring_func": ("sigmoid",),
                "topk_method": ("noaux_tc",), "moe_layer_freq": (1,)}
    ignored = {k: v for k, v in DeepseekV2.ignored.items() if k not in ROUTER_FIELDS} | {
        **dict.fromkeys(("num_mtp_layers", "num_nextn_predict_layers"), "multi-token prediction modules for "
                        "speculative decoding, which transformers' DeepseekV3ForCausalLM does not build")}
    renormalises = None
    routing = {"scoring": "sigmoid", "score_bias": True}
    quantized = (fp8.METHOD,)
    defaults = DeepseekV2.defaults | {
        "vocab_size": 129280, "hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048,
        "num_hidden_layers": 61, "num_attention_heads": 128, "n_shared_experts": 1, "n_routed_experts": 256,
        "routed_scaling_factor": 2.5, "n_group": 8, "topk_group": 4, "num_experts_per_tok": 8,
        "first_k_dense_replace": 3, "norm_topk_prob": True, "max_position_embeddings": 4096, "bos_token_id": 0,
        "eos_token_id": 1}

    def _moe(self, c: dict, where: str) -> dict:
        layer = super()._moe(c, where)
        experts, groups, top = layer["experts"], number(c, "n_group", where), number(c, "topk_group", where)
        if groups < 1 or experts % groups or experts // groups < 2:
            raise TfspecError(f"{where}: n_group ({groups}) must divide n_routed_experts ({experts}) into groups of "
                              "at least 2 experts (a group scores by its two best)")
        if not 1 <= top <= groups or layer["top_k"] > top * experts // groups:
            raise TfspecError(f"{where}: topk_group ({top}) must be between 1 and n_group ({groups}), and its groups "
                              f"must hold num_experts_per_tok ({layer['top_k']}) experts")
        scale = number(c, "routed_scaling_factor", where, float)
        if scale <= 0:
            raise TfspecError(f"{where}: routed_scaling_factor ({scale}) must be positive")
        return layer | {"scoring": "sigmoid", "score_bias": True, "groups": groups, "top_groups": top,
                        "routed_scale": scale}

    def _moe_rules(self, i: int, name: str, moe) -> list[Rule]:
        return super()._moe_rules(i, name, moe) + [
            Rule(f"{name}.score_bias", (f"layers.{i}.{self.router}.gate.e_score_correction_bias",))]

    def count_differences(self, spec, architecture: str) -> list[tuple[int, str]]:
        """The score bias of each sparse layer's experts: a buffer there, a weight (the report's
        "router score bias") here."""
        biases = sum(s.experts for layer in spec.plan("decoder") for s in layer.sublayers
                     if getattr(s, "score_bias", False))
        return [(-biases, "e_score_correction_bias it keeps as buffers")]

    def config(self, spec) -> dict:
        moe = first_moe(spec)
        config = {k: v for k, v in super().config(spec).items() if k != "topk_method"}
        return config | {"n_group": moe.groups, "topk_group": moe.top_groups or moe.groups,
                         "routed_scaling_factor": moe.routed_scale, "rope_interleave": True}
