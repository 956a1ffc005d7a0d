"""Llama 4, text model (``model_type: llama4_text``): transformers' Llama4ForCausalLM and
Llama4TextModel as tfspec specs (the language model of meta-llama/Llama-4-Scout-17B-16E and
Llama-4-Maverick-17B-128E).

Llama (``llama.py``: pre-RMSNorm, grouped-query attention) with, layer by layer:

- Positions: layers listed 1 in ``no_rope_layers`` (by default all but every
  ``no_rope_layer_interval``-th) rotate queries and keys; the others (NoPE) see no positions but,
  with ``attn_temperature_tuning``, scale their queries by 1 + attn_scale log(1 + floor((i + 1) /
  floor_scale)) (tfspec's ``temperature`` positions). Rotary layers normalise each head's queries
  and keys by their root mean square, no gain, with ``use_qk_norm`` (``qk_norm: l2``).
- Attention: ``chunked_attention`` layers (``layer_types``; by default the rotary ones when
  ``attention_chunk_size`` is set) see only the keys of their own chunk of attention_chunk_size
  positions, not after the query: tfspec's causal ``local_1d_self_attention`` with that block
  and no memory; ``full_attention`` layers are causal.
- Feed-forward: layers in ``moe_layers`` (by default every ``interleave_moe_layer_step``-th) are
  mixtures of ``num_local_experts`` SwiGLU experts ``intermediate_size`` wide, of which each
  token runs the ``num_experts_per_tok`` its router's logits rank highest, the expert's input
  (not output) scaled by the sigmoid of its logit (``moe`` with ``scoring: sigmoid,
  input_weighted``), plus one ungated shared expert as wide; the other layers are dense SwiGLU
  ``intermediate_size_mlp`` wide (the spec's d_ff).

transformers rotates the features in interleaved pairs (x_0, x_1), (x_2, x_3), ... (a complex
product); tfspec rotates halves (x_i, x_{i+d/2}). The rows of each head in q_proj and k_proj
of rotary layers are permuted at import, even ones first, then odd ones (``deepseek_v2.py``'s
``RotaryPairs``), and back at export: scores are sums over features, and the L2 norm sums over
all of a head's, so the model computes the same thing. The experts are stored as transformers
multiplies them, (E, in, out): ``gate_up_proj`` holds each expert's gate, then up columns.
Defaults are Llama4TextConfig's (Scout's text model: 48 layers, 16 experts, top 1).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from itertools import groupby

import numpy as np

from tfspec.errors import TfspecError
from tfspec.interop.hf.deepseek_v2 import RotaryPairs
from tfspec.interop.hf.family import (ACTIVATION_NAMES, Rule, Source, _show, flag, number, register)
from tfspec.interop.hf.layouts import Concat, Layout
from tfspec.interop.hf.llama import Llama
from tfspec.interop.hf.mixtral import MOE_IGNORED, Experts, _counted, first_moe
from tfspec.interop.hf.rope import scaling_config
from tfspec.interop.hf.smollm3 import _rotated_layers

LAYER_TYPES = ("full_attention", "chunked_attention")


@dataclass(frozen=True)
class ExpertColumns(Layout):
    """IR experts (E, out, in) stored (E, in, out), as transformers' bmm multiplies them; with
    ``rows``, block ``part`` of the stored tensor's last axis (``Split`` along it)."""

    rows: tuple[int, ...] = ()
    part: int = 0

    def hf_shapes(self, shape: tuple[int, ...], count: int) -> list[tuple[int, ...]]:
        experts, out, width = shape
        return [(experts, width, sum(self.rows) if self.rows else out)]

    def to_ir(self, parts: list[np.ndarray]) -> np.ndarray:
        x = parts[0]
        if self.rows:
            x = np.split(x, np.cumsum(self.rows)[:-1], axis=-1)[self.part]
        return x.transpose(0, 2, 1)

    def to_hf(self, value: np.ndarray, count: int) -> list[np.ndarray]:
        return [value.transpose(0, 2, 1)]

    def join(self, earlier: np.ndarray, value: np.ndarray) -> np.ndarray:
        return np.concatenate([earlier, value], axis=-1)


