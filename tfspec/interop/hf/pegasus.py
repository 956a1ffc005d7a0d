"""Pegasus (``model_type: pegasus``): transformers' PegasusForConditionalGeneration as a tfspec
spec (google/pegasus-large, pegasus-xsum, pegasus-cnn_dailymail and their fine-tunes).

Marian (``marian.py``: the layer table, sinusoids in halves read from position 0, the shared
embedding, ``final_logits_bias``, decoding from the padding token) made pre-norm: each
sub-layer normalises its input, and each stack ends with one more LayerNorm (``layer_norm``:
``final_norm``). The published configs scale the embeddings (``scale_embedding``). Defaults
are PegasusConfig's (pegasus-large's shape with BART's vocabulary size).
"""

from __future__ import annotations

from tfspec.interop.hf.family import register
from tfspec.interop.hf.marian import LEFTOVERS, Marian


@register
class Pegasus(Marian):
    model_type = "pegasus"
    title = "Pegasus"
    architectures = {"PegasusForConditionalGeneration": "model."}
    export_architecture = "PegasusForConditionalGeneration"
    defaults = {"vocab_size": 50265, "pad_token_id": 0, "decoder_start_token_id": 0, "eos_token_id": 1}
    norm = "pre"
    exported = {}
    ignored = Marian.ignored | dict.fromkeys(LEFTOVERS, "fairseq's options; transformers' Pegasus reads none of them "
                                                        "(it is always pre-norm with static sinusoids and a final "
                                                        "norm, no embedding norm)")
