"""mBART (``model_type: mbart``): transformers' MBartForConditionalGeneration and MBartModel as
tfspec specs (facebook/mbart-large-cc25, mbart-large-50 and their translation fine-tunes).

BART (``bart.py``: the layer table, learned positions from row 2, layernorm_embedding) made
pre-norm, as fairseq's mBART is: each sub-layer normalises its input, and each stack ends with
one more LayerNorm (``layer_norm``: ``final_norm``). Its configs usually scale the embeddings
(``scale_embedding``). MBartConfig leaves ``decoder_start_token_id`` null, and ``generate``
then starts from ``bos_token_id`` (<s>); mbart-large-50 starts from eos (2) and forces the target
language's code as the second token (``forced_bos_token_id``, a generation setting: ``search``
takes it as a prefix). Defaults are MBartConfig's (mbart-large-cc25's shape).
"""

from __future__ import annotations

from tfspec.interop.hf.bart import Bart
from tfspec.interop.hf.family import register
from tfspec.interop.hf.marian import LEFTOVERS


@register
class MBart(Bart):
    model_type = "mbart"
    title = "mBART"
    architectures = {"MBartForConditionalGeneration": "model.", "MBartModel": ""}
    export_architecture = "MBartForConditionalGeneration"
    defaults = Bart.defaults | {"decoder_start_token_id": None, "bos_token_id": 0}
    norm = "pre"
    ignored = Bart.ignored | dict.fromkeys(LEFTOVERS, "fairseq's options; transformers' mBART reads none of them (it "
                                                      "is always pre-norm with learned positions, layernorm_embedding "
                                                      "and a final norm)")
