"""data2vec-text (``model_type: data2vec-text``): transformers' Data2VecTextModel and
Data2VecTextForMaskedLM as tfspec specs (facebook/data2vec-text-base).

RoBERTa's classes renamed (transformers' modular file inherits RobertaEmbeddings, RobertaLayer,
RobertaModel and RobertaLMHead unchanged): the same positions from row pad_token_id + 1 and the
same exact-GELU head, the masked-LM model's encoder under ``data2vec_text.``. It computes what
RoBERTa computes, so ``export --format hf`` writes it as RoBERTa. Defaults are
Data2VecTextConfig's (roberta-base's layers, BERT's 30522-token vocabulary).
"""

from __future__ import annotations

from tfspec.interop.hf.family import register
from tfspec.interop.hf.roberta import _Renamed


@register
class Data2VecText(_Renamed):
    model_type = "data2vec-text"
    title = "data2vec-text"
    architectures = {"Data2VecTextModel": "", "Data2VecTextForMaskedLM": "data2vec_text."}
    export_architecture = "Data2VecTextModel"
    masked_lm = "Data2VecTextForMaskedLM"
