"""StarCoder2 (``model_type: starcoder2``): transformers' Starcoder2ForCausalLM and
Starcoder2Model as tfspec specs (bigcode/starcoder2-3b, -7b, -15b).

Mistral (``llama.py``: grouped-query attention, rotary positions, the sliding window as causal
restricted attention) with GPT-2's layers: LayerNorms with a shift (``norm_epsilon``), a plain
two-matrix MLP (``c_fc``, ``c_proj``: not gated, tanh GELU by default) and, when ``use_bias``,
biases on every projection; the output is tied to the embedding by default. Its
``residual_dropout`` is tfspec's ``dropout``. Defaults are Starcoder2Config's, whose
``bos_token_id``/``eos_token_id`` (50256, GPT-2's) lie outside its own 49152-token vocabulary:
no token can carry them, so transformers' ``generate`` never meets them. Such ids are read from
the tokenizer instead: its <|endoftext|> (id 0 in bigcode's StarCoder2 tokenizer, which every
published configuration names), or 0 when no tokenizer comes with the configuration.
"""

from __future__ import annotations

from dataclasses import replace

from tfspec.interop.hf.family import Rule, Source, flag, number, register
from tfspec.interop.hf.llama import Mistral
from tfspec.interop.hf.stablelm import with_shifts


@register
class Starcoder2(Mistral):
    model_type = "starcoder2"
    title = "StarCoder2"
    architectures = {"Starcoder2ForCausalLM": "model.", "Starcoder2Model": ""}
    export_architecture = "Starcoder2ForCausalLM"
    mapped = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
              "num_key_value_heads", "head_dim", "hidden_act", "max_position_embeddings", "norm_epsilon",
              "rope_parameters", "rope_theta", "rope_scaling", "sliding_window", "use_bias", "tie_word_embeddings",
              "bos_token_id", "eos_token_id", "pad_token_id", "attention_dropout", "residual_dropout")
    ignored = {"embedding_dropout": "training only; tfspec's one dropout (residual_dropout) covers the embeddings too",
               **dict.fromkeys(("mlp_type", "norm_type"), "left over from bigcode's training code (the published "
                                                          "configs); transformers reads neither: its StarCoder2 has "
                                                          "a plain MLP and LayerNorms")}
    defaults = {"vocab_size": 49152, "hidden_size": 3072, "intermediate_size": 12288, "num_hidden_layers": 30,
                "num_attention_heads": 24, "num_key_value_heads": 2, "hidden_act": "gelu_pytorch_tanh",
                "max_position_embeddings": 4096, "tie_word_embeddings": True, "bos_token_id": 50256,
                "eos_token_id": 50256}
    """Starcoder2Config's values where Llama's differ (those ``Llama.spec_data`` falls back on)."""

    def spec_data(self, source: Source) -> dict:
        c, where = self.defaults | source.config, source.where
        size, ending = number(c, "vocab_size", where), source.vocabulary.get("<|endoftext|>", 0)
        c |= {key: ending for key in ("bos_token_id", "eos_token_id") if isinstance(c[key], int) and c[key] >= size}
        return super().spec_data(replace(source, config=c)) | {
            "gated": False, "norm_type": "layer", "norm_eps": number(c, "norm_epsilon", where, float, 1e-5),
            "dropout": number(c, "residual_dropout", where, float, 0.0), "bias": flag(c, "use_bias", where, True),
            "biases": None}

    def rules(self, spec, architecture: str) -> list[Rule]:
        """Llama's attention and norms (with shifts); the MLP's two matrices in place of SwiGLU's three."""
        rules = [r for r in with_shifts(super().rules(spec, architecture)) if ".ffn." not in r.ir]
        for i in range(spec.decoder.num_layers):
            ours, theirs = f"decoder.layers.{i}.ffn.", f"layers.{i}.mlp."
            for n, part in (("1", "c_fc"), ("2", "c_proj")):
                rules.append(Rule(f"{ours}w_{n}", (f"{theirs}{part}.weight",)))
                if spec.has_bias("ffn"):
                    rules.append(Rule(f"{ours}b_{n}", (f"{theirs}{part}.bias",)))
        return rules

    def config(self, spec) -> dict:
        shared = {k: v for k, v in super().config(spec).items() if k in self.mapped + ("architectures", "model_type")}
        return shared | {"norm_epsilon": spec.norm_eps, "use_bias": spec.bias, "residual_dropout": spec.dropout,
                         "embedding_dropout": spec.dropout}