@dataclass(frozen=True)
class PairedQKV(Concat):
    """``w_qkv`` (``Concat`` of q, k, v) of a rotary layer whose q and k rows are stored in
    interleaved pairs per head of ``block`` rows: permuted as ``RotaryPairs`` does."""

    block: int = 0

    def to_ir(self, parts: list[np.ndarray]) -> np.ndarray:
        q, k, v = parts
        pairs = RotaryPairs(self.block, self.block)
        return super().to_ir([pairs.to_ir([q]), pairs.to_ir([k]), v])

    def to_hf(self, value: np.ndarray, count: int) -> list[np.ndarray]:
        q, k, v = super().to_hf(value, count)
        pairs = RotaryPairs(self.block, self.block)
        return [*pairs.to_hf(q, 1), *pairs.to_hf(k, 1), v]


@register
class Llama4Text(Experts, Llama):
    model_type = "llama4_text"
    title = "Llama 4 (text)"
    architectures = {"Llama4ForCausalLM": "model.", "Llama4TextModel": ""}
    export_architecture = "Llama4ForCausalLM"
    grouped = True
    mapped = tuple(f for f in Llama.mapped if f != "mlp_bias") + (
        "intermediate_size_mlp", "num_local_experts", "num_experts_per_tok", "moe_layers", "interleave_moe_layer_step",
        "use_qk_norm", "no_rope_layers", "no_rope_layer_interval", "attention_chunk_size", "layer_types",
        "attn_temperature_tuning", "floor_scale", "attn_scale")
    ignored = Llama.ignored | MOE_IGNORED | {
        "router_jitter_noise": "transformers' Llama 4 never reads it (no noise is added to the router)",
        "for_llm_compressor": "a switch of transformers 4.51 (unfused experts for llm-compressor) that transformers 5 "
                              "never reads; the published Llama 4 configs carry it"}
    expert_counts = ("num_local_experts",)
    renormalises = False
    routing = Experts.routing | {"scoring": "sigmoid", "normalize": False, "input_weighted": True}
    defaults = {"vocab_size": 202048, "hidden_size": 5120, "intermediate_size": 8192, "intermediate_size_mlp": 16384,
                "num_hidden_layers": 48, "num_attention_heads": 40, "num_key_value_heads": 8, "head_dim": 128,
                "max_position_embeddings": 131072, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
                "bos_token_id": 1, "eos_token_id": 2, "num_local_experts": 16, "num_experts_per_tok": 1,
                "interleave_moe_layer_step": 1, "use_qk_norm": True, "attention_chunk_size": 8192,
                "attn_temperature_tuning": True, "floor_scale": 8192, "attn_scale": 0.1}
    """Llama4TextConfig's values (Llama-4-Scout's text model)."""

    def spec_data(self, source: Source) -> dict:
        where = source.where
        c = self.defaults | _counted(source.config, self.expert_counts, where)
        dense = {"intermediate_size": number(c, "intermediate_size_mlp", where)}
        data = Llama.spec_data(self, replace(source, config=c | dense))
        layers = data["decoder"]["layers"]
        sparse, moe = self._sparse(c, where, layers), self._moe(c, where)
        rotated, types = _rotated_layers(c, where, layers), self._types(c, where, layers)
        blocks = [[self._layer_attention(c, where, rotated[i], types[i]), moe if sparse[i] else "ffn"]
                  for i in range(layers)]
        groups = [{"layers": len(list(run)), "block": json.loads(json.dumps(block))} for block, run in groupby(blocks)]
        return data | {"decoder": groups[0] if len(groups) == 1 else {"groups": groups}}

    def _types(self, c: dict, where: str, layers: int) -> list[str]:
        """Each layer's ``layer_types`` entry, or transformers' default: chunked where rotary when
        attention_chunk_size is set."""
        types = c.get("layer_types")
        if types is None:
            chunked = c.get("attention_chunk_size") is not None
            rotated = _rotated_layers(c, where, layers)
            return ["chunked_attention" if r and chunked else "full_attention" for r in rotated]
        if not isinstance(types, list) or len(types) < layers or any(t not in LAYER_TYPES for t in types[:layers]):
            raise TfspecError(f"{where}: layer_types: {_show(types)} is not supported; tfspec reads "
                              f"{' or '.join(LAYER_TYPES)} for each of the {layers} layers")
        if "chunked_attention" in types[:layers] and c.get("attention_chunk_size") is None:
            raise TfspecError(f"{where}: layer_types lists chunked_attention but attention_chunk_size is null")
        return types[:layers]

    def _layer_attention(self, c: dict, where: str, rotary: bool, kind: str) -> dict:
        layer = {"kind": "causal_self_attention"}
        if kind == "chunked_attention":
            layer = {"kind": "local_1d_self_attention", "block": number(c, "attention_chunk_size", where),
                     "causal": True}
        if rotary:
            return layer | ({"qk_norm": "l2"} if flag(c, "use_qk_norm", where) else {})
        if not _switch(c, "attn_temperature_tuning", where):
            return layer | {"positions": "none"}
        return layer | {"positions": {"kind": "temperature", "temperature_floor": number(c, "floor_scale", where),
                                      "temperature_scale": number(c, "attn_scale", where, float)}}

    def _sparse(self, c: dict, where: str, layers: int) -> list[bool]:
        """Whether each layer is a mixture of experts: listed in moe_layers, or by default every
        interleave_moe_layer_step-th (layers step - 1, 2 step - 1, ...), as transformers decides."""
        listed = c.get("moe_layers")
        step = number(c, "interleave_moe_layer_step", where)  # read whether the list decides or not
        if listed is None:
            if step < 1:
                raise TfspecError(f"{where}: interleave_moe_layer_step must be a positive integer, got {step}")
            listed = list(range(step - 1, layers, step))
        if not isinstance(listed, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in listed):
            raise TfspecError(f"{where}: moe_layers: {_show(listed)} is not supported; tfspec reads a list of layer "
                              "indices")
        return [i in listed for i in range(layers)]

    def _moe(self, c: dict, where: str) -> dict:
        width = number(c, "intermediate_size", where)
        return super()._moe(c, where) | {"d_ff": width, "scoring": "sigmoid", "input_weighted": True, "shared": 1,
                                         "shared_d_ff": width}

    def _biases(self, c: dict, where: str) -> dict:
        attention = flag(c, "attention_bias", where)
        return {"q": attention, "k": attention, "v": attention, "o": attention, "ffn": False}

    def rules(self, spec, architecture: str) -> list[Rule]:
        """Llama's and ``Experts``' rules, the feed-forward ones under ``feed_forward``, the
        rotary layers' q and k rows in interleaved pairs."""
        rotary = {f"decoder.layers.{layer.index}.self_attn.{role}": layer.attention for layer in spec.plan("decoder")
                  for role in ("w_qkv", "b_qkv") if layer.attention.positions.kind == "rotary"}
        rules = []
        for rule in super().rules(spec, architecture):
            rule = replace(rule, hf=tuple(name.replace(".mlp.", ".feed_forward.") for name in rule.hf))
            if rule.ir in rotary:
                rule = replace(rule, layout=PairedQKV(rule.layout.rows, block=rotary[rule.ir].d_k))
            rules.append(rule)
        return rules

    def _moe_rules(self, i: int, name: str, moe) -> list[Rule]:
        theirs, f = f"layers.{i}.feed_forward.", moe.d_ff
        return [Rule(f"{name}_norm.weight", (f"layers.{i}.post_attention_layernorm.weight",)),
                Rule(f"{name}.w_router", (f"{theirs}router.weight",)),
                Rule(f"{name}.w_1", (f"{theirs}experts.gate_up_proj",), ExpertColumns((f, f), 0)),
                Rule(f"{name}.w_3", (f"{theirs}experts.gate_up_proj",), ExpertColumns((f, f), 1)),
                Rule(f"{name}.w_2", (f"{theirs}experts.down_proj",), ExpertColumns())] + [
            Rule(f"{name}.w_shared_{n}", (f"{theirs}shared_expert.{part}.weight",))
            for n, part in (("1", "gate_proj"), ("3", "up_proj"), ("2", "down_proj"))]

    def structure(self, spec) -> str | None:
        if reason := super().structure(spec):
            return reason
        kinds = {layer.attention.kind for layer in spec.plan("decoder") if layer.attention is not None}
        if not kinds <= {"causal_self_attention", "local_1d_self_attention"} or spec.positional.kind != "rotary":
            return (f"{self.title}'s layers are causal or chunked (local_1d_self_attention), with rotary positions "
                    "or none; this spec's are not")
        return None

    def config(self, spec) -> dict:
        v, pos, layers, moe = spec.vocab, spec.positional, spec.plan("decoder"), first_moe(spec)
        a = layers[0].attention
        config = {"architectures": [self.export_architecture], "model_type": self.model_type, "vocab_size": v.size,
                  "hidden_size": spec.d_model, "intermediate_size": moe.d_ff, "intermediate_size_mlp": spec.d_ff,
                  "head_dim": a.d_k, "num_hidden_layers": len(layers), "num_attention_heads": a.heads,
                  "num_key_value_heads": a.kv_heads, "hidden_act": ACTIVATION_NAMES.get(moe.activation, moe.activation),
                  "max_position_embeddings": pos.max_len, "rms_norm_eps": spec.norm_eps, "rope_theta": pos.base,
                  "tie_word_embeddings": spec.tie_embeddings == "output", "bos_token_id": v.bos_id,
                  "eos_token_id": v.eos_token_id, "pad_token_id": v.pad_id,
                  "attention_dropout": spec.attention_dropout, "attention_bias": spec.has_bias("q"),
                  "num_local_experts": moe.experts, "num_experts_per_tok": moe.top_k}
        return config | scaling_config(pos) | self._layer_config(layers)

    def _layer_config(self, layers) -> dict:
        """The per-layer fields: which layers rotate, chunk, and are mixtures of experts, and the
        settings of the rotary layers' qk norm and of the others' temperature."""
        attentions = [layer.attention for layer in layers]
        chunked = [a for a in attentions if a.kind == "local_1d_self_attention"]
        plain = [a.positions for a in attentions if a.positions.kind != "rotary"]
        tuned = [p for p in plain if p.kind == "temperature"]
        return {"no_rope_layers": [int(a.positions.kind == "rotary") for a in attentions],
                "layer_types": ["chunked_attention" if a.kind == "local_1d_self_attention" else "full_attention"
                                for a in attentions],
                "attention_chunk_size": chunked[0].block if chunked else None,
                "use_qk_norm": any(a.qk_norm == "l2" for a in attentions),
                "attn_temperature_tuning": bool(tuned),
                **({"floor_scale": tuned[0].temperature_floor, "attn_scale": tuned[0].temperature_scale}
                   if tuned else {}),
                "moe_layers": [layer.index for layer in layers if any(s.kind == "moe" for s in layer.sublayers)]}


def _switch(c: dict, key: str, where: str) -> bool:
    """A switch transformers reads by its truth (``if self.attn_temperature_tuning``): true or false,
    or an integer as transformers 4.51 wrote it (Llama-4-Scout's published config.json says 4)."""
    value = c.get(key)
    if isinstance(value, int) and not isinstance(value, bool):
        return value != 0
    return flag(c, key, where)
