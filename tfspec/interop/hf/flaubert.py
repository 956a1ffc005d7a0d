"""FlauBERT (``model_type: flaubert``): transformers' FlaubertModel and FlaubertWithLMHeadModel
as tfspec specs (flaubert/flaubert_small_cased, flaubert_base_uncased, flaubert_base_cased and
flaubert_large_cased; Le et al. 2020), with FlaubertForTokenClassification and
FlaubertForQuestionAnsweringSimple on top.

XLM's model, tensor names and refusals (``xlm.py``: transformers' Flaubert classes are XLM's
with two settings more). ``pre_norm`` moves each layer's LayerNorms before its sub-layers
(``norm: pre``), the LayerNorm on the embeddings staying and no norm after the last layer
(``final_norm: false``), as Le et al. trained the large model. ``layerdrop`` skips layers at random
while training only, so it changes nothing at inference.

transformers 5's FlaubertModel fails before computing a pre-norm model (its pre-norm branch
indexes the key/value cache it always creates, ``cache[i]``, a TypeError); an encoder's forward
reads no cache, so tfspec imports what that branch states, and the tests run it with a cache that
hands each layer none. ``export --format hf`` writes no pre-norm model, which transformers 5
could not run; with ``pre_norm`` false a FlauBERT model computes what XLM computes, and export
writes it as XLM. So FlauBERT is imported, never exported.
"""

from __future__ import annotations

from tfspec.interop.hf.family import Source, flag, register
from tfspec.interop.hf.xlm import XLM, folded


@register
class Flaubert(XLM):
    model_type = "flaubert"
    title = "FlauBERT"
    architectures = {"FlaubertModel": "", "FlaubertWithLMHeadModel": "transformer.",
                     "FlaubertForQuestionAnsweringSimple": "transformer."}
    export_architecture = "FlaubertModel"
    masked_lm = "FlaubertWithLMHeadModel"
    mapped = XLM.mapped + ("pre_norm",)
    ignored = XLM.ignored | {"layerdrop": "LayerDrop skips layers at random while training only"}

    def spec_data(self, source: Source) -> dict:
        data = super().spec_data(source)
        return data | {"norm": "pre" if flag(folded(source.config), "pre_norm", source.where) else "post"}

    def structure(self, spec) -> str | None:
        if spec.norm == "pre":
            return ("transformers 5's FlaubertModel cannot run pre_norm true (its pre-norm branch indexes its cache), "
                    "so export writes no pre-norm FlauBERT")
        return "with pre_norm false FlauBERT computes what XLM computes: export writes it as XLM"
