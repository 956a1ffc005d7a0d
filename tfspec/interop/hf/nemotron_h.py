"""Nemotron-H (``model_type: nemotron_h``): transformers' NemotronHForCausalLM and NemotronHModel as
tfspec specs (nvidia/Nemotron-H-8B-Base-8K, NVIDIA-Nemotron-Nano-9B-v2, Nemotron-3-Nano).

A hybrid decoder whose layers are one residual sub-layer each, pre-RMSNorm, as
``layers_block_type`` (or the older ``hybrid_override_pattern``: M, *, -, E) says:
``linear_attention`` a Mamba-2 layer (tfspec's ``mamba2``: ``mamba_num_heads`` heads of
``mamba_head_dim`` channels, ``ssm_state_size`` states, ``n_groups`` groups, a causal convolution
of ``conv_kernel``), ``full_attention`` causal grouped-query attention without positions (the
Mamba layers see order), ``mlp`` an ungated MLP ``intermediate_size`` wide (relu2), ``moe``
``n_routed_experts`` such experts ``moe_intermediate_size`` wide routed as DeepSeek-V3 routes
(sigmoid scores, ``e_score_correction_bias``, ``n_group`` / ``topk_group``, ``norm_topk_prob``,
``routed_scaling_factor``) plus a shared one ``moe_shared_expert_intermediate_size`` wide. The
output head is never tied (transformers' class ties nothing). Refused by name: a latent MoE
projection (``moe_latent_size``), multi-token prediction layers, MLP biases, an activation of the
Mamba layers other than SiLU. The fields NVIDIA's own code reads in place of transformers'
(Nemotron-H-56B-Base-8K's ``attention_head_dim``, ``rms_norm_eps``) are checked against those
(``head_dim``, ``layer_norm_epsilon``). Defaults are NemotronHConfig's (4 layers M, E, *, -).
"""

from __future__ import annotations

from itertools import groupby

from tfspec.errors import TfspecError
from tfspec.interop.hf.family import ACTIVATION_NAMES, Family, Rule, Source, _show, activation, flag, number, register
from tfspec.interop.hf.layouts import Concat, Stack
from tfspec.interop.hf.llama import _vocab
from tfspec.interop.hf.mixtral import MOE_IGNORED

PATTERN = {"M": "linear_attention", "*": "full_attention", "-": "mlp", "E": "moe"}
MAMBA = {"heads": "mamba_num_heads", "head_dim": "mamba_head_dim", "state": "ssm_state_size", "groups": "n_groups",
         "kernel": "conv_kernel"}
"""The mamba2 layer's fields and the configuration's."""


