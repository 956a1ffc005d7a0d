"""Nemotron (``model_type: nemotron``): transformers' NemotronForCausalLM and NemotronModel as
tfspec specs (nvidia/Minitron-4B-Base, Minitron-8B-Base, Nemotron-Mini-4B-Instruct, and the
Nemotron-3/Nemotron-4 checkpoints converted to transformers, thhaus/nemotron3-8b).

Llama (``llama.py``: pre-norm layers, grouped-query attention, ``attention_bias`` on q, k, v and
o, rotary positions in the rotate-half layout, scaled types included, an untied output head
unless said) with Nemotron-4's three changes:

- every norm is LayerNorm1P: a LayerNorm with a shift whose stored gain is one less than the
  gain it multiplies by, LN(x) * (1 + weight) + bias (``norm_eps``). tfspec's LayerNorm holds the
  gain itself, so the import adds 1 to each stored gain and the export takes it off again
  (``layouts.PlusOne``, as Gemma's RMSNorm);
- the MLP is not gated, ``down_proj(act(up_proj(x)))``, squared ReLU by default (``hidden_act:
  relu2``), biased when ``mlp_bias``;
- rotary positions turn only the first ``partial_rotary_factor`` of each head's features
  (``positional.fraction``; 0.5 unless said), read from the rotary settings, else from the
  top-level field (the published files), as transformers reads it.

Megatron's name for the head width, ``kv_channels`` (Minitron-4B's files), is checked against the
head width transformers reads (``head_dim``, else hidden_size / num_attention_heads). Defaults are
NemotronConfig's (Nemotron-4 15B's shape). NemotronConfig leaves ``num_key_value_heads`` unset,
and transformers' Nemotron cannot build a model without it (its attention divides the heads by
it), so a configuration that leaves it out is refused, after every other field is read.
"""

from __future__ import annotations

from dataclasses import replace

from tfspec.errors import TfspecError
from tfspec.interop.hf.arcee import ungated_mlp
from tfspec.interop.hf.family import Rule, Source, _show, number, register, repeated_layer
from tfspec.interop.hf.layouts import PlusOne
from tfspec.interop.hf.llama import Llama
from tfspec.interop.hf.stablelm import with_rotated_share, with_shifts

PARTIAL_ROTARY = 0.5
"""NemotronConfig's partial_rotary_factor when a configuration leaves it out."""


@register
class Nemotron(Llama):
    model_type = "nemotron"
    title = "Nemotron"
    architectures = {"NemotronForCausalLM": "model.", "NemotronModel": ""}
    export_architecture = "NemotronForCausalLM"
    export_rank = 1  # a spec rotating every feature, biased throughout, may be StarCoder2's
    mapped = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
              "num_key_value_heads", "head_dim", "kv_channels", "hidden_act", "max_position_embeddings", "norm_eps",
              "rope_parameters", "rope_theta", "rope_scaling", "partial_rotary_factor", "attention_bias", "mlp_bias",
              "tie_word_embeddings", "bos_token_id", "eos_token_id", "pad_token_id", "attention_dropout")
    ignored = {}
    partial_rotary = True
    defaults = {"vocab_size": 256000, "hidden_size": 6144, "intermediate_size": 24576, "num_attention_heads": 48,
                "hidden_act": "relu2", "max_position_embeddings": 4096, "bos_token_id": 2, "eos_token_id": 3}
    """NemotronConfig's values where Llama's fallbacks in ``Llama.spec_data`` differ."""

    def spec_data(self, source: Source) -> dict:
        c, where = self.defaults | source.config, source.where
        unset = c.get("num_key_value_heads") is None
        # a stand-in while the other fields are read, so that a bad one is named first; refused below
        stand_in = {"num_key_value_heads": number(c, "num_attention_heads", where)} if unset else {}
        data = super().spec_data(replace(source, config=c | stand_in)) | {
            "gated": False, "norm_type": "layer", "norm_eps": number(c, "norm_eps", where, float, 1e-5)}
        if "kv_channels" in c and number(c, "kv_channels", where) != data["d_k"]:
            raise TfspecError(f"{where}: kv_channels ({_show(c['kv_channels'])}) differs from the head width "
                              f"transformers' Nemotron reads ({data['d_k']}: head_dim, else hidden_size / "
                              "num_attention_heads); tfspec imports a configuration whose two readings agree")
        if unset:
            raise TfspecError(f"{where}: num_key_value_heads is not set; transformers' Nemotron cannot build a "
                              "model without it (its attention divides the heads by it), so tfspec imports a "
                              "configuration that sets it")
        return data

    def _rotary(self, c: dict, where: str) -> dict:
        return super()._rotary(with_rotated_share(c, PARTIAL_ROTARY, where), where)

    def rules(self, spec, architecture: str) -> list[Rule]:
        """Llama's attention, embedding and head; its norms with shifts, each stored gain one less
        than the spec's; the MLP's two matrices in place of SwiGLU's three."""
        rules = [replace(r, layout=PlusOne()) if r.ir.endswith("norm.weight") else r
                 for r in with_shifts(super().rules(spec, architecture)) if ".ffn." not in r.ir]
        return rules + ungated_mlp(spec)

    def config(self, spec) -> dict:
        """Llama's fields this family shares, and its own: the norms' epsilon, the rotated share
        (top-level, where transformers 4 and 5 both read it)."""
        shared = {k: v for k, v in super().config(spec).items() if k in self.mapped + ("architectures", "model_type")}
        return shared | {"norm_eps": spec.norm_eps,
                         "partial_rotary_factor": repeated_layer(spec, "decoder")[0].positions.fraction}
