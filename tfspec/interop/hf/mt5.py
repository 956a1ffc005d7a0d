"""mT5 (``model_type: mt5``): transformers' MT5ForConditionalGeneration and MT5Model as tfspec
specs (google/mt5-small .. mt5-xxl, and the bigscience/mt0 fine-tunes).

T5 v1.1's computation (``t5.py``: pre-RMSNorm, T5's relative attention bias, gated-gelu, its
own ``lm_head``) under another model type, with MT5Config's defaults (mt5-small's shape with a
250,112-token vocabulary). Its output is never scaled by d_model^-0.5: transformers 5's
MT5ForConditionalGeneration has no such factor (4 scaled under ``tie_word_embeddings: true``,
which no published mT5 config says), and MT5Config always writes ``tie_word_embeddings: true``
while an ``lm_head.weight`` the checkpoint holds is loaded untied. MT5Model has no lm_head: its
spec's output is the shared embedding, so the spec holds exactly its parameters.

mT5 computes what T5 computes, so ``export --format hf`` writes an mT5 spec as T5.
"""

from __future__ import annotations

from tfspec.interop.hf.family import Source, flag, register
from tfspec.interop.hf.t5 import T5


@register
class MT5(T5):
    model_type = "mt5"
    title = "mT5"
    architectures = {"MT5ForConditionalGeneration": "", "MT5Model": ""}
    export_architecture = "MT5ForConditionalGeneration"
    mapped = tuple(key for key in T5.mapped if key != "scale_decoder_outputs")
    defaults = {"vocab_size": 250112, "d_ff": 1024, "num_layers": 8, "num_heads": 6, "feed_forward_proj": "gated-gelu"}

    def _output(self, source: Source, d_model: int) -> dict:
        c, where = source.config, source.where
        own = (source.architecture != "MT5Model"
               and (not flag(c, "tie_word_embeddings", where, True)
                    or (source.names is not None and "lm_head.weight" in source.names)))
        return {"tie_embeddings": "inputs" if own else "all", "output_scale": 1.0}

    def dropped(self, architecture: str) -> dict[str, str]:
        if architecture == "MT5Model":
            return super().dropped(architecture) | {"lm_head.weight": "the output projection, not part of MT5Model"}
        return super().dropped(architecture)

    def structure(self, spec) -> str | None:
        return f"{self.title} computes what T5 computes: export writes it as T5"
