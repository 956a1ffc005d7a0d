"""MPT (``model_type: mpt``): transformers' MptForCausalLM and MptModel as tfspec specs
(mosaicml/mpt-7b, mpt-7b-instruct, mpt-7b-chat, mpt-7b-storywriter, mpt-30b, mpt-30b-instruct,
mpt-30b-chat).

MosaicML's decoder as transformers computes it: pre-norm LayerNorms without a shift
(``norm_bias: false``) and a final one, no bias on any projection, an exact-GELU MLP 4 x d_model
wide, the output tied to the token embedding (untied when ``tie_word_embeddings`` is false), and
no position embeddings but ALiBi (``positional.kind: alibi``): transformers adds slope * (j - n + 1)
for key j of n, which under the causal mask is -slope * (i - j) plus a constant per query row
that softmax removes, so right-padded batches compute what tfspec does at the real tokens. Its
slopes, 1 / 2^(8 k / n') for the power of two n' >= heads, every second one (those of n' / 2
heads) first where heads is no power of two, are Press et al.'s that ``alibi_slopes`` gives.
``Wqkv`` holds all queries, then all keys, then all values: tfspec's ``w_qkv`` as it is.
``max_seq_len`` is ``positional.max_len`` (transformers' ALiBi table has that many columns, so no
longer input runs).

The attention's settings come nested in ``attn_config`` (MptAttentionConfig), each field checked
by name as a configuration of its own: ``clip_qkv`` clamps the fused q, k, v to [-c, c] (the
attention's ``clip``), ``softmax_scale`` replaces 1 / sqrt(head_dim) (its ``scale``), ``attn_pdrop``
is the dropout. Refused by name, as transformers' MPT reads the field not at all and would compute
a model trained with it otherwise than it was trained (the checkpoint's extra tensors left out):
``attn_config.alibi: false`` (learned or rotary positions in llm-foundry), ``alibi_bias_max`` other
than 8, ``qk_ln``, ``prefix_lm``, ``attn_type: multiquery_attention``, ``expansion_ratio`` other than 4,
``no_bias: false``, ``logit_scale``, a ``norm_type`` other than LayerNorm, and any ``ffn_config`` but
the plain MLP. Defaults are MptConfig's (a 24-layer, 2048-wide shape).
"""

from __future__ import annotations

from tfspec.errors import TfspecError
from tfspec.interop.hf.bloom import Bloom
from tfspec.interop.hf.family import Family, Rule, Source, _show, check_config, flag, number, register, repeated_layer
from tfspec.interop.hf.llama import _vocab

ATTN_CONFIG = "attn_config"
MLP = {"ffn_type": "mptmlp"}
"""llm-foundry's ffn_config of the plain MLP transformers' MPT computes (up_proj, GELU, down_proj)."""
LLM_FOUNDRY = "a setting of llm-foundry's own training code that transformers' MPT never reads"


class MptAttention(Family):
    """``attn_config``'s fields (MptAttentionConfig), checked by ``check_config`` as a file of their
    own; not registered: it is part of the ``mpt`` family's configuration."""

    model_type = "mpt"
    title = "MPT"
    mapped = ("attn_pdrop", "clip_qkv", "softmax_scale")
    required = {"alibi": (True,), "alibi_bias_max": (8,), "attn_type": ("multihead_attention",),
                "qk_ln": (False,), "prefix_lm": (False,)}
    ignored = {"attn_impl": "which kernel computes the attention (torch, flash, triton): the same values",
               "attn_uses_sequence_id": "restricts attention to each packed sequence's own tokens when training "
                                        "passes llm-foundry's sequence_id; transformers' MPT never reads it"}


