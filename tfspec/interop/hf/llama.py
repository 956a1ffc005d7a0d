"""Llama, Mistral and Qwen2 (``model_type: llama | mistral | qwen2``): transformers'
*ForCausalLM and *Model as tfspec specs (``specs/zoo/llama-2-7b.yaml`` and its siblings).

Pre-RMSNorm decoders with SwiGLU feed-forward layers, rotary positions in the rotate-half
layout, grouped-query attention and (Llama) an untied output head. Mistral adds a sliding
window of w tokens, tfspec's causal restricted attention with r = w - 1; Qwen2 biases its
query, key and value projections. The checkpoint's q, k and v matrices are stacked into one
``w_qkv`` (rows h*d_k, kv*d_k, kv*d_v). Rotary settings come as ``rope_parameters``
(transformers 5) or ``rope_theta`` + ``rope_scaling`` (older files); the scaled types
(``rope.py``: llama3, linear, dynamic, yarn, longrope) import, others are refused by name.
``export --format hf`` writes the classic fields (``rope_theta``, ``rope_scaling``), which
transformers 4 and 5 both read.
"""

from __future__ import annotations

from dataclasses import replace
from typing import ClassVar

from tfspec.errors import TfspecError
from tfspec.interop.hf.family import (ACTIVATION_NAMES, Family, Rule, Source, _show, activation, end_ids,
                                     flag, number, register)
from tfspec.interop.hf.layouts import Concat
from tfspec.interop.hf.rope import ROPE_TYPES, scaling_config, scaling_data