@register
class NemotronH(Family):
    model_type = "nemotron_h"
    family = "decoder-only"
    title = "Nemotron-H"
    architectures = {"NemotronHForCausalLM": "backbone.", "NemotronHModel": ""}
    export_architecture = "NemotronHForCausalLM"
    heads = ("lm_head.",)
    grouped = True
    mapped = ("vocab_size", "hidden_size", "intermediate_size", "layers_block_type", "hybrid_override_pattern",
              "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim", "attention_dropout",
              "mlp_hidden_act", "layer_norm_epsilon", "max_position_embeddings", "bos_token_id", "eos_token_id",
              "pad_token_id", "use_conv_bias", "use_bias", "time_step_min", *MAMBA.values(), "n_routed_experts",
              "num_experts_per_tok", "moe_intermediate_size", "moe_shared_expert_intermediate_size", "n_group",
              "topk_group", "norm_topk_prob", "routed_scaling_factor")
    required = {"moe_latent_size": (None,), "num_nextn_predict_layers": (0,), "mlp_bias": (False,),
                "mamba_hidden_act": ("silu",)}
    ignored = MOE_IGNORED | {
        "tie_word_embeddings": "NemotronHForCausalLM ties nothing: its lm_head is its own",
        "attention_bias": "transformers' Nemotron-H attention has no biases, whatever the file says",
        "expand": "transformers' inner width is mamba_num_heads x mamba_head_dim, not expand x hidden_size",
        "chunk_size": "the chunks transformers' scan is computed in: the same sums",
        **dict.fromkeys(("time_step_max", "time_step_floor", "rescale_prenorm_residual"), "initialisation only"),
        "time_step_limit": "transformers' Mamba layers clamp the step at time_step_min and never read it",
        **dict.fromkeys(("use_mamba_kernels", "mamba_ssm_cache_dtype", "num_logits_to_keep",
                         "moe_shared_expert_overlap"), "how transformers runs the model, not what it computes"),
        "mamba_proj_bias": "transformers reads use_bias for the Mamba projections",
        "n_shared_experts": "the shared expert's width is moe_shared_expert_intermediate_size alone",
        "mtp_layers_block_type": "read only with num_nextn_predict_layers, which must be 0",
        "hidden_dropout": "dropout while training only",
        "residual_in_fp32": "transformers' Nemotron-H never reads it (its residual stream keeps the model's type)",
        "sliding_window": "transformers' Nemotron-H never reads it",
        "time_step_rank": "the rank of Mamba-1's step projection, which Mamba-2 layers do not have"}
    aliases = {"attention_head_dim": "head_dim", "rms_norm_eps": "layer_norm_epsilon"}
    defaults = {"vocab_size": 131072, "hidden_size": 4096, "intermediate_size": 21504, "num_attention_heads": 32,
                "num_key_value_heads": 8, "head_dim": 128, "mlp_hidden_act": "relu2", "layer_norm_epsilon": 1e-5,
                "max_position_embeddings": 4096, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0,
                "use_conv_bias": True, "use_bias": False, "time_step_min": 0.001, "mamba_num_heads": 128,
                "mamba_head_dim": 64, "ssm_state_size": 128, "n_groups": 8, "conv_kernel": 4, "n_routed_experts": 8,
                "num_experts_per_tok": 2, "moe_intermediate_size": 7688, "moe_shared_expert_intermediate_size": 7688,
                "n_group": 1, "topk_group": 1, "norm_topk_prob": True, "routed_scaling_factor": 1.0}
    """NemotronHConfig's values."""

    def spec_data(self, source: Source) -> dict:
        c, where = self.defaults | source.config, source.where
        d_model, heads = number(c, "hidden_size", where), number(c, "num_attention_heads", where)
        blocks = [self._sublayer(c, where, kind) for kind in self._types(c, where)]
        groups = [{"layers": len(list(run)), "block": [block]} for block, run in groupby(blocks)]
        return {"family": self.family, "vocab": _vocab(c, where), "d_model": d_model, "heads": heads,
                "kv_heads": number(c, "num_key_value_heads", where), "d_k": number(c, "head_dim", where),
                "d_v": number(c, "head_dim", where), "d_ff": number(c, "intermediate_size", where),
                "activation": activation(c, "mlp_hidden_act", where, "relu2"), "gated": False, "dropout": 0.0,
                "attention_dropout": number(c, "attention_dropout", where, float, 0.0), "label_smoothing": 0.0,
                "positional": {"kind": "none", "max_len": number(c, "max_position_embeddings", where)},
                "norm": "pre", "norm_type": "rms", "norm_eps": number(c, "layer_norm_epsilon", where, float),
                "final_norm": True, "bias": False, "embed_scale": False,
                "tie_embeddings": "none" if source.architecture.endswith("ForCausalLM") else "output",
                "decoder": groups[0] if len(groups) == 1 else {"groups": groups}}

    def _types(self, c: dict, where: str) -> list[str]:
        """Each layer's type: layers_block_type, else the pattern's letters (transformers' order)."""
        types = c.get("layers_block_type")
        if types is None and c.get("hybrid_override_pattern") is not None:
            pattern = c["hybrid_override_pattern"]
            if not isinstance(pattern, str) or not pattern or any(ch not in PATTERN for ch in pattern):
                raise TfspecError(f"{where}: hybrid_override_pattern: {_show(pattern)} is not supported; tfspec "
                                  f"reads a string of {', '.join(PATTERN)}")
            types = [PATTERN[ch] for ch in pattern]
        types = ["linear_attention", "moe", "full_attention", "mlp"] if types is None else types
        if not isinstance(types, list) or not types or any(t not in PATTERN.values() for t in types):
            raise TfspecError(f"{where}: layers_block_type: {_show(types)} is not supported; tfspec reads a list of "
                              f"{', '.join(PATTERN.values())}")
        return types

    def _sublayer(self, c: dict, where: str, kind: str):
        if kind == "full_attention":
            return "causal_self_attention"
        if kind == "mlp":
            return "ffn"
        if kind == "linear_attention":
            return {"kind": "mamba2", **{ours: number(c, theirs, where) for ours, theirs in MAMBA.items()},
                    "conv_bias": flag(c, "use_conv_bias", where), "bias": flag(c, "use_bias", where),
                    "dt_min": number(c, "time_step_min", where, float)}
        experts, top_k = number(c, "n_routed_experts", where), number(c, "num_experts_per_tok", where)
        if not 1 <= top_k <= experts:
            raise TfspecError(f"{where}: num_experts_per_tok ({top_k}) must be between 1 and n_routed_experts "
                              f"({experts})")
        return {"kind": "moe", "experts": experts, "top_k": top_k, "normalize": flag(c, "norm_topk_prob", where),
                "scoring": "sigmoid", "score_bias": True, "groups": number(c, "n_group", where),
                "top_groups": number(c, "topk_group", where),
                "routed_scale": number(c, "routed_scaling_factor", where, float),
                "d_ff": number(c, "moe_intermediate_size", where), "shared": 1,
                "shared_d_ff": number(c, "moe_shared_expert_intermediate_size", where)}

    def rename(self, name: str) -> str:
        """transformers' own names for the base model (``model.``, as it holds them in memory and
        renames ``backbone.`` to on loading) read as the published ``backbone.`` ones."""
        return name.removeprefix("model.")

    def rules(self, spec, architecture: str) -> list[Rule]:
        rules = [Rule("decoder.embed.weight", ("embeddings.weight",)), Rule("decoder.norm.weight", ("norm_f.weight",))]
        if architecture.endswith("ForCausalLM"):
            rules.append(Rule("output.weight", ("lm_head.weight",)))
        for layer in spec.plan("decoder"):
            ours, sub, theirs = layer.names[0], layer.sublayers[0], f"layers.{layer.index}."
            rules.append(Rule(f"{ours}_norm.weight", (f"{theirs}norm.weight",)))
            rules += [Rule(f"{ours}.{role}", tuple(f"{theirs}mixer.{name}" for name in names), *layout)
                      for role, (names, *layout) in _tensors(sub).items()]
        return rules

    def dropped(self, architecture: str) -> dict[str, str]:
        return {} if architecture.endswith("ForCausalLM") else {"lm_head.weight": f"{architecture} has no output head"}

    def count_differences(self, spec, architecture: str) -> list[tuple[int, str]]:
        """The score bias of each sparse layer's experts: a buffer there, a weight here."""
        biases = sum(s.experts for layer in spec.plan("decoder") for s in layer.sublayers
                     if getattr(s, "score_bias", False))
        return [(-biases, "e_score_correction_bias it keeps as buffers")] if biases else []

    def structure(self, spec) -> str | None:
        if reason := super().structure(spec):
            return reason
        layers = spec.plan("decoder")
        if any(len(layer.sublayers) != 1 for layer in layers) or spec.positional.kind != "none":
            return f"{self.title}'s layers are one sub-layer each (mamba2, attention, ffn or moe), without positions"
        if any(s.kind == "moe" and not (s.score_bias and s.scoring == "sigmoid" and s.shared == 1)
               for layer in layers for s in layer.sublayers):
            return f"{self.title}'s experts are routed by sigmoid scores with a score bias, beside one shared expert"
        return None

    def config(self, spec) -> dict:
        v, layers = spec.vocab, spec.plan("decoder")
        kinds = {"mamba2": "linear_attention", "causal_self_attention": "full_attention", "ffn": "mlp", "moe": "moe"}
        config = {"architectures": [self.export_architecture], "model_type": self.model_type, "vocab_size": v.size,
                  "hidden_size": spec.d_model, "intermediate_size": spec.d_ff, "num_attention_heads": spec.heads,
                  "num_key_value_heads": spec.num_kv_heads, "head_dim": spec.d_k,
                  "mlp_hidden_act": ACTIVATION_NAMES.get(spec.activation, spec.activation),
                  "layer_norm_epsilon": spec.norm_eps, "max_position_embeddings": spec.positional.max_len,
                  "attention_dropout": spec.attention_dropout, "bos_token_id": v.bos_id, "eos_token_id": v.eos_id,
                  "pad_token_id": v.pad_id, "tie_word_embeddings": False,
                  "layers_block_type": [kinds.get(layer.sublayers[0].kind, "?") for layer in layers]}
        for layer in layers:
            config |= _sublayer_config(layer.sublayers[0])
        return config


