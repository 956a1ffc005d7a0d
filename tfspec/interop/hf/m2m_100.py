"""M2M-100 (``model_type: m2m_100``): transformers' M2M100ForConditionalGeneration and M2M100Model
as tfspec specs (facebook/m2m100_418M, m2m100_1.2B, and NLLB-200: facebook/nllb-200-distilled-600M,
nllb-200-1.3B, nllb-200-3.3B, whose checkpoints are this class).

Marian's encoder-decoder (``marian.py``: the layer table, the shared embedding tied to the
output) made pre-norm with a final LayerNorm per stack, as mBART and Pegasus are, with fairseq's
sinusoids: [all sines | all cosines] at frequencies 10000^(-i / (d/2 - 1)) (``positional.spacing:
endpoint``), read from row pad_token_id + 1 on (``positional.offset``). transformers numbers the
positions of the non-pad tokens only (pads read the zeroed row pad_token_id); tfspec numbers
every position, which is the same at every real token of a right-padded batch, the padding
tfspec makes (a pad in the middle of a row is padding to tfspec too, ``tfspec.padding``). No
final_logits_bias, no LayerNorm on the embeddings; they are scaled by sqrt(d_model) unless
``scale_embedding`` is false (M2M100Config's default is true). Decoding starts from </s>
(``decoder_start_token_id`` 2) and translation forces the target language's code second
(``forced_bos_token_id``, a generation setting: ``search`` takes it as a prefix).

The table grows past max_position_embeddings in transformers; tfspec reads that many positions.
"""

from __future__ import annotations

from tfspec.interop.hf.family import Source, number, register
from tfspec.interop.hf.marian import LEFTOVERS, Marian


@register
class M2M100(Marian):
    model_type = "m2m_100"
    title = "M2M-100"
    architectures = {"M2M100ForConditionalGeneration": "model.", "M2M100Model": ""}
    export_architecture = "M2M100ForConditionalGeneration"
    defaults = {"vocab_size": 128112, "pad_token_id": 1, "decoder_start_token_id": 2, "eos_token_id": 2,
                "activation_function": "relu", "attention_dropout": 0.1}
    norm = "pre"
    stored_sinusoids = False
    exported = {}
    ignored = Marian.ignored | dict.fromkeys(LEFTOVERS, "fairseq's options; transformers' M2M-100 reads none of "
                                                        "them (it is always pre-norm with fairseq's sinusoids and "
                                                        "a final norm, no embedding norm)")

    def _positional(self, c: dict, where: str) -> dict:
        pad = number(c, "pad_token_id", where, default=self.defaults["pad_token_id"])
        return {"kind": "sinusoidal", "layout": "halves", "spacing": "endpoint", "offset": pad + 1,
                "max_len": number(c, "max_position_embeddings", where, default=1024)}

    def _flag(self, c: dict, key: str, where: str) -> bool:
        """scale_embedding is true when M2M100Config's file leaves it out (Marian's is false)."""
        return super()._flag({"scale_embedding": True} | c, key, where)

    def _output_bias(self, source: Source) -> bool:
        return False
