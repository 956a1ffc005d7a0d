"""Gemma (``model_type: gemma``): transformers' GemmaForCausalLM and GemmaModel as tfspec specs
(google/gemma-2b, gemma-7b, gemma-1.1-2b-it, codegemma-7b).

Llama (``llama.py``) with four differences: 256-wide heads (``head_dim``; gemma-7b's 16 heads
are 4096 wide under a 3072-wide model) and one key/value head in gemma-2b; a gated tanh GELU
(``hidden_act: gelu`` in the published configs means the tanh form: transformers rewrites it);
token embeddings multiplied by sqrt(hidden_size) (``embed_scale``); the output tied to the
embedding; and RMSNorms computing x * (1 + w), whose stored w is the gain minus one
(``layouts.PlusOne`` adds the 1 on import and takes it off on export). Refused by name:
``use_bidirectional_attention`` (EmbeddingGemma's encoder), and an ``hidden_activation`` that
names another function than ``hidden_act`` (transformers 4 computed that field, transformers 5
computes ``hidden_act``). Gemma 2 and 3 are other model types (logit soft-capping, norms
after each sublayer, alternating local and global layers): not imported. Defaults are
GemmaConfig's (gemma-7b's shape).
"""

from __future__ import annotations

from dataclasses import replace

from tfspec.errors import TfspecError
from tfspec.interop.hf.family import ACTIVATIONS, Rule, Source, _show, activation, register, repeated_layer
from tfspec.interop.hf.layouts import PlusOne
from tfspec.interop.hf.llama import Llama


@register
class Gemma(Llama):
    model_type = "gemma"
    title = "Gemma"
    architectures = {"GemmaForCausalLM": "model.", "GemmaModel": ""}
    export_architecture = "GemmaForCausalLM"
    mapped = tuple(f for f in Llama.mapped if f != "mlp_bias") + ("hidden_activation",)
    required = {"use_bidirectional_attention": (None, False)}
    ignored = {}
    defaults = {"vocab_size": 256000, "hidden_size": 3072, "intermediate_size": 24576, "num_hidden_layers": 28,
                "num_attention_heads": 16, "num_key_value_heads": 16, "head_dim": 256,
                "hidden_act": "gelu_pytorch_tanh", "max_position_embeddings": 8192, "tie_word_embeddings": True,
                "pad_token_id": 0, "eos_token_id": 1, "bos_token_id": 2}
    """GemmaConfig's values where Llama's differ (those ``Llama.spec_data`` falls back on)."""

    def spec_data(self, source: Source) -> dict:
        c, where = self.defaults | source.config, source.where
        return super().spec_data(replace(source, config=c)) | {
            "activation": self._activation(c, where), "embed_scale": True}

    def rules(self, spec, architecture: str) -> list[Rule]:
        return [replace(r, layout=PlusOne()) if r.ir.endswith("norm.weight") else r
                for r in super().rules(spec, architecture)]

    def config(self, spec) -> dict:
        """Llama's fields this family has (Gemma has no ``mlp_bias``: its MLP is never biased),
        the tanh GELU under the name Gemma's configs give it."""
        shared = {k: v for k, v in super().config(spec).items() if k in self.mapped + ("architectures", "model_type")}
        tanh = repeated_layer(spec, "decoder")[1].activation == "gelu_tanh"
        return shared | ({"hidden_act": "gelu_pytorch_tanh"} if tanh else {})

    def _activation(self, c: dict, where: str) -> str:
        """``hidden_act`` as transformers 5 reads it for Gemma ("gelu" is the tanh form), with an
        ``hidden_activation`` (what transformers 4 read instead) only when it names the same function."""
        act = "gelu_tanh" if c.get("hidden_act") == "gelu" else activation(c, "hidden_act", where, "gelu_pytorch_tanh")
        other = c.get("hidden_activation")
        if other is not None and ACTIVATIONS.get(other) != act:
            raise TfspecError(f"{where}: hidden_activation: {_show(other)} is not supported; tfspec imports Gemma "
                              f"with hidden_activation null or the function hidden_act names ({act})")
        return act