@register
class Llama(Family):
    model_type = "llama"
    family = "decoder-only"
    title = "Llama"
    architectures = {"LlamaForCausalLM": "model.", "LlamaModel": ""}
    export_architecture = "LlamaForCausalLM"
    heads = ("lm_head.",)
    mapped = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
              "num_key_value_heads", "head_dim", "hidden_act", "max_position_embeddings", "rms_norm_eps",
              "rope_parameters", "rope_theta", "rope_scaling", "attention_bias", "mlp_bias", "tie_word_embeddings",
              "bos_token_id", "eos_token_id", "pad_token_id", "attention_dropout")
    ignored = {"pretraining_tp": "splits the matrix products into slices whose results are added: the same sums",
               **dict.fromkeys(("is_llama_config", "rope_interleaved"),
                               "left over from nanotron (SmolLM2's configs); transformers reads neither, and the "
                               "converted weights are in its rotate-half layout")}
    defaults = {"bos_token_id": 1, "eos_token_id": 2}
    """LlamaConfig's values where ``_vocab``'s fallbacks (bos = eos = 0) differ."""
    rope_types: ClassVar[tuple[str, ...]] = ROPE_TYPES
    """transformers' rope types this family's rotary computes and tfspec does too."""
    partial_rotary = False
    """Whether transformers rotates only the first ``partial_rotary_factor`` of each head's features
    (StableLM); Llama's, Mistral's and Qwen2's rotary never reads the factor, so a configuration
    that sets one is refused rather than imported rotating fewer features than transformers does."""

    hybrid: ClassVar[bool] = False
    """Whether layers may hold a recurrent token mixer in place of attention (Qwen3-Next's gated DeltaNet)."""

    def spec_data(self, source: Source) -> dict:
        source = replace(source, config=self.defaults | source.config)
        c, where = source.config, source.where
        d_model = number(c, "hidden_size", where, default=4096)
        heads = number(c, "num_attention_heads", where, default=32)
        head_dim = number(c, "head_dim", where) if c.get("head_dim") is not None else d_model // heads
        return {"family": self.family, "vocab": _vocab(c, where), "d_model": d_model, "heads": heads,
                "kv_heads": number(c, "num_key_value_heads", where, default=heads),
                "d_k": head_dim, "d_v": head_dim,
                "d_ff": number(c, "intermediate_size", where, default=11008),
                "activation": activation(c, "hidden_act", where, "silu"), "gated": True,
                "dropout": 0.0, "attention_dropout": number(c, "attention_dropout", where, float, 0.0),
                "label_smoothing": 0.0, "positional": self._rotary(c, where), "norm": "pre", "norm_type": "rms",
                "norm_eps": number(c, "rms_norm_eps", where, float, 1e-6), "final_norm": True, "bias": False,
                "biases": self._biases(c, where), "embed_scale": False,
                "tie_embeddings": "output" if self._tied(source) else "none",
                "decoder": {"layers": number(c, "num_hidden_layers", where, default=32),
                            "block": [self._attention(c, where), "ffn"]}}

    def _tied(self, source: Source) -> bool:
        """Whether the spec's output projection is the token embedding: as the config says for
        *ForCausalLM; always for *Model, which has no projection of its own to import (so the
        spec holds exactly the published class's parameters, as GPT2Model's does)."""
        return (flag(source.config, "tie_word_embeddings", source.where)
                or not source.architecture.endswith("ForCausalLM"))

    def _biases(self, c: dict, where: str) -> dict:
        attention, mlp = flag(c, "attention_bias", where), flag(c, "mlp_bias", where)
        return {"q": attention, "k": attention, "v": attention, "o": attention, "ffn": mlp}

    def _attention(self, c: dict, where: str):
        return "causal_self_attention"

    def _rotary(self, c: dict, where: str) -> dict:
        for key in ("rope_parameters", "rope_scaling"):
            if not isinstance(c.get(key) or {}, dict):
                raise TfspecError(f"{where}: {key} must be an object of rotary settings, got {_show(c[key])}")
        # as transformers reads them: rope_scaling (older files), when set, replaces rope_parameters whole
        rope = dict(c.get("rope_scaling") or c.get("rope_parameters") or {})
        rope.setdefault("rope_theta", number(c, "rope_theta", where, float, 10000.0))  # read even where unused
        kind = rope.get("rope_type", rope.get("type", "default"))
        if kind not in self.rope_types:
            raise TfspecError(f"{where}: rope type {_show(kind)} is not supported; tfspec imports {self.title} with "
                              f"rotary positions of type {' or '.join(self.rope_types)}")
        positional = {"kind": "rotary", "max_len": number(c, "max_position_embeddings", where, default=2048),
                      "base": number(rope, "rope_theta", where, float)}
        if rope.get("partial_rotary_factor", 1.0) != 1.0:
            if not self.partial_rotary:
                raise TfspecError(f"{where}: partial_rotary_factor: {_show(rope['partial_rotary_factor'])} is not "
                                  f"supported; transformers' {self.title} rotates every feature of a head")
            positional["fraction"] = number(rope, "partial_rotary_factor", where, float)
        if kind != "default":
            positional |= scaling_data(rope, kind, positional["max_len"], where)
        return positional

    def structure(self, spec) -> str | None:
        """Besides the shape, an attention sub-layer in every layer (``config`` reads the first's),
        unless the family mixes in recurrent layers (``hybrid``: Qwen3-Next)."""
        if reason := super().structure(spec):
            return reason
        if not self.hybrid and any(layer.attention is None for layer in spec.plan("decoder")):
            return f"{self.title}'s layers each hold an attention layer; this spec has layers without one"
        return None

    def rules(self, spec, architecture: str) -> list[Rule]:
        rules = [Rule("decoder.embed.weight", ("embed_tokens.weight",)), Rule("decoder.norm.weight", ("norm.weight",))]
        if spec.tie_embeddings == "none" and architecture.endswith("ForCausalLM"):
            rules.append(Rule("output.weight", ("lm_head.weight",)))
        for layer in spec.plan("decoder"):
            i, a = layer.index, layer.attention
            rows = (a.heads * a.d_k, a.kv_heads * a.d_k, a.kv_heads * a.d_v)
            ours, theirs, attn = f"decoder.layers.{i}.", f"layers.{i}.", "self_attn"  # full or sliding window alike
            qkv = tuple(f"{theirs}self_attn.{p}_proj" for p in "qkv")
            rules += [Rule(f"{ours}{attn}_norm.weight", (f"{theirs}input_layernorm.weight",)),
                      Rule(f"{ours}{attn}.w_qkv", tuple(f"{p}.weight" for p in qkv), Concat(rows)),
                      Rule(f"{ours}{attn}.w_o", (f"{theirs}self_attn.o_proj.weight",)),
                      Rule(f"{ours}ffn_norm.weight", (f"{theirs}post_attention_layernorm.weight",)),
                      Rule(f"{ours}ffn.w_1", (f"{theirs}mlp.gate_proj.weight",)),
                      Rule(f"{ours}ffn.w_3", (f"{theirs}mlp.up_proj.weight",)),
                      Rule(f"{ours}ffn.w_2", (f"{theirs}mlp.down_proj.weight",))]
            if spec.has_bias("q"):
                rules.append(Rule(f"{ours}{attn}.b_qkv", tuple(f"{p}.bias" for p in qkv), Concat(rows)))
            if spec.has_bias("o"):
                rules.append(Rule(f"{ours}{attn}.b_o", (f"{theirs}self_attn.o_proj.bias",)))
            if spec.has_bias("ffn"):
                rules += [Rule(f"{ours}ffn.b_{n}", (f"{theirs}mlp.{p}_proj.bias",))
                          for n, p in (("1", "gate"), ("3", "up"), ("2", "down"))]
        return rules

    def dropped(self, architecture: str) -> dict[str, str]:
        head = ("the output projection, tied to the token embedding" if architecture.endswith("ForCausalLM")
                else f"{architecture} has no output projection")
        return {"lm_head.weight": head,
                "layers.*.self_attn.rotary_emb.inv_freq": "rotary frequencies, computed from the config"}

    def config(self, spec) -> dict:
        """The configuration of ``spec``, read from its first layer's plan (``export`` has
        checked that every layer is alike)."""
        v, first = spec.vocab, spec.plan("decoder")[0]
        a, pos = first.attention, first.attention.positions
        ffn = next(s for s in first.sublayers if s.component == "ffn")  # a feed-forward layer or a mixture of experts
        config = {"architectures": [self.export_architecture], "model_type": self.model_type, "vocab_size": v.size,
                  "hidden_size": spec.d_model, "intermediate_size": ffn.d_ff, "head_dim": a.d_k,
                  "num_hidden_layers": spec.decoder.num_layers, "num_attention_heads": a.heads,
                  "num_key_value_heads": a.kv_heads, "hidden_act": ACTIVATION_NAMES.get(ffn.activation, ffn.activation),
                  "max_position_embeddings": pos.max_len, "rms_norm_eps": spec.norm_eps, "rope_theta": pos.base,
                  "tie_word_embeddings": spec.tie_embeddings == "output", "bos_token_id": v.bos_id,
                  "eos_token_id": v.eos_token_id, "pad_token_id": v.pad_id, "attention_dropout": spec.attention_dropout}
        return config | scaling_config(pos) | self._config_biases(spec)

    def _config_biases(self, spec) -> dict:
        return {"attention_bias": spec.has_bias("q"), "mlp_bias": spec.has_bias("ffn")}


