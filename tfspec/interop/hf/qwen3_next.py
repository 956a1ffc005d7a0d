"""Qwen3-Next (``model_type: qwen3_next``): transformers' Qwen3NextForCausalLM and Qwen3NextModel as
tfspec specs (Qwen/Qwen3-Next-80B-A3B-Instruct and -Thinking).

A hybrid decoder, pre-RMSNorm, every norm zero-centred (it multiplies by 1 + w: the ``PlusOne``
layout adds the 1 on import and takes it off on export, as for Gemma). ``layer_types`` (or every
``full_attention_interval``-th layer, 4 unless said) picks each layer's token mixer:
``linear_attention`` a gated DeltaNet (tfspec's ``gated_deltanet``: ``linear_num_value_heads``
heads of ``linear_value_head_dim``, ``linear_num_key_heads`` query/key heads of
``linear_key_head_dim``, a causal convolution of ``linear_conv_kernel_dim``), ``full_attention``
Qwen3's causal grouped-query attention (per-head q/k RMSNorm) with an output gate
(``output_gate``: ``q_proj`` yields each head's query and then its gate, ``GatedQuery``) and rotary
positions on the first ``partial_rotary_factor`` (0.25 unless said) of each head's features.
The feed-forward layers are Qwen2-MoE's (``qwen2_moe.py``'s ``SparseSteps``: experts where
``decoder_sparse_step`` and ``mlp_only_layers`` say, a shared expert behind a sigmoid gate).
Refused by name: attention biases, rope types other than the default. Defaults are
Qwen3NextConfig's (Qwen3-Next-80B-A3B's shape: 48 layers, 512 experts, top 10).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from itertools import groupby

import numpy as np

from tfspec.errors import TfspecError
from tfspec.interop.hf.family import ACTIVATION_NAMES, Rule, Source, _show, number, register
from tfspec.interop.hf.layouts import Layout, PlusOne
from tfspec.interop.hf.llama import Llama
from tfspec.interop.hf.mixtral import MOE_IGNORED, _counted, first_moe
from tfspec.interop.hf.qwen2_moe import MOE_FIELDS, Qwen2Moe

LAYER_TYPES = ("linear_attention", "full_attention")
DELTANET = {"heads": "linear_num_value_heads", "key_heads": "linear_num_key_heads", "d_k": "linear_key_head_dim",
            "d_v": "linear_value_head_dim", "kernel": "linear_conv_kernel_dim"}
"""The gated_deltanet layer's fields and the configuration's."""
DELTANET_TENSORS = {"w_qkvz": "in_proj_qkvz.weight", "w_ba": "in_proj_ba.weight", "w_conv": "conv1d.weight",
                    "dt_bias": "dt_bias", "A_log": "A_log", "norm": "norm.weight", "w_out": "out_proj.weight"}
"""IR role -> the tensor under ``linear_attn.``, stored as the IR holds it."""


@dataclass(frozen=True)
class GatedQuery(Layout):
    """``q_proj`` holds, head by head (``heads``), the query's rows then its gate's: part 0 is
    the queries, followed by the other tensors' rows (``w_qkv`` from q_proj, k_proj, v_proj,
    ``rows`` their IR rows); part 1 the gates (``w_gate``). Export joins the two head by head."""

    heads: int
    rows: tuple[int, ...] = ()
    part: int = 0

    def hf_shapes(self, shape: tuple[int, ...], count: int) -> list[tuple[int, ...]]:
        if self.part:
            return [(2 * shape[0], *shape[1:])]
        return [(2 * self.rows[0], *shape[1:])] + [(rows, *shape[1:]) for rows in self.rows[1:]]

    def to_ir(self, parts: list[np.ndarray]) -> np.ndarray:
        rest = parts[0].shape[1:]
        picked = parts[0].reshape(self.heads, 2, -1, *rest)[:, self.part].reshape(-1, *rest)
        return np.concatenate([picked, *parts[1:]])

    def to_hf(self, value: np.ndarray, count: int) -> list[np.ndarray]:
        if self.part:
            return [value]
        return np.split(value, np.cumsum(self.rows)[:-1])

    def join(self, queries: np.ndarray, gates: np.ndarray) -> np.ndarray:
        rest = gates.shape[1:]
        return np.stack([queries.reshape(self.heads, -1, *rest), gates.reshape(self.heads, -1, *rest)], 1).reshape(
            -1, *rest)


@register
class Qwen3Next(Qwen2Moe):
    model_type = "qwen3_next"
    title = "Qwen3-Next"
    architectures = {"Qwen3NextForCausalLM": "model.", "Qwen3NextModel": ""}
    export_architecture = "Qwen3NextForCausalLM"
    heads = ("lm_head.", "mtp.")
    mapped = Llama.mapped + MOE_FIELDS + ("num_experts", "shared_expert_intermediate_size", "layer_types",
                                          "full_attention_interval", "partial_rotary_factor", *DELTANET.values())
    required = {"attention_bias": (False,)}
    ignored = Llama.ignored | MOE_IGNORED | dict.fromkeys(
        ("use_sliding_window", "sliding_window", "max_window_layers"), "transformers' Qwen3-Next never reads it")
    rope_types = ("default",)
    partial_rotary = True
    hybrid = True
    defaults = {"vocab_size": 151936, "hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 48,
                "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 256,
                "max_position_embeddings": 32768, "num_experts": 512, "num_experts_per_tok": 10,
                "moe_intermediate_size": 512, "shared_expert_intermediate_size": 512, "norm_topk_prob": True,
                "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128, "linear_value_head_dim": 128,
                "linear_num_key_heads": 16, "linear_num_value_heads": 32, "bos_token_id": None, "eos_token_id": None}
    """Qwen3NextConfig's values."""

    def spec_data(self, source: Source) -> dict:
        c, where = self.defaults | _counted(source.config, self.expert_counts, source.where), source.where
        data = Llama.spec_data(self, replace(source, config=_partial_rotary(c, where)))
        layers = data["decoder"]["layers"]
        moe, mixers = self._moe(c, where), {"linear_attention": self._deltanet(c, where),
                                            "full_attention": self._attention(c, where)}
        blocks = [[mixers[kind], moe if sparse else "ffn"]
                  for kind, sparse in zip(self._types(c, where, layers), self._sparse(c, where, layers))]
        groups = [{"layers": len(list(run)), "block": block} for block, run in groupby(blocks)]
        return data | {"decoder": groups[0] if len(groups) == 1 else {"groups": groups}}

    _biases = Llama._biases  # attention_bias, which must be false

    def _attention(self, c: dict, where: str):
        return {"kind": "causal_self_attention", "qk_norm": "head", "output_gate": True}

    def _deltanet(self, c: dict, where: str) -> dict:
        return {"kind": "gated_deltanet", **{ours: number(c, theirs, where) for ours, theirs in DELTANET.items()}}

    def _types(self, c: dict, where: str, layers: int) -> list[str]:
        """Each layer's mixer: layer_types, else full attention every full_attention_interval-th layer."""
        types = c.get("layer_types")
        if types is None:
            interval = number(c, "full_attention_interval", where, default=4)
            if interval < 1:
                raise TfspecError(f"{where}: full_attention_interval must be a positive integer, got {interval}")
            types = ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(layers)]
        if not isinstance(types, list) or len(types) < layers or any(t not in LAYER_TYPES for t in types[:layers]):
            raise TfspecError(f"{where}: layer_types: {_show(types)} is not supported; tfspec reads a list of "
                              f"{' or '.join(LAYER_TYPES)}, one per layer")
        return types[:layers]

    def rules(self, spec, architecture: str) -> list[Rule]:
        rules = [Rule("decoder.embed.weight", ("embed_tokens.weight",)),
                 Rule("decoder.norm.weight", ("norm.weight",), PlusOne())]
        if spec.tie_embeddings == "none" and architecture.endswith("ForCausalLM"):
            rules.append(Rule("output.weight", ("lm_head.weight",)))
        for layer in spec.plan("decoder"):
            (mixer, sub), (ffn, feed) = zip(layer.names, layer.sublayers)
            theirs = f"layers.{layer.index}."
            rules.append(Rule(f"{mixer}_norm.weight", (f"{theirs}input_layernorm.weight",), PlusOne()))
            rules += _deltanet_rules(mixer, sub, theirs) if sub.kind == "gated_deltanet" else \
                _attention_rules(mixer, sub, theirs)
            if feed.kind == "moe":
                rules += [replace(r, layout=PlusOne()) if r.ir.endswith("_norm.weight") else r
                          for r in self._moe_rules(layer.index, ffn, feed)]
            else:
                rules += [Rule(f"{ffn}_norm.weight", (f"{theirs}post_attention_layernorm.weight",), PlusOne())]
                rules += [Rule(f"{ffn}.{ours}", (f"{theirs}mlp.{part}_proj.weight",))
                          for ours, part in (("w_1", "gate"), ("w_3", "up"), ("w_2", "down"))]
        return rules

    def dropped(self, architecture: str) -> dict[str, str]:
        return super().dropped(architecture) | {
            "mtp.*": "multi-token prediction layers, which transformers' Qwen3-Next does not load"}

    def structure(self, spec) -> str | None:
        if reason := super().structure(spec):
            return reason
        for layer in spec.plan("decoder"):
            mixer = layer.sublayers[0]
            if len(layer.sublayers) != 2 or not (mixer.kind == "gated_deltanet" or (
                    mixer.kind == "causal_self_attention" and mixer.gate_function == "sigmoid" and mixer.qk_norm == "head")):
                return (f"{self.title}'s layers are a gated DeltaNet or a gated causal attention with per-head q/k "
                        "norms, then a feed-forward layer or mixture of experts")
        return None

    def config(self, spec) -> dict:
        v, layers, pos = spec.vocab, spec.plan("decoder"), spec.positional
        moe, deltanet = first_moe(spec), next((s for layer in layers for s in layer.sublayers
                                               if s.kind == "gated_deltanet"), None)
        config = {"architectures": [self.export_architecture], "model_type": self.model_type, "vocab_size": v.size,
                  "hidden_size": spec.d_model, "intermediate_size": spec.d_ff, "head_dim": spec.d_k,
                  "num_hidden_layers": len(layers), "num_attention_heads": spec.heads,
                  "num_key_value_heads": spec.num_kv_heads, "hidden_act": ACTIVATION_NAMES.get(spec.activation,
                                                                                            spec.activation),
                  "max_position_embeddings": pos.max_len, "rms_norm_eps": spec.norm_eps,
                  "rope_parameters": {"rope_type": "default", "rope_theta": pos.base,
                                      "partial_rotary_factor": pos.fraction},
                  "tie_word_embeddings": spec.tie_embeddings == "output", "bos_token_id": v.bos_id,
                  "eos_token_id": v.eos_id, "pad_token_id": v.pad_id, "attention_dropout": spec.attention_dropout,
                  "attention_bias": False, "layer_types": [LAYER_TYPES[layer.sublayers[0].kind != "gated_deltanet"]
                                                           for layer in layers],
                  "num_experts": moe.experts, "num_experts_per_tok": moe.top_k, "norm_topk_prob": moe.normalize,
                  "moe_intermediate_size": moe.d_ff, "shared_expert_intermediate_size": moe.shared_d_ff,
                  "decoder_sparse_step": 1, "mlp_only_layers": [layer.index for layer in layers
                                                                if layer.sublayers[1].kind != "moe"]}
        if deltanet is not None:
            config |= {theirs: getattr(deltanet, ours) for ours, theirs in DELTANET.items()}
        return config


