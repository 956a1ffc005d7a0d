"""HuBERT (``model_type: hubert``): transformers' HubertModel, HubertForCTC and
HubertForSequenceClassification as tfspec specs (Hsu et al. 2021, "HuBERT: Self-Supervised Speech
Representation Learning by Masked Prediction of Hidden Units"; facebook/hubert-base-ls960,
hubert-large-ls960-ft).

wav2vec 2.0's network (§III-A: "we adopt the same architecture as wav2vec 2.0"), trained on
another objective, so ``wav2vec2.py``'s family with what differs: the LayerNorm before the feature
projection may be left out (``feat_proj_layer_norm``, on by default), the position convolution's
BatchNorm variant (``conv_pos_batch_norm``) is refused, and its configuration has no adapter,
quantizer or x-vector fields. Defaults are HubertConfig's, which are Wav2Vec2Config's.
"""

from __future__ import annotations

from tfspec.interop.hf.family import flag, register
from tfspec.interop.hf.wav2vec2 import Wav2Vec2


@register
class Hubert(Wav2Vec2):
    model_type = "hubert"
    title = "HuBERT"
    architectures = {"HubertModel": "", "HubertForCTC": "hubert.", "HubertForSequenceClassification": "hubert."}
    export_architecture = "HubertModel"
    ctc_architecture = "HubertForCTC"
    classification_architecture = "HubertForSequenceClassification"
    mapped = (*Wav2Vec2.mapped, "feat_proj_layer_norm")
    required = {"conv_pos_batch_norm": (False,)}

    def _projection(self, c: dict, where: str) -> dict:
        return {"projection_norm": flag(c, "feat_proj_layer_norm", where, True)}
