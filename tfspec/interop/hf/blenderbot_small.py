"""BlenderbotSmall (``model_type: blenderbot-small``): transformers'
BlenderbotSmallForConditionalGeneration and BlenderbotSmallModel as tfspec specs
(facebook/blenderbot_small-90M, blenderbot-90M).

BART's computation (``bart.py``: post-norm layers, a learned position table, a LayerNorm on the
embeddings, ``final_logits_bias``) with a table read from row 0 (no offset) and two stacks that
embed differently: the encoder normalises its token embeddings (times sqrt(d_model) under
``scale_embedding``) plus positions, while the decoder normalises its token embeddings, never
scaled, and adds the positions after the norm (the decoder's ``embed_scale: false`` and
``embed_norm_on: tokens``). Decoding starts from __start__ (``decoder_start_token_id`` 1).
Defaults are BlenderbotSmallConfig's (blenderbot_small-90M's shape).
"""

from __future__ import annotations

from dataclasses import replace

from tfspec.interop.hf.bart import Bart
from tfspec.interop.hf.family import Source, number, register

SHAPE = {"d_model": 512, "encoder_layers": 8, "decoder_layers": 8, "encoder_attention_heads": 16,
         "decoder_attention_heads": 16, "encoder_ffn_dim": 2048, "decoder_ffn_dim": 2048}
"""BlenderbotSmallConfig's values where they differ from Marian's defaults."""


@register
class BlenderbotSmall(Bart):
    model_type = "blenderbot-small"
    title = "BlenderbotSmall"
    architectures = {"BlenderbotSmallForConditionalGeneration": "model.", "BlenderbotSmallModel": ""}
    export_architecture = "BlenderbotSmallForConditionalGeneration"
    defaults = {"vocab_size": 50265, "pad_token_id": 0, "decoder_start_token_id": 1, "eos_token_id": 2}

    def spec_data(self, source: Source) -> dict:
        data = super().spec_data(replace(source, config=SHAPE | source.config))
        data["decoder"] |= {"embed_scale": False, "embed_norm_on": "tokens"}
        return data

    def _positional(self, c: dict, where: str) -> dict:
        return {"kind": "learned", "max_len": number(c, "max_position_embeddings", where, default=512)}
