"""GPT-2 (``model_type: gpt2``): transformers' GPT2LMHeadModel and GPT2Model as tfspec specs.

A pre-norm decoder with a final LayerNorm, learned positions, biases everywhere and the output
tied to the token embedding (``specs/zoo/gpt2.yaml``). GPT-2 keeps OpenAI's Conv1D layers,
whose weights are stored (in, out): transposed from tfspec's (out, in). One token,
<|endoftext|>, is bos, eos and (without a pad_token_id) padding. Defaults are GPT2Config's.
"""

from __future__ import annotations

from tfspec.interop.hf.family import (ACTIVATION_NAMES, Family, Rule, Source, activation, norm_rules, number,
                                      register, repeated_layer)
from tfspec.interop.hf.layouts import Transpose


@register
class GPT2(Family):
    model_type = "gpt2"
    family = "decoder-only"
    title = "GPT-2"
    architectures = {"GPT2LMHeadModel": "transformer.", "GPT2Model": ""}
    export_architecture = "GPT2LMHeadModel"
    heads = ("lm_head.",)
    mapped = ("vocab_size", "n_positions", "n_embd", "n_layer", "n_head", "n_inner", "activation_function",
              "resid_pdrop", "attn_pdrop", "layer_norm_epsilon", "bos_token_id", "eos_token_id",
              "pad_token_id")
    required = {"scale_attn_weights": (True,), "scale_attn_by_inverse_layer_idx": (False,),
                "reorder_and_upcast_attn": (False,), "tie_word_embeddings": (True,)}
    ignored = {"embd_pdrop": "training only; tfspec's one dropout (resid_pdrop) covers the embeddings too",
               "n_ctx": "an old alias of n_positions that transformers no longer reads",
               "is_decoder": "GPT-2 is causal whatever this says; transformers' GPT-2 does not read it",
               **dict.fromkeys(("n_special", "predict_special_tokens"),
                               "left over from OpenAI GPT (gpt2-medium's config); transformers' GPT-2 reads neither")}

    def spec_data(self, source: Source) -> dict:
        c, where = source.config, source.where
        d_model = number(c, "n_embd", where, default=768)
        inner = c.get("n_inner")
        return {"family": self.family, "vocab": self._vocab(c, where), "d_model": d_model,
                "heads": number(c, "n_head", where, default=12),
                "d_ff": 4 * d_model if inner is None else number(c, "n_inner", where),
                "activation": activation(c, "activation_function", where, "gelu_new"),
                "dropout": number(c, "resid_pdrop", where, float, 0.1),
                "attention_dropout": number(c, "attn_pdrop", where, float, 0.1), "label_smoothing": 0.0,
                "positional": {"kind": "learned", "max_len": number(c, "n_positions", where, default=1024)},
                "norm": "pre", "norm_eps": number(c, "layer_norm_epsilon", where, float, 1e-5), "final_norm": True,
                "tie_embeddings": "output", "embed_scale": False,
                "decoder": {"layers": number(c, "n_layer", where, default=12),
                            "block": ["causal_self_attention", "ffn"]}}

    def _vocab(self, c: dict, where: str) -> dict:
        eos = number(c, "eos_token_id", where, default=50256)
        pad = eos if c.get("pad_token_id") is None else number(c, "pad_token_id", where)
        return {"size": number(c, "vocab_size", where, default=50257), "pad_id": pad,
                "bos_id": number(c, "bos_token_id", where, default=50256), "eos_id": eos, "unk_id": eos}

    def rules(self, spec, architecture: str) -> list[Rule]:
        rules = [Rule("decoder.embed.weight", ("wte.weight",)), Rule("decoder.pos.weight", ("wpe.weight",))]
        for i in range(spec.decoder.num_layers):
            ours, theirs = f"decoder.layers.{i}.", f"h.{i}."
            rules += [*norm_rules(ours + "self_attn_norm", theirs + "ln_1"),
                      *_conv1d(ours + "self_attn.w_qkv", ours + "self_attn.b_qkv", theirs + "attn.c_attn"),
                      *_conv1d(ours + "self_attn.w_o", ours + "self_attn.b_o", theirs + "attn.c_proj"),
                      *norm_rules(ours + "ffn_norm", theirs + "ln_2"),
                      *_conv1d(ours + "ffn.w_1", ours + "ffn.b_1", theirs + "mlp.c_fc"),
                      *_conv1d(ours + "ffn.w_2", ours + "ffn.b_2", theirs + "mlp.c_proj")]
        return rules + norm_rules("decoder.norm", "ln_f")

    def dropped(self, architecture: str) -> dict[str, str]:
        return {"lm_head.weight": "the output projection, tied to the token embedding",
                **{f"h.*.attn.{b}": "the causal-mask buffer of older checkpoints" for b in ("bias", "masked_bias")}}

    def config(self, spec) -> dict:
        vocab, (attention, ffn) = spec.vocab, repeated_layer(spec, "decoder")
        return {"architectures": [self.export_architecture], "model_type": "gpt2", "vocab_size": vocab.size,
                "n_positions": spec.positional.max_len, "n_embd": spec.d_model, "n_layer": spec.decoder.num_layers,
                "n_head": attention.heads, "n_inner": ffn.d_ff, "activation_function": ACTIVATION_NAMES[ffn.activation],
                "resid_pdrop": spec.dropout, "embd_pdrop": spec.dropout, "attn_pdrop": spec.attention_dropout,
                "layer_norm_epsilon": spec.norm_eps, "bos_token_id": vocab.bos_id, "eos_token_id": vocab.eos_id,
                "pad_token_id": None if vocab.pad_id == vocab.eos_id else vocab.pad_id, "tie_word_embeddings": True}


def _conv1d(weight: str, bias: str, theirs: str) -> list[Rule]:
    return [Rule(weight, (f"{theirs}.weight",), Transpose()), Rule(bias, (f"{theirs}.bias",))]
