"""XLM-RoBERTa-XL (``model_type: xlm-roberta-xl``): transformers' XLMRobertaXLModel and
XLMRobertaXLForMaskedLM as tfspec specs (facebook/xlm-roberta-xl and -xxl).

RoBERTa (``roberta.py``: positions from row pad_token_id + 1, the exact-GELU masked-LM head,
its tensor names) with fairseq's pre-norm placement of the LayerNorms, as Megatron-BERT
changes BERT: none on the embeddings, one before each sub-layer (``attention.
self_attn_layer_norm`` before the self-attention, the layer's ``LayerNorm`` before the
feed-forward) and one after the last layer (``encoder.LayerNorm``: ``final_norm``), which the
pooler and the head read. Defaults are XLMRobertaXLConfig's (xlm-roberta-xl's shape).
"""

from __future__ import annotations

from tfspec.interop.hf.family import Rule, Source, norm_rules, register
from tfspec.interop.hf.roberta import Roberta

NORMS = (("attention.output.LayerNorm.", "attention.self_attn_layer_norm."), ("output.LayerNorm.", "LayerNorm."))
"""RoBERTa's post-norm LayerNorm of each sub-layer -> XLM-RoBERTa-XL's pre-norm one in its place
(the self-attention's first: RoBERTa's second name ends the first)."""


@register
class XLMRobertaXL(Roberta):
    model_type = "xlm-roberta-xl"
    title = "XLM-RoBERTa-XL"
    architectures = {"XLMRobertaXLModel": "", "XLMRobertaXLForMaskedLM": "roberta."}
    export_architecture = "XLMRobertaXLModel"
    masked_lm = "XLMRobertaXLForMaskedLM"
    vocab_default = 250880

    def spec_data(self, source: Source) -> dict:
        return super().spec_data(source) | {"norm": "pre", "final_norm": True, "embed_norm": False}

    def rules(self, spec, architecture: str) -> list[Rule]:
        rules = [Rule(rule.ir, tuple(_pre_norm(name) for name in rule.hf), rule.layout)
                 for rule in super().rules(spec, architecture) if not rule.ir.startswith("encoder.embed_norm.")]
        return rules + norm_rules("encoder.norm", "encoder.LayerNorm")


def _pre_norm(name: str) -> str:
    for roberta, xl in NORMS:
        if f".{roberta}" in name:
            return name.replace(f".{roberta}", f".{xl}")
    return name