def _partial_rotary(c: dict, where: str) -> dict:
    """``c`` with the rotated fraction in its rotary settings, as transformers reads it: from
    rope_parameters, else the top-level partial_rotary_factor (older files), else 0.25."""
    if not isinstance(c.get("rope_parameters") or {}, dict) or c.get("rope_scaling"):
        return c  # Llama's reading refuses the first; the second is a scaled rope type, refused there too
    rope = dict(c.get("rope_parameters") or {})
    rope.setdefault("partial_rotary_factor", number(c, "partial_rotary_factor", where, float, 0.25))
    rope.setdefault("rope_theta", c.get("rope_theta", 10000.0))
    return c | {"rope_parameters": rope}


def _deltanet_rules(ours: str, sub, theirs: str) -> list[Rule]:
    return [Rule(f"{ours}.{role}", (f"{theirs}linear_attn.{name}",)) for role, name in DELTANET_TENSORS.items()]


def _attention_rules(ours: str, a, theirs: str) -> list[Rule]:
    """Gated attention: w_qkv and w_gate out of q_proj (``GatedQuery``), then k_proj and v_proj;
    the per-head q/k norms, zero-centred."""
    qkv = tuple(f"{theirs}self_attn.{p}_proj.weight" for p in "qkv")
    rows = (a.heads * a.d_k, a.kv_heads * a.d_k, a.kv_heads * a.d_v)
    return [Rule(f"{ours}.w_qkv", qkv, GatedQuery(a.heads, rows)),
            Rule(f"{ours}.w_gate", qkv[:1], GatedQuery(a.heads, part=1)),
            Rule(f"{ours}.w_o", (f"{theirs}self_attn.o_proj.weight",))] + [
        Rule(f"{ours}.{p}_norm", (f"{theirs}self_attn.{p}_norm.weight",), PlusOne()) for p in "qk"]
