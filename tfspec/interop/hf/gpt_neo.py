"""GPT-Neo (``model_type: gpt_neo``): transformers' GPTNeoForCausalLM and GPTNeoModel as tfspec
specs (EleutherAI/gpt-neo-125m, -1.3B, -2.7B).

GPT-2's model (``gpt2.py``: pre-norm LayerNorms, a final one, learned positions, the output tied
to the token embedding, <|endoftext|> for bos, eos and padding) with three differences: layers
alternate global and local attention as ``attention_types`` says (``[[["global", "local"], 12]]``:
12 pairs), the local ones seeing the last ``window_size`` tokens (tfspec's causal restricted
attention, r = window_size - 1), so the stack is groups of layers; attention scores are not
scaled by 1/sqrt(head_dim) (``scale: 1.0``); q, k and v have no bias, the output projection and
the MLP do. Its layers are ``nn.Linear``, stored as tfspec's. Defaults are GPTNeoConfig's.

``export --format hf`` writes stacks whose layers all attend alike (all global or all local);
a mixed stack is refused by ``export``, whose families repeat one layer.
"""

from __future__ import annotations

from tfspec.errors import TfspecError
from tfspec.interop.hf.family import Rule, Source, _show, activation, norm_rules, number, register
from tfspec.interop.hf.gpt2 import GPT2
from tfspec.interop.hf.marian import _attention

NAMES = {"n_positions": "max_position_embeddings", "n_embd": "hidden_size", "n_layer": "num_layers",
         "n_head": "num_heads", "n_inner": "intermediate_size", "resid_pdrop": "resid_dropout",
         "embd_pdrop": "embed_dropout", "attn_pdrop": "attention_dropout"}
"""GPT-2's config field -> GPT-Neo's name for the same setting."""


@register
class GPTNeo(GPT2):
    model_type = "gpt_neo"
    title = "GPT-Neo"
    architectures = {"GPTNeoForCausalLM": "transformer.", "GPTNeoModel": ""}
    export_architecture = "GPTNeoForCausalLM"
    mapped = ("vocab_size", "max_position_embeddings", "hidden_size", "num_layers", "num_heads",
              "intermediate_size", "attention_types", "window_size", "activation_function", "resid_dropout",
              "attention_dropout", "layer_norm_epsilon", "bos_token_id", "eos_token_id", "pad_token_id")
    required = {"tie_word_embeddings": (True,)}
    ignored = {"embed_dropout": "training only; tfspec's one dropout (resid_dropout) covers the embeddings too",
               "attention_layers": "attention_types expanded to one entry a layer; transformers recomputes it"}

    def spec_data(self, source: Source) -> dict:
        c, where = source.config, source.where
        d_model = number(c, "hidden_size", where, default=2048)
        inner = c.get("intermediate_size")
        return {"family": self.family, "vocab": self._vocab(c, where), "d_model": d_model,
                "heads": number(c, "num_heads", where, default=16),
                "d_ff": 4 * d_model if inner is None else number(c, "intermediate_size", where),
                "activation": activation(c, "activation_function", where, "gelu_new"),
                "dropout": number(c, "resid_dropout", where, float, 0.0),
                "attention_dropout": number(c, "attention_dropout", where, float, 0.0), "label_smoothing": 0.0,
                "positional": {"kind": "learned", "max_len": number(c, "max_position_embeddings", where,
                                                                    default=2048)},
                "norm": "pre", "norm_eps": number(c, "layer_norm_epsilon", where, float, 1e-5), "final_norm": True,
                "tie_embeddings": "output", "embed_scale": False, "bias": True,
                "biases": {"q": False, "k": False, "v": False, "o": True, "ffn": True},
                "decoder": {"groups": _groups(c, where)}}

    def rules(self, spec, architecture: str) -> list[Rule]:
        rules = [Rule("decoder.embed.weight", ("wte.weight",)), Rule("decoder.pos.weight", ("wpe.weight",))]
        for i in range(spec.decoder.num_layers):
            ours, theirs = f"decoder.layers.{i}.", f"h.{i}."
            rules += [*norm_rules(ours + "self_attn_norm", theirs + "ln_1"),
                      *[r for r in _attention(ours + "self_attn", theirs + "attn.attention", "qkv")
                        if not r.ir.endswith("b_qkv")],
                      *norm_rules(ours + "ffn_norm", theirs + "ln_2")]
            rules += [Rule(f"{ours}ffn.{k}_{n}", (f"{theirs}mlp.{part}.{kind}",))
                      for n, part in (("1", "c_fc"), ("2", "c_proj")) for k, kind in (("w", "weight"), ("b", "bias"))]
        return rules + norm_rules("decoder.norm", "ln_f")

    def dropped(self, architecture: str) -> dict[str, str]:
        return {"lm_head.weight": "the output projection, tied to the token embedding",
                **{f"h.*.attn.attention.{b}": "the causal-mask buffer of older checkpoints"
                   for b in ("bias", "masked_bias")}}

    def config(self, spec) -> dict:
        """GPT-2's configuration under GPT-Neo's names; the stack repeats one layer (``export`` checks)."""
        attention = spec.plan("decoder")[0].attention
        local = attention.kind == "restricted_self_attention"
        config = {NAMES.get(k, k): v for k, v in super().config(spec).items()}
        return config | {"model_type": self.model_type, "architectures": [self.export_architecture],
                         "attention_types": [[["local" if local else "global"], spec.decoder.num_layers]],
                         "window_size": attention.r + 1 if local else 256}


def _groups(c: dict, where: str) -> list[dict]:
    """``attention_types`` ([[kinds, repeats], ..]) as groups of consecutive layers that attend alike."""
    types = c.get("attention_types", [[["global", "local"], 12]])
    try:
        kinds = [kind for listed, repeats in types for _ in range(repeats) for kind in listed]
    except (TypeError, ValueError):
        kinds = None
    if not kinds or any(k not in ("global", "local") for k in kinds):
        raise TfspecError(f"{where}: attention_types: {_show(types)} is not supported; tfspec reads a list of "
                          "[[\"global\" or \"local\", ..], repeats] pairs")
    layers = number(c, "num_layers", where, default=24)
    if len(kinds) != layers:
        raise TfspecError(f"{where}: attention_types gives {len(kinds)} layers; num_layers is {layers}")
    window = number(c, "window_size", where, default=256)
    attention = {"global": {"kind": "causal_self_attention", "scale": 1.0},
                 "local": {"kind": "restricted_self_attention", "r": window - 1, "causal": True, "scale": 1.0}}
    groups: list[dict] = []
    for kind in kinds:
        if groups and groups[-1]["kind"] == kind:
            groups[-1]["layers"] += 1
        else:
            groups.append({"kind": kind, "layers": 1})
    return [{"layers": g["layers"], "block": [attention[g["kind"]], "ffn"]} for g in groups]
