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

from tfspec.interop.hf.bert import PreNorm
from tfspec.interop.hf.family import register
from tfspec.interop.hf.roberta import Roberta


@register
class XLMRobertaXL(PreNorm, Roberta):
    model_type = "xlm-roberta-xl"
    title = "XLM-RoBERTa-XL"
    architectures = {"XLMRobertaXLModel": "", "XLMRobertaXLForMaskedLM": "roberta."}
    export_architecture = "XLMRobertaXLModel"
    masked_lm = "XLMRobertaXLForMaskedLM"
    vocab_default = 250880
    defaults = {"hidden_size": 2560, "num_hidden_layers": 36, "num_attention_heads": 32, "intermediate_size": 10240,
                "layer_norm_eps": 1e-5, "max_position_embeddings": 514, "type_vocab_size": 1}
    """XLMRobertaXLConfig's values (xlm-roberta-xl's shape) where RoBERTa's fallbacks differ."""
    pre_norms = (("attention.output.LayerNorm.", "attention.self_attn_layer_norm."),
                 ("output.LayerNorm.", "LayerNorm."))
    final_norm = "encoder.LayerNorm"
