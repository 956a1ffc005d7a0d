"""Megatron-BERT (``model_type: megatron-bert``): transformers' MegatronBertModel and
MegatronBertForMaskedLM as tfspec specs (NVIDIA's megatron-bert-cased-345m and
-uncased-345m, converted with transformers' conversion script).

BERT's embeddings, pooler, masked-LM head and tensor names (``bert.py``), with Megatron-LM's
placement of the LayerNorms: none on the embeddings, one before each sub-layer (pre-norm:
``attention.ln``, ``ln``) and one after the last layer (``encoder.ln``: ``final_norm``), which
the pooler and the head then read. Defaults are MegatronBertConfig's (the 345M shape).
"""

from __future__ import annotations

from tfspec.interop.hf.bert import Bert
from tfspec.interop.hf.family import Rule, Source, norm_rules, register

NORMS = (("attention.output.LayerNorm.", "attention.ln."), ("output.LayerNorm.", "ln."))
"""BERT's post-norm LayerNorm of each sub-layer -> Megatron-BERT's pre-norm one in its place
(the self-attention's first: BERT's second name ends the first)."""


@register
class MegatronBert(Bert):
    model_type = "megatron-bert"
    title = "Megatron-BERT"
    architectures = {"MegatronBertModel": "", "MegatronBertForMaskedLM": "bert."}
    export_architecture = "MegatronBertModel"
    masked_lm = "MegatronBertForMaskedLM"
    vocab_default = 29056

    def spec_data(self, source: Source) -> dict:
        return super().spec_data(source) | {"norm": "pre", "final_norm": True, "embed_norm": False}

    def rules(self, spec, architecture: str) -> list[Rule]:
        rules = [Rule(rule.ir, tuple(_pre_norm(name) for name in rule.hf), rule.layout)
                 for rule in super().rules(spec, architecture) if not rule.ir.startswith("encoder.embed_norm.")]
        return rules + norm_rules("encoder.norm", "encoder.ln")


def _pre_norm(name: str) -> str:
    for bert, megatron in NORMS:
        if f".{bert}" in name:
            return name.replace(f".{bert}", f".{megatron}")
    return name
