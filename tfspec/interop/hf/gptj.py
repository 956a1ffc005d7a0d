"""GPT-J (``model_type: gptj``): transformers' GPTJForCausalLM and GPTJModel as tfspec specs
(EleutherAI/gpt-j-6b, and the models fine-tuned from it: GPT4All-J, Dolly v1).

GPT-2's configuration fields (``gpt2.py``) with these differences in the model: attention and MLP
read one LayerNorm of the layer's input and are added to it in parallel (``residual:
parallel_shared_norm``); no learned positions: rotary positions (base 10,000) on the first
``rotary_dim`` features of each head (``positional.fraction``), rotating interleaved pairs (x_0,
x_1), (x_2, x_3), ... (GPT-J's rotate_every_two; ``cohere.InterleavedRotary`` permutes the query
and key rows to tfspec's rotate-half); the layers are ``nn.Linear`` with no bias on q, k, v and
the output projection, biases on the MLP; the output projection is the model's own, biased
(``output_bias``; GPTJModel has none, so its spec ties one to the embedding without a bias).
``rotary_dim`` null (a rotation as wide as the model, which transformers computes only with one
head) is refused, and so are ``rotary: false`` and ``scale_attn_weights: false`` (gpt-j-6b's
config.json writes both true; transformers never reads them and computes what true says).
Defaults are GPTJConfig's (gpt-j-6b's shape).
"""

from __future__ import annotations

import math
from dataclasses import replace

from tfspec.errors import TfspecError
from tfspec.interop.hf.cohere import interleaved
from tfspec.interop.hf.family import Rule, Source, _show, flag, norm_rules, number, register, repeated_layer
from tfspec.interop.hf.gpt2 import GPT2
from tfspec.interop.hf.layouts import Concat
from tfspec.interop.hf.phi import _linear
from tfspec.positions import rotary


@register
class GPTJ(GPT2):
    model_type = "gptj"
    title = "GPT-J"
    architectures = {"GPTJForCausalLM": "transformer.", "GPTJModel": ""}
    export_architecture = "GPTJForCausalLM"
    heads = ("lm_head.",)
    mapped = GPT2.mapped + ("rotary_dim", "tie_word_embeddings")
    required = {"rotary": (True,), "scale_attn_weights": (True,)}
    """Fields of the published configurations (gpt-j-6b's, CodeGen's) left from GPT-2's and the
    original Mesh Transformer JAX code, which transformers' class never reads: it always rotates
    and scales scores by 1/sqrt(head_dim). Accepted at the values that say so only."""
    ignored = {"embd_pdrop": GPT2.ignored["embd_pdrop"]}
    defaults = {"vocab_size": 50400, "n_positions": 2048, "n_embd": 4096, "n_layer": 28, "n_head": 16,
                "resid_pdrop": 0.0, "attn_pdrop": 0.0}
    """GPTJConfig's values where GPT-2's differ (those ``GPT2.spec_data`` falls back on)."""

    def spec_data(self, source: Source) -> dict:
        c, where = self.defaults | source.config, source.where
        data = super().spec_data(replace(source, config=c))
        causal = source.architecture.endswith("ForCausalLM")
        return data | {"positional": self._rotary(c, where, data["d_model"] // data["heads"]),
                       "residual": "parallel_shared_norm", "bias": True,
                       "biases": {"q": False, "k": False, "v": False, "o": False, "ffn": True},
                       "output_bias": causal,
                       "tie_embeddings": "output" if flag(c, "tie_word_embeddings", where, False) or not causal
                       else "none"}

    def _rotary(self, c: dict, where: str, head_dim: int) -> dict:
        """Rotary positions on the first ``rotary_dim`` of ``head_dim`` features: the smallest
        fraction f with int(head_dim * f) = rotary_dim (rotary_dim / head_dim may round below)."""
        rotary = number(c, "rotary_dim", where, default=64)
        if not 0 < rotary <= head_dim or rotary % 2:
            raise TfspecError(f"{where}: rotary_dim: {_show(rotary)} is not supported; tfspec rotates an even "
                              f"number of features, at most each head's {head_dim}")
        fraction = rotary / head_dim
        if int(head_dim * fraction) < rotary:
            fraction = math.nextafter(fraction, 1.0)
        return {"kind": "rotary", "max_len": number(c, "n_positions", where), "base": 10000.0, "fraction": fraction}

    def rules(self, spec, architecture: str) -> list[Rule]:
        rules = [Rule("decoder.embed.weight", ("wte.weight",)), *norm_rules("decoder.norm", "ln_f")]
        if architecture.endswith("ForCausalLM"):
            rules.append(Rule("output.bias", ("lm_head.bias",)))
            if spec.tie_embeddings == "none":
                rules.append(Rule("output.weight", ("lm_head.weight",)))
        for layer in spec.plan("decoder"):
            (attn, ffn), theirs, a = layer.names, f"h.{layer.index}.", layer.attention
            rules += [*norm_rules(f"{attn}_norm", f"{theirs}ln_1"),
                      Rule(f"{attn}.w_qkv", tuple(f"{theirs}attn.{p}_proj.weight" for p in "qkv"),
                           Concat((a.heads * a.d_k, a.kv_heads * a.d_k, a.kv_heads * a.d_v))),
                      Rule(f"{attn}.w_o", (f"{theirs}attn.out_proj.weight",)),
                      *_linear(f"{ffn}.", "1", f"{theirs}mlp.fc_in"), *_linear(f"{ffn}.", "2", f"{theirs}mlp.fc_out")]
        return interleaved(rules, spec)

    def dropped(self, architecture: str) -> dict[str, str]:
        causal = architecture.endswith("ForCausalLM")
        head = "the output projection, tied to the token embedding" if causal else f"{architecture} has no output"
        return {"lm_head.weight": head, **({} if causal else {"lm_head.bias": head}),
                **{f"h.*.attn.{b}": "the causal-mask buffer of older checkpoints" for b in ("bias", "masked_bias")}}

    def config(self, spec) -> dict:
        """GPT-2's fields this family shares, and its own."""
        attention = repeated_layer(spec, "decoder")[0]
        shared = {k: v for k, v in super().config(spec).items() if k in self.mapped + ("architectures",)}
        return shared | {"model_type": self.model_type, "n_positions": attention.positions.max_len,
                         "rotary_dim": rotary.rotated(attention.positions, attention.d_k),
                         "tie_word_embeddings": spec.tie_embeddings == "output"}