@register
class Mistral(Llama):
    model_type = "mistral"
    title = "Mistral"
    architectures = {"MistralForCausalLM": "model.", "MistralModel": ""}
    export_architecture = "MistralForCausalLM"
    mapped = Llama.mapped + ("sliding_window",)
    defaults = Llama.defaults | {"intermediate_size": 14336, "num_key_value_heads": 8,
                                 "max_position_embeddings": 131072, "sliding_window": 4096}
    """MistralConfig's values where Llama's differ (Mistral-7B's shape)."""

    def config(self, spec) -> dict:
        attention = spec.plan("decoder")[0].attention
        window = attention.r + 1 if attention.kind == "restricted_self_attention" else None
        return super().config(spec) | {"sliding_window": window}

    def _attention(self, c: dict, where: str):
        if c.get("sliding_window") is None:
            return "causal_self_attention"
        window = number(c, "sliding_window", where)
        if window >= number(c, "max_position_embeddings", where, default=32768):
            return "causal_self_attention"  # no position ever sees further back than the window
        # Query i sees keys i - w + 1 .. i: causal restricted attention with r = w - 1.
        return {"kind": "restricted_self_attention", "r": window - 1, "causal": True}


@register
class Qwen2(Llama):
    model_type = "qwen2"
    title = "Qwen2"
    architectures = {"Qwen2ForCausalLM": "model.", "Qwen2Model": ""}
    export_architecture = "Qwen2ForCausalLM"
    defaults = {"vocab_size": 151936, "intermediate_size": 22016, "max_position_embeddings": 32768}
    """Qwen2Config's values where Llama's differ (no bos or eos id: ``_vocab`` falls back on 0)."""
    required = {"use_sliding_window": (False,)}
    ignored = Llama.ignored | {
        "sliding_window": "read only with use_sliding_window, which must be false",
        "max_window_layers": "read only with use_sliding_window, which must be false",
        "layer_types": "every layer full attention, as use_sliding_window false says"}

    def _biases(self, c: dict, where: str) -> dict:
        return {"q": True, "k": True, "v": True, "o": False, "ffn": False}  # Qwen2 biases q, k and v only

    def _config_biases(self, spec) -> dict:
        return {"use_sliding_window": False}


def _vocab(c: dict, where: str) -> dict:
    """bos/eos from the config; padding by pad_token_id, else <unk> (id 0: Llama pads with it),
    else, when bos and eos are one token (Qwen2), that token for all four (GPT-2's convention).
    A pad_token_id equal to eos (fine-tunes that batch with </s>) is taken as <unk> too: padding
    only tells transformers which positions the attention mask hides, and tfspec finds padding
    by id, so </s> as padding would hide the </s> an input ends with (e5-mistral's last token)."""
    bos, eos = c.get("bos_token_id"), c.get("eos_token_id")
    ends = end_ids(c, where, None) if eos not in (None, []) else {}
    eos = ends.get("eos_id")
    bos = bos if bos is not None else eos if eos is not None else 0
    eos = eos if eos is not None else bos
    ids = {"bos_id": number({"bos_token_id": bos}, "bos_token_id", where),
           "eos_id": number({"eos_token_id": eos}, "eos_token_id", where)}
    pad = number(c, "pad_token_id", where) if c.get("pad_token_id") is not None else None
    if pad is None or (pad == eos and bos != eos):  # padding with </s> would hide every </s> of an input
        pad = bos if bos == eos else 0
    unk = pad if pad not in (bos, eos) or bos == eos else 0
    return {"size": number(c, "vocab_size", where, default=32000), **ids, "pad_id": pad, "unk_id": unk,
            **({"eos_ids": ends["eos_ids"]} if "eos_ids" in ends else {})}
