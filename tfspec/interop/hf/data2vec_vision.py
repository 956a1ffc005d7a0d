"""data2vec-vision (``model_type: data2vec-vision``): transformers' Data2VecVisionModel and
Data2VecVisionForImageClassification as tfspec specs (Baevski et al. 2022, "data2vec: A General
Framework for Self-supervised Learning in Speech, Vision and Language"; facebook/data2vec-vision-*).

BEiT's computation (``beit.py``): transformers' modelling file is BEiT's copied with the classes
renamed (the same 2-D relative bias, LayerScale, query and value biases, mean pooling), its
tensors under ``data2vec_vision.``. One difference: Data2VecVisionModel has no pooler
(add_pooling_layer defaults to False), so its only output is the last hidden states. The classifier
computes what BeitForImageClassification computes, so ``export --format hf`` writes it as BEiT.
Defaults are Data2VecVisionConfig's (BeitConfig's).
"""

from __future__ import annotations

from tfspec.interop.hf.beit import Beit
from tfspec.interop.hf.family import register


@register
class Data2VecVision(Beit):
    model_type = "data2vec-vision"
    title = "data2vec-vision"
    architectures = {"Data2VecVisionModel": "", "Data2VecVisionForImageClassification": "data2vec_vision."}
    export_architecture = "Data2VecVisionModel"
    classifier_architecture = "Data2VecVisionForImageClassification"
    base_pooler = False
    export_rank = 1  # its classifier specs are BEiT's: export writes BEiT
