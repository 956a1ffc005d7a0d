"""BART (``model_type: bart``): transformers' BartForConditionalGeneration and BartModel as
tfspec specs (facebook/bart-base, bart-large).

Marian's encoder-decoder (``marian.py``: the same layers, names and shared embedding) with
fairseq's embeddings: a learned position table whose first two rows are never read
(``positional.offset: 2``), a LayerNorm on embeddings + positions in both stacks
(``layernorm_embedding``: ``embed_norm``), and usually no sqrt(d_model) scaling. Decoding
starts from eos (``decoder_start_token_id`` 2), so the spec's bos_id is its eos_id. Defaults
are BartConfig's.
"""

from __future__ import annotations

from tfspec.interop.hf.family import Rule, norm_rules, number, register
from tfspec.interop.hf.marian import LEFTOVERS, Marian

POSITION_OFFSET = 2
"""transformers' BartLearnedPositionalEmbedding.offset: rows 0 and 1 are fairseq's padding rows."""


@register
class Bart(Marian):
    model_type = "bart"
    title = "BART"
    architectures = {"BartForConditionalGeneration": "model.", "BartModel": ""}
    export_architecture = "BartForConditionalGeneration"
    defaults = {"vocab_size": 50265, "pad_token_id": 1, "decoder_start_token_id": 2, "eos_token_id": 2}
    embed_norm = True
    exported = {}
    ignored = Marian.ignored | dict.fromkeys(LEFTOVERS, "fairseq's options; transformers' BART reads none of them "
                                                        "(it is always post-norm with learned positions and "
                                                        "layernorm_embedding, no final norm)") | dict.fromkeys(
        ("student_encoder_layers", "student_decoder_layers", "replacing_rate"),
        "left over from the distillation scripts (distilbart): the layers the checkpoint has are what it computes")

    def _positional(self, c: dict, where: str) -> dict:
        max_len = number(c, "max_position_embeddings", where, default=1024)
        return {"kind": "learned", "max_len": max_len, "offset": POSITION_OFFSET}

    def rules(self, spec, architecture: str) -> list[Rule]:
        rules = super().rules(spec, architecture)
        for stack in ("encoder", "decoder"):
            rules += [Rule(f"{stack}.pos.weight", (f"{stack}.embed_positions.weight",)),
                      *norm_rules(f"{stack}.embed_norm", f"{stack}.layernorm_embedding")]
        return rules

    def dropped(self, architecture: str) -> dict[str, str]:
        return {name: why for name, why in super().dropped(architecture).items() if "embed_positions" not in name}
