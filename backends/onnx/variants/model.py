"""``model.onnx``: full sequences, ``src`` and/or ``tgt`` (batch, len) -> ``logits``, for scoring.

Each token input comes with its mask, int64 (batch, len), 1 at real tokens (as transformers and
optimum name them: ``attention_mask`` for ``src``, or for a decoder-only model's ``tgt``;
``decoder_attention_mask`` for an encoder-decoder's ``tgt``): padding is what the mask says,
never a token id. Where a row starts with padding, each row counts positions among its real
tokens (``TorchModel.run``). Task heads write (batch, classes) or (batch, src_len, classes)
``logits``; CTC heads also ``log_probs``; encoders with a pooler ``pooled``.
"""

from __future__ import annotations

from . import Variant, register


@register
class Model(Variant):
    name, order, one_stream = "model", 0, False

    @classmethod
    def written(cls, graph, asked) -> bool:
        return True
