"""BLOOM (``model_type: bloom``): transformers' BloomForCausalLM and BloomModel as tfspec specs
(bigscience/bloom-560m .. bloom-7b1, bloom, bloomz, mt0's decoder-only siblings).

Megatron-LM's GPT-2 as BigScience trained it: pre-norm LayerNorms with a final one, biases on
every projection, a 4 x hidden_size tanh-GELU MLP, the output tied to the token embedding, and
two differences: no position embeddings but ALiBi (Press et al. 2022: each head's logits lowered
by its slope times the distance, ``positional.kind: alibi``), and a LayerNorm on the token
embeddings (``word_embeddings_layernorm``: ``embed_norm``). transformers adds slope * j, the
key's position among the real tokens; under a causal mask that is -slope * (i - j) plus a
constant per query row, which softmax removes, so left- or right-padded batches compute what
tfspec does at the real tokens. ``query_key_value`` holds each head's query, key and value rows
together ((h, 3, d) rows), reordered to tfspec's ``w_qkv`` (``layouts.PerHead``).

ALiBi has no longest sequence; ``positional.max_len`` is the 2048 tokens BLOOM was trained on
(decoding stops there). Older files name the sizes ``n_embed`` and ``num_attention_heads``
(bigscience/bloom); transformers reads both spellings. Refused by name:
``apply_residual_connection_post_layernorm: true`` (the residual taken after the norm) and an
untied output. Defaults are BloomConfig's (a 2-layer, 64-wide test shape).
"""

from __future__ import annotations

from tfspec.errors import TfspecError
from tfspec.interop.hf.family import Family, Rule, Source, norm_rules, number, register, repeated_layer
from tfspec.interop.hf.layouts import PerHead

TRAINED_LENGTH = 2048
"""BLOOM's training sequence length (BigScience, 2022, §3.3): tfspec's max_len for its ALiBi."""
ALIASES = {"hidden_size": ("hidden_size", "n_embed"), "n_layer": ("n_layer", "num_hidden_layers"),
           "n_head": ("n_head", "num_attention_heads")}
"""BloomConfig's field -> every spelling transformers reads for it (older files: n_embed, ...)."""
MEGATRON = "a Megatron-DeepSpeed training setting left in the published configs; transformers' BLOOM never reads it"