@register
class Mpt(Bloom):
    model_type = "mpt"
    title = "MPT"
    architectures = {"MptForCausalLM": "transformer.", "MptModel": ""}
    export_architecture = "MptForCausalLM"
    heads = ("lm_head.",)
    mapped = ("vocab_size", "d_model", "n_heads", "n_layers", "max_seq_len", "layer_norm_epsilon", ATTN_CONFIG,
              "tie_word_embeddings", "bos_token_id", "eos_token_id", "pad_token_id")
    required = {"expansion_ratio": (4,), "no_bias": (True,), "logit_scale": (None,),
                "norm_type": ("low_precision_layernorm", "layernorm"), "ffn_config": (MLP, MLP | {"fc_type": "torch"}),
                "fc_type": ("torch",)}
    ignored = {"learned_pos_emb": "llm-foundry's switch for a learned position table (wpe); transformers' MPT has "
                                  "none whatever it says (true in mpt-7b's config, whose checkpoint holds no such "
                                  "table: one that does is refused for its wpe tensor)",
               **dict.fromkeys(("resid_pdrop", "emb_pdrop"), "dropouts transformers' MPT never applies (it drops "
                                                            "with attn_config.attn_pdrop): training only"),
               "embedding_fraction": "scales the embeddings' gradient (x f + x.detach() (1 - f)), not their values: "
                                     "training only",
               "init_device": "where llm-foundry builds the weights before loading them",
               "init_config": "initialisation of untrained weights",
               "verbose": LLM_FOUNDRY, "tokenizer_name": "the tokenizer's repository (EleutherAI/gpt-neox-20b)"}
    defaults = {"vocab_size": 50368}
    """MptConfig's vocab_size, where ``llama._vocab``'s fallback (32000) differs."""

    def _attn_config(self, config: dict, where: str) -> dict:
        """``attn_config``: an object (absent or null: MptAttentionConfig's defaults, as transformers reads it)."""
        attn = config.get(ATTN_CONFIG)
        if attn is None:
            return {}
        if not isinstance(attn, dict):
            raise TfspecError(f"{where}: {ATTN_CONFIG} must be an object (MPT's attention settings), got {_show(attn)}")
        return attn

    def check(self, config: dict, where: str) -> dict[str, str]:
        """The top level's fields, then attn_config's as MptAttentionConfig's."""
        inner = check_config(MptAttention(), self._attn_config(config, where), f"{where} ({ATTN_CONFIG})")
        return check_config(self, config, where) | {f"{ATTN_CONFIG}.{key}": why for key, why in inner.items()}

    def spec_data(self, source: Source) -> dict:
        c, where = self.defaults | source.config, source.where
        attn, inner = self._attn_config(c, where), f"{where} ({ATTN_CONFIG})"
        d_model, dropout = number(c, "d_model", where, default=2048), number(attn, "attn_pdrop", inner, float, 0.0)
        tied = flag(c, "tie_word_embeddings", where, True) or not source.architecture.endswith("ForCausalLM")
        return {"family": self.family, "vocab": _vocab(c, where), "d_model": d_model,
                "heads": number(c, "n_heads", where, default=16), "d_ff": 4 * d_model, "activation": "gelu",
                "gated": False, "dropout": dropout, "attention_dropout": dropout, "label_smoothing": 0.0,
                "positional": {"kind": "alibi", "max_len": number(c, "max_seq_len", where, default=2048)},
                "norm": "pre", "norm_type": "layer", "norm_bias": False,
                "norm_eps": number(c, "layer_norm_epsilon", where, float, 1e-5), "final_norm": True,
                "embed_norm": False, "embed_scale": False, "bias": False,
                "tie_embeddings": "output" if tied else "none",
                "decoder": {"layers": number(c, "n_layers", where, default=24),
                            "block": [self._attention(attn, inner), "ffn"]}}

    def _attention(self, attn: dict, where: str):
        """Causal attention, its q, k, v clamped by clip_qkv and its scores scaled by softmax_scale
        where these are set; a clip_qkv of 0 (which transformers takes as no clamp) or below, or a
        scale of 0 or below, is refused rather than guessed at."""
        layer = {}
        for key, field, what in (("clip_qkv", "clip", "the clamp's bound"), ("softmax_scale", "scale", "a factor")):
            if attn.get(key) is not None:
                layer[field] = number(attn, key, where, float)
                if layer[field] <= 0:
                    raise TfspecError(f"{where}: {key} must be positive ({what}) or null, got {_show(attn[key])}")
        return {"kind": "causal_self_attention", **layer} if layer else "causal_self_attention"

    def rules(self, spec, architecture: str) -> list[Rule]:
        rules = [Rule("decoder.embed.weight", ("wte.weight",)), Rule("decoder.norm.weight", ("norm_f.weight",))]
        if spec.tie_embeddings == "none" and architecture.endswith("ForCausalLM"):
            rules.append(Rule("output.weight", ("lm_head.weight",)))
        for layer in spec.plan("decoder"):
            (attn, ffn), theirs = layer.names, f"blocks.{layer.index}."
            rules += [Rule(f"{attn}_norm.weight", (f"{theirs}norm_1.weight",)),
                      Rule(f"{attn}.w_qkv", (f"{theirs}attn.Wqkv.weight",)),
                      Rule(f"{attn}.w_o", (f"{theirs}attn.out_proj.weight",)),
                      Rule(f"{ffn}_norm.weight", (f"{theirs}norm_2.weight",)),
                      Rule(f"{ffn}.w_1", (f"{theirs}ffn.up_proj.weight",)),
                      Rule(f"{ffn}.w_2", (f"{theirs}ffn.down_proj.weight",))]
        return rules

    def dropped(self, architecture: str) -> dict[str, str]:
        head = ("the output projection, tied to the token embedding" if architecture.endswith("ForCausalLM")
                else f"{architecture} has no output projection")
        return {"lm_head.weight": head}

    def config(self, spec) -> dict:
        v, (attention, _) = spec.vocab, repeated_layer(spec, "decoder")
        return {"architectures": [self.export_architecture], "model_type": self.model_type, "vocab_size": v.size,
                "d_model": spec.d_model, "n_heads": attention.heads, "n_layers": spec.decoder.num_layers,
                "expansion_ratio": 4, "max_seq_len": spec.positional.max_len, "layer_norm_epsilon": spec.norm_eps,
                "no_bias": True, "norm_type": "low_precision_layernorm", "logit_scale": None,
                "tie_word_embeddings": spec.tie_embeddings == "output", "bos_token_id": v.bos_id,
                "eos_token_id": v.eos_token_id, "pad_token_id": v.pad_id,
                ATTN_CONFIG: {"attn_type": "multihead_attention", "attn_pdrop": _pdrop(spec.attention_dropout),
                              "clip_qkv": attention.clip, "softmax_scale": attention.scale, "qk_ln": False,
                              "prefix_lm": False, "alibi": True, "alibi_bias_max": 8}}


def _pdrop(rate: float) -> float | int:
    """A dropout rate as MptAttentionConfig takes it: its attn_pdrop is typed int, so 0.0 is written 0."""
    return int(rate) if float(rate).is_integer() else rate
