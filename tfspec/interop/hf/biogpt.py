"""BioGPT (``model_type: biogpt``): transformers' BioGptForCausalLM and BioGptModel as tfspec
specs (microsoft/biogpt, BioGPT-Large).

OPT's model (``opt.py``: pre-norm LayerNorms, a final one, learned positions whose table starts
with two rows no position reads, biases everywhere, the output tied to the token embedding)
under its own names (no ``decoder.`` level; the final norm is ``layer_norm``, the output
``output_projection``), with exact GELU by default and the token embedding scaled by
sqrt(hidden_size) when ``scale_embedding`` (``embed_scale``). transformers' BioGPT builds its
LayerNorms with torch's eps (1e-5) and never reads ``layer_norm_eps`` (1e-12 in the published
configs). <s> (0) is bos, </s> (2) eos, <pad> (1) padding. Defaults are BioGptConfig's.
"""

from __future__ import annotations

from dataclasses import replace

from tfspec.interop.hf.family import (ACTIVATION_NAMES, Rule, Source, activation, end_ids, flag, number,
                                      register, repeated_layer)
from tfspec.interop.hf.opt import OPT, POSITION_OFFSET


@register
class BioGpt(OPT):
    model_type = "biogpt"
    title = "BioGPT"
    architectures = {"BioGptForCausalLM": "biogpt.", "BioGptModel": ""}
    export_architecture = "BioGptForCausalLM"
    heads = ("output_projection.",)
    mapped = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
              "hidden_act", "hidden_dropout_prob", "attention_probs_dropout_prob", "activation_dropout",
              "max_position_embeddings", "scale_embedding", "pad_token_id", "bos_token_id", "eos_token_id")
    required = {"tie_word_embeddings": (True,)}
    ignored = {"layerdrop": "training only (drops whole layers while training)",
               "layer_norm_eps": "transformers' BioGPT never reads it: its LayerNorms use torch's eps, 1e-5"}

    def spec_data(self, source: Source) -> dict:
        c, where = source.config, source.where
        return {"family": self.family, "vocab": self._vocab(source), "d_model": number(c, "hidden_size", where,
                                                                                       default=1024),
                "heads": number(c, "num_attention_heads", where, default=16),
                "d_ff": number(c, "intermediate_size", where, default=4096),
                "activation": activation(c, "hidden_act", where, "gelu"),
                "dropout": number(c, "hidden_dropout_prob", where, float, 0.1),
                "attention_dropout": number(c, "attention_probs_dropout_prob", where, float, 0.1),
                "activation_dropout": number(c, "activation_dropout", where, float, 0.0), "label_smoothing": 0.0,
                "positional": {"kind": "learned", "offset": POSITION_OFFSET,
                               "max_len": number(c, "max_position_embeddings", where, default=1024)},
                "norm": "pre", "norm_eps": 1e-5, "final_norm": True, "tie_embeddings": "output",
                "embed_scale": flag(c, "scale_embedding", where, True), "bias": True,
                "decoder": {"layers": number(c, "num_hidden_layers", where, default=24),
                            "block": ["causal_self_attention", "ffn"]}}

    def _vocab(self, source: Source) -> dict:
        c, where = source.config, source.where
        size, pad = number(c, "vocab_size", where, default=42384), number(c, "pad_token_id", where, default=1)
        unk = source.vocabulary.get("<unk>")
        return {"size": size, "pad_id": pad, "bos_id": number(c, "bos_token_id", where, default=0),
                **end_ids(c, where, 2), "unk_id": unk if isinstance(unk, int) and 0 <= unk < size else pad}

    def rules(self, spec, architecture: str) -> list[Rule]:
        """OPT's rules with BioGPT's names: no ``decoder.`` level, the final norm ``layer_norm``."""
        def name(hf: str) -> str:
            return hf.replace("decoder.final_layer_norm", "layer_norm").removeprefix("decoder.")
        return [replace(r, hf=tuple(name(n) for n in r.hf)) for r in super().rules(spec, architecture)]

    def dropped(self, architecture: str) -> dict[str, str]:
        return {"output_projection.weight": "the output projection, tied to the token embedding"}

    def structure(self, spec) -> str | None:
        """Without the embedding's scale, BioGPT computes OPT's model: export writes OPT for it."""
        if reason := super().structure(spec):
            return reason
        return None if spec.embed_scale else "BioGPT's embedding is scaled (embed_scale); unscaled, this is OPT"

    def config(self, spec) -> dict:
        v, (attention, ffn) = spec.vocab, repeated_layer(spec, "decoder")
        return {"architectures": [self.export_architecture], "model_type": self.model_type, "vocab_size": v.size,
                "hidden_size": spec.d_model, "num_hidden_layers": spec.decoder.num_layers,
                "num_attention_heads": attention.heads, "intermediate_size": ffn.d_ff,
                "hidden_act": ACTIVATION_NAMES[ffn.activation], "max_position_embeddings": spec.positional.max_len,
                "hidden_dropout_prob": spec.dropout, "attention_probs_dropout_prob": spec.attention_dropout,
                "activation_dropout": spec.activation_dropout, "scale_embedding": spec.embed_scale,
                "pad_token_id": v.pad_id, "bos_token_id": v.bos_id, "eos_token_id": v.eos_token_id,
                "tie_word_embeddings": True}
