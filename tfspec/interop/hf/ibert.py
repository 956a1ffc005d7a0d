"""I-BERT (``model_type: ibert``): transformers' IBertModel and IBertForMaskedLM as tfspec specs,
and its IBertForSequenceClassification, IBertForTokenClassification and IBertForQuestionAnswering
(``task_heads.py``) (kssteven/ibert-roberta-base, kssteven/ibert-roberta-large and their
fine-tunes).

Kim et al. 2021's integer-only RoBERTa. In float mode (``quant_mode: false``, the default and what
the published checkpoints say) every quantized module is its float self: QuantLinear and
QuantEmbedding the plain layers, QuantAct the identity, IntGELU exact GELU, IntSoftmax softmax,
IntLayerNorm LayerNorm; so the model is RoBERTa (``roberta.py``: positions from row
pad_token_id + 1, the exact-GELU masked-LM head, ``classifier.dense`` and ``classifier.out_proj``
for sequences) under its own names, the base model under ``ibert.``. The integer mode's state that
checkpoints store beside the weights (8-bit copies of the weights, scaling factors, activation
ranges, LayerNorm shifts) is left out with a note. It computes what RoBERTa computes, so
``export --format hf`` writes it as RoBERTa.

Refused by name: ``quant_mode: true`` (integer-only kernels: 8-bit weights and activations, integer
GELU, softmax and LayerNorm, which compute other values than float arithmetic), and a
``hidden_act`` other than gelu, which transformers' layers do not read (IntGELU is exact GELU
whatever it says). Defaults are IBertConfig's (roberta-base's layers, BERT's 30522-token
vocabulary).
"""

from __future__ import annotations

from tfspec.errors import TfspecError
from tfspec.interop.hf.family import Source, _show, flag, register
from tfspec.interop.hf.roberta import Roberta, _Renamed

INTEGER_STATE = ("weight_integer", "weight_scaling_factor", "fc_scaling_factor", "bias_integer", "x_min", "x_max",
                 "act_scaling_factor", "shift")
"""Buffers of I-BERT's quantized modules (QuantLinear, QuantEmbedding, QuantAct, IntLayerNorm)."""
INTEGER_ONLY = "state of the integer-only mode (quant_mode true), which the float computation never reads"


@register
class IBert(_Renamed):
    model_type = "ibert"
    title = "I-BERT"
    architectures = {"IBertModel": "", "IBertForMaskedLM": "ibert."}
    export_architecture = "IBertModel"
    masked_lm = "IBertForMaskedLM"
    mapped = Roberta.mapped + ("quant_mode",)
    ignored = Roberta.ignored | {"force_dequant": "which layers integer-only mode computes in float; with "
                                                  "quant_mode false every layer already does"}

    def spec_data(self, source: Source) -> dict:
        c, where = source.config, source.where
        if flag(c, "quant_mode", where, False):
            raise TfspecError(f"{where}: quant_mode: true is not supported; I-BERT's integer-only kernels (8-bit "
                              "weights and activations, integer GELU, softmax and LayerNorm) compute other values "
                              "than float arithmetic, and tfspec imports its float mode (quant_mode false)")
        if c.get("hidden_act", "gelu") != "gelu":
            raise TfspecError(f"{where}: hidden_act: {_show(c['hidden_act'])} is not supported; transformers' "
                              "I-BERT layers apply exact GELU (IntGELU) whatever hidden_act says")
        return super().spec_data(source)

    def dropped(self, architecture: str) -> dict[str, str]:
        return super().dropped(architecture) | {f"*.{name}": INTEGER_ONLY for name in INTEGER_STATE}