def _tensors(sub) -> dict[str, tuple]:
    """IR role -> (the tensors under ``mixer.``, then the rule's layout and rows) of one sub-layer."""
    if sub.kind == "mamba2":
        roles = {"w_in": "in_proj.weight", "w_conv": "conv1d.weight", "b_conv": "conv1d.bias", "dt_bias": "dt_bias",
                 "A_log": "A_log", "D": "D", "norm": "norm.weight", "w_out": "out_proj.weight",
                 "b_in": "in_proj.bias", "b_out": "out_proj.bias"}
        skip = set() if sub.conv_bias else {"b_conv"}
        skip |= set() if sub.bias else {"b_in", "b_out"}
        return {role: ((name,),) for role, name in roles.items() if role not in skip}
    if sub.kind == "causal_self_attention":
        rows = (sub.heads * sub.d_k, sub.kv_heads * sub.d_k, sub.kv_heads * sub.d_v)
        return {"w_qkv": (tuple(f"{p}_proj.weight" for p in "qkv"), Concat(rows)), "w_o": (("o_proj.weight",),)}
    if sub.kind == "ffn":
        return {"w_1": (("up_proj.weight",),), "w_2": (("down_proj.weight",),)}
    experts = range(sub.experts)
    return {"w_router": (("gate.weight",),), "score_bias": (("gate.e_score_correction_bias",),),
            "w_1": (tuple(f"experts.{j}.up_proj.weight" for j in experts), Stack()),
            "w_2": (tuple(f"experts.{j}.down_proj.weight" for j in experts), Stack()),
            "w_shared_1": (("shared_experts.up_proj.weight",),), "w_shared_2": (("shared_experts.down_proj.weight",),)}


def _sublayer_config(sub) -> dict:
    """The configuration fields a layer of ``sub``'s kind reads (the first of each kind says them)."""
    if sub.kind == "mamba2":
        return {theirs: getattr(sub, ours) for ours, theirs in MAMBA.items()} | {
            "use_conv_bias": sub.conv_bias, "use_bias": sub.bias, "time_step_min": sub.dt_min,
            "mamba_hidden_act": "silu"}
    if sub.kind == "moe":
        return {"n_routed_experts": sub.experts, "num_experts_per_tok": sub.top_k, "norm_topk_prob": sub.normalize,
                "n_group": sub.groups, "topk_group": sub.top_groups or sub.groups, "routed_scaling_factor":
                sub.routed_scale, "moe_intermediate_size": sub.d_ff, "moe_shared_expert_intermediate_size":
                sub.shared_d_ff}
    return {}
