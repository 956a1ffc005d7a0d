"""PLBART (``model_type: plbart``): transformers' PLBartForConditionalGeneration and PLBartModel
as tfspec specs (uclanlp/plbart-base and its code-translation and summarisation fine-tunes).

BART's computation and tensor names (``bart.py``: post-norm layers, learned positions from row
2, layernorm_embedding, no final norm; transformers' PLBartEncoder and PLBartDecoder are
BartEncoder and BartDecoder) with PLBartConfig's defaults: the embeddings scaled by
sqrt(d_model) unless ``scale_embedding`` says false, a 50005-token vocabulary, and no
``decoder_start_token_id``, so ``generate`` starts from ``bos_token_id`` (<s>, 0) as mBART's.
"""

from __future__ import annotations

from tfspec.interop.hf.bart import Bart
from tfspec.interop.hf.family import register


@register
class PLBart(Bart):
    model_type = "plbart"
    title = "PLBART"
    architectures = {"PLBartForConditionalGeneration": "model.", "PLBartModel": ""}
    export_architecture = "PLBartForConditionalGeneration"
    defaults = Bart.defaults | {"vocab_size": 50005, "decoder_start_token_id": None, "bos_token_id": 0, "d_model": 768,
                                "encoder_layers": 6, "decoder_layers": 6, "encoder_attention_heads": 12,
                                "decoder_attention_heads": 12, "encoder_ffn_dim": 3072, "decoder_ffn_dim": 3072,
                                "attention_dropout": 0.1}

    def _flag(self, c: dict, key: str, where: str) -> bool:
        """scale_embedding is true when PLBartConfig's file leaves it out (BART's is false)."""
        return super()._flag({"scale_embedding": True} | c, key, where)
