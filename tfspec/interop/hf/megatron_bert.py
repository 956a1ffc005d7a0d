"""Megatron-BERT (``model_type: megatron-bert``): transformers' MegatronBertModel and
MegatronBertForMaskedLM as tfspec specs (NVIDIA's megatron-bert-cased-345m and
-uncased-345m, converted with transformers' conversion script).

BERT's embeddings, pooler, masked-LM head and tensor names (``bert.py``), with Megatron-LM's
placement of the LayerNorms: none on the embeddings, one before each sub-layer (pre-norm:
``attention.ln``, ``ln``) and one after the last layer (``encoder.ln``: ``final_norm``), which
the pooler and the head then read. Defaults are MegatronBertConfig's (the 345M shape).
"""

from __future__ import annotations

from tfspec.interop.hf.bert import Bert, PreNorm
from tfspec.interop.hf.family import register


@register
class MegatronBert(PreNorm, Bert):
    model_type = "megatron-bert"
    title = "Megatron-BERT"
    architectures = {"MegatronBertModel": "", "MegatronBertForMaskedLM": "bert."}
    export_architecture = "MegatronBertModel"
    masked_lm = "MegatronBertForMaskedLM"
    vocab_default = 29056
    defaults = {"hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16, "intermediate_size": 4096}
    """MegatronBertConfig's shape (345M) where BERT's (base) differs."""
    pre_norms = (("attention.output.LayerNorm.", "attention.ln."), ("output.LayerNorm.", "ln."))
    final_norm = "encoder.ln"
