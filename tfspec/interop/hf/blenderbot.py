"""Blenderbot (``model_type: blenderbot``): transformers' BlenderbotForConditionalGeneration and
BlenderbotModel as tfspec specs (facebook/blenderbot-400M-distill, blenderbot-1B-distill,
blenderbot-3B).

Marian's encoder-decoder (``marian.py``: the layer table, the shared embedding,
``final_logits_bias``) made pre-norm, each stack ending with one more LayerNorm
(``layer_norm``: ``final_norm``), as mBART and Pegasus are; its positions are a learned table
read from row 0 (no offset, unlike BART's), and no LayerNorm follows the embeddings. The
published configs scale the embeddings (``scale_embedding``). Decoding starts from <s>
(``decoder_start_token_id`` 1). Defaults are BlenderbotConfig's (blenderbot-3B's shape: 2
encoder and 24 decoder layers).

BlenderbotSmall (``blenderbot-small``, blenderbot_small-90M) is BART-like instead
(``blenderbot_small.py``).
"""

from __future__ import annotations

from dataclasses import replace

from tfspec.interop.hf.family import Rule, Source, number, register
from tfspec.interop.hf.marian import LEFTOVERS, Marian

SHAPE = {"d_model": 2560, "encoder_layers": 2, "decoder_layers": 24, "encoder_attention_heads": 32,
         "decoder_attention_heads": 32, "encoder_ffn_dim": 10240, "decoder_ffn_dim": 10240}
"""BlenderbotConfig's values where they differ from Marian's defaults (blenderbot-3B)."""


@register
class Blenderbot(Marian):
    model_type = "blenderbot"
    title = "Blenderbot"
    architectures = {"BlenderbotForConditionalGeneration": "model.", "BlenderbotModel": ""}
    export_architecture = "BlenderbotForConditionalGeneration"
    defaults = {"vocab_size": 8008, "pad_token_id": 0, "decoder_start_token_id": 1, "eos_token_id": 2}
    norm = "pre"
    exported = {}
    ignored = Marian.ignored | dict.fromkeys(
        (*LEFTOVERS, "do_blenderbot_90_layernorm", "layernorm_variant"),
        "left over from ParlAI's and fairseq's options; transformers' Blenderbot reads none of them (it is always "
        "pre-norm with learned positions and a final norm, no embedding norm)")

    def spec_data(self, source: Source) -> dict:
        return super().spec_data(replace(source, config=SHAPE | source.config))

    def _positional(self, c: dict, where: str) -> dict:
        return {"kind": "learned", "max_len": number(c, "max_position_embeddings", where, default=128)}

    def rules(self, spec, architecture: str) -> list[Rule]:
        return super().rules(spec, architecture) + [
            Rule(f"{stack}.pos.weight", (f"{stack}.embed_positions.weight",)) for stack in ("encoder", "decoder")]

    def dropped(self, architecture: str) -> dict[str, str]:
        return {name: why for name, why in super().dropped(architecture).items() if "embed_positions" not in name}
