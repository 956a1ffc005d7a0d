"""OPT (``model_type: opt``): transformers' OPTForCausalLM and OPTModel as tfspec specs
(facebook/opt-125m .. opt-66b).

GPT-2's model (``gpt2.py``: pre-norm LayerNorms, a final one, learned positions, biases, the
output tied to the token embedding) under BART's fairseq names (``marian.py``'s layer rules:
separate q, k, v stacked into ``w_qkv``, ``fc1``/``fc2``, ``self_attn_layer_norm`` and
``final_layer_norm``). Like BART, the position table starts with two rows no position reads
(``positional.offset: 2``); the MLP is relu; ``enable_bias`` switches every projection's bias;
LayerNorms use torch's fixed eps 1e-5. transformers numbers positions by counting the attention
mask, which gives 0, 1, .. at the real tokens of right-padded or unpadded inputs, as tfspec does.

opt-350m differs twice: ``do_layer_norm_before: false`` is post-norm with no final norm, and its
``word_embed_proj_dim`` of 512 under a 1024-wide model is ``embed_projection`` (the token
embeddings alone projected in, positions added at 1024, ``project_out`` before the tied output;
neither projection has a bias). Refused by name: LayerNorms without parameters
(``layer_norm_elementwise_affine: false``) and ``_remove_final_layer_norm``. Defaults are
OPTConfig's.
"""

from __future__ import annotations

from tfspec.interop.hf.family import (ACTIVATION_NAMES, Family, Rule, Source, activation, end_ids, flag,
                                      norm_rules, number, register, repeated_layer)
from tfspec.interop.hf.marian import _attention, _ffn

POSITION_OFFSET = 2
"""transformers' OPTLearnedPositionalEmbedding.offset: fairseq's two padding rows, as BART's."""


@register
class OPT(Family):
    model_type = "opt"
    family = "decoder-only"
    title = "OPT"
    architectures = {"OPTForCausalLM": "model.", "OPTModel": ""}
    export_architecture = "OPTForCausalLM"
    heads = ("lm_head.",)
    mapped = ("vocab_size", "hidden_size", "num_hidden_layers", "ffn_dim", "max_position_embeddings",
              "word_embed_proj_dim", "dropout", "attention_dropout", "num_attention_heads", "activation_function",
              "enable_bias", "pad_token_id", "bos_token_id", "eos_token_id", "do_layer_norm_before")
    required = {"_remove_final_layer_norm": (False,),
                "layer_norm_elementwise_affine": (True,), "tie_word_embeddings": (True,)}
    ignored = {"layerdrop": "training only (drops whole layers while training)",
               "init_std": "initialisation of untrained weights"}

    def spec_data(self, source: Source) -> dict:
        c, where = source.config, source.where
        d_model = number(c, "hidden_size", where, default=768)
        width = d_model if c.get("word_embed_proj_dim") is None else number(c, "word_embed_proj_dim", where)
        pre = flag(c, "do_layer_norm_before", where, True)
        projection = {"width": width, "bias": False, "projects": "tokens", "out": "project"}
        return {"family": self.family, "vocab": self._vocab(source), "d_model": d_model,
                **({"embed_projection": projection} if width != d_model else {}),
                "heads": number(c, "num_attention_heads", where, default=12),
                "d_ff": number(c, "ffn_dim", where, default=3072),
                "activation": activation(c, "activation_function", where, "relu"),
                "dropout": number(c, "dropout", where, float, 0.1),
                "attention_dropout": number(c, "attention_dropout", where, float, 0.0), "label_smoothing": 0.0,
                "positional": {"kind": "learned", "offset": POSITION_OFFSET,
                               "max_len": number(c, "max_position_embeddings", where, default=2048)},
                "norm": "pre" if pre else "post", "norm_eps": 1e-5, "final_norm": pre, "tie_embeddings": "output",
                "embed_scale": False, "bias": flag(c, "enable_bias", where, True),
                "decoder": {"layers": number(c, "num_hidden_layers", where, default=12),
                            "block": ["causal_self_attention", "ffn"]}}

    def _vocab(self, source: Source) -> dict:
        """</s> (2) is bos and eos, <pad> (1) padding; without a pad_token_id, eos pads too
        (GPT-2's one token for all). unk is the tokenizer's <unk> (only tokenizers read it)."""
        c, where = source.config, source.where
        size, ends = number(c, "vocab_size", where, default=50272), end_ids(c, where, 2)
        pad = ends["eos_id"] if c.get("pad_token_id", 1) is None else number(c, "pad_token_id", where, default=1)
        unk = source.vocabulary.get("<unk>")
        return {"size": size, "pad_id": pad, "bos_id": number(c, "bos_token_id", where, default=2), **ends,
                "unk_id": unk if isinstance(unk, int) and 0 <= unk < size and pad != ends["eos_id"] else pad}

    def rules(self, spec, architecture: str) -> list[Rule]:
        rules = [Rule("decoder.embed.weight", ("decoder.embed_tokens.weight",)),
                 Rule("decoder.pos.weight", ("decoder.embed_positions.weight",))]
        if spec.uses_final_norm:
            rules += norm_rules("decoder.norm", "decoder.final_layer_norm")
        if spec.embed_projection is not None:
            rules += [Rule("decoder.project_in.weight", ("decoder.project_in.weight",)),
                      Rule("project_out.weight", ("decoder.project_out.weight",))]
        for i in range(spec.decoder.num_layers):
            p = f"decoder.layers.{i}."
            rules += [*_attention(p + "self_attn", p + "self_attn", "qkv"),
                      *norm_rules(p + "self_attn_norm", p + "self_attn_layer_norm"), *_ffn(p, p)]
        return [r for r in rules if spec.bias or not r.ir.rsplit(".", 1)[1].startswith("b_")]

    def dropped(self, architecture: str) -> dict[str, str]:
        return {"lm_head.weight": "the output projection, tied to the token embedding"}

    def config(self, spec) -> dict:
        v, (attention, ffn) = spec.vocab, repeated_layer(spec, "decoder")
        return {"architectures": [self.export_architecture], "model_type": self.model_type, "vocab_size": v.size,
                "hidden_size": spec.d_model, "word_embed_proj_dim": spec.embed_width,
                "num_hidden_layers": spec.decoder.num_layers, "num_attention_heads": attention.heads,
                "ffn_dim": ffn.d_ff, "activation_function": ACTIVATION_NAMES[ffn.activation],
                "max_position_embeddings": spec.positional.max_len, "dropout": spec.dropout,
                "attention_dropout": spec.attention_dropout, "enable_bias": spec.bias,
                "do_layer_norm_before": spec.norm == "pre", "pad_token_id": v.pad_id, "bos_token_id": v.bos_id, "eos_token_id": v.eos_token_id,
                "tie_word_embeddings": True}