@register
class Bloom(Family):
    model_type = "bloom"
    family = "decoder-only"
    title = "BLOOM"
    architectures = {"BloomForCausalLM": "transformer.", "BloomModel": ""}
    export_architecture = "BloomForCausalLM"
    heads = ("lm_head.",)
    mapped = (*sum(ALIASES.values(), ()), "vocab_size", "layer_norm_epsilon", "hidden_dropout", "attention_dropout",
              "bos_token_id", "eos_token_id", "pad_token_id", "unk_token_id")
    required = {"apply_residual_connection_post_layernorm": (False,), "tie_word_embeddings": (True,)}
    ignored = {**dict.fromkeys(("pretraining_tp", "slow_but_exact"), "splits the matrix products into slices "
                                                                     "whose results are added: the same sums"),
               "n_inner": "transformers' BLOOM's MLP is 4 x hidden_size whatever this says (null in every "
                          "published config)",
               **dict.fromkeys(("seq_length", "offset_alibi", "attention_softmax_in_fp32", "bias_dropout_fusion",
                                "masked_softmax_fusion", "skip_bias_add", "skip_bias_add_qkv", "pretraining_pp"),
                               MEGATRON)}

    def spec_data(self, source: Source) -> dict:
        c, where = source.config, source.where
        d_model = _aliased(c, "hidden_size", where, 64)
        return {"family": self.family, "vocab": _vocab(c, where), "d_model": d_model,
                "heads": _aliased(c, "n_head", where, 8), "d_ff": 4 * d_model, "activation": "gelu_tanh",
                "dropout": number(c, "hidden_dropout", where, float, 0.0),
                "attention_dropout": number(c, "attention_dropout", where, float, 0.0), "label_smoothing": 0.0,
                "positional": {"kind": "alibi", "max_len": TRAINED_LENGTH}, "norm": "pre", "norm_type": "layer",
                "norm_eps": number(c, "layer_norm_epsilon", where, float, 1e-5), "final_norm": True,
                "embed_norm": True, "embed_scale": False, "bias": True, "tie_embeddings": "output",
                "decoder": {"layers": _aliased(c, "n_layer", where, 2), "block": ["causal_self_attention", "ffn"]}}

    def rules(self, spec, architecture: str) -> list[Rule]:
        rules = [Rule("decoder.embed.weight", ("word_embeddings.weight",)),
                 *norm_rules("decoder.embed_norm", "word_embeddings_layernorm")]
        for layer in spec.plan("decoder"):
            attn, ffn = layer.names
            theirs, heads = f"h.{layer.index}.", layer.attention.heads
            rules += [*norm_rules(f"{attn}_norm", theirs + "input_layernorm"),
                      *[Rule(f"{attn}.{n}_qkv", (f"{theirs}self_attention.query_key_value.{kind}",), PerHead(heads))
                        for n, kind in (("w", "weight"), ("b", "bias"))],
                      *_linear(f"{attn}.w_o", f"{attn}.b_o", theirs + "self_attention.dense"),
                      *norm_rules(f"{ffn}_norm", theirs + "post_attention_layernorm"),
                      *_linear(f"{ffn}.w_1", f"{ffn}.b_1", theirs + "mlp.dense_h_to_4h"),
                      *_linear(f"{ffn}.w_2", f"{ffn}.b_2", theirs + "mlp.dense_4h_to_h")]
        return rules + norm_rules("decoder.norm", "ln_f")

    def dropped(self, architecture: str) -> dict[str, str]:
        return {"lm_head.weight": "the output projection, tied to the token embedding"}

    def structure(self, spec) -> str | None:
        if reason := super().structure(spec):
            return reason
        alibi = spec.positional.kind == "alibi"
        return None if alibi else f"{self.title}'s positions are ALiBi (positional.kind: alibi)"

    def config(self, spec) -> dict:
        v, (attention, _) = spec.vocab, repeated_layer(spec, "decoder")
        return {"architectures": [self.export_architecture], "model_type": self.model_type, "vocab_size": v.size,
                "hidden_size": spec.d_model, "n_layer": spec.decoder.num_layers, "n_head": attention.heads,
                "layer_norm_epsilon": spec.norm_eps, "hidden_dropout": spec.dropout,
                "attention_dropout": spec.attention_dropout, "bos_token_id": v.bos_id, "eos_token_id": v.eos_id,
                "pad_token_id": v.pad_id, "unk_token_id": v.unk_id, "apply_residual_connection_post_layernorm": False,
                "tie_word_embeddings": True}


def _aliased(c: dict, key: str, where: str, default: int) -> int:
    """BloomConfig's ``key`` under whichever of its spellings the configuration uses."""
    given = {name: number(c, name, where) for name in ALIASES[key] if c.get(name) is not None}
    if len(set(given.values())) > 1:
        (first, one), (second, other) = list(given.items())[:2]
        raise TfspecError(f"{where}: {first} ({one}) and {second} ({other}) name one setting and disagree; keep one")
    return next(iter(given.values()), default)


def _vocab(c: dict, where: str) -> dict:
    """BLOOM's tokenizer's ids: <unk> 0, <s> 1, </s> 2, <pad> 3 (what the published configs say;
    BloomConfig leaves pad_token_id and unk_token_id unset)."""
    ids = {"bos_id": ("bos_token_id", 1), "eos_id": ("eos_token_id", 2), "pad_id": ("pad_token_id", 3),
           "unk_id": ("unk_token_id", 0)}
    return {"size": number(c, "vocab_size", where, default=250880),
            **{ours: number(c, key, where) if c.get(key) is not None else default
               for ours, (key, default) in ids.items()}}


def _linear(weight: str, bias: str, theirs: str) -> list[Rule]:
    return [Rule(weight, (f"{theirs}.weight",)), Rule(bias, (f"{theirs}.bias",))]
