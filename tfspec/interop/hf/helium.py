"""Helium (``model_type: helium``): transformers' HeliumForCausalLM and HeliumModel as tfspec specs
(kyutai/helium-1-preview-2b, helium-1-2b).

Llama (``llama.py``: pre-RMSNorm, SwiGLU, grouped-query attention) whose rotary positions rotate
interleaved pairs (x_0, x_1), (x_2, x_3), ... (``cohere.InterleavedRotary`` permutes the query
and key rows to tfspec's rotate-half) and whose ``attention_bias`` biases q, k and v but never
the output projection (a plain hidden_size x hidden_size matrix: heads x head_dim must equal
hidden_size). Defaults are HeliumConfig's (helium-1-preview-2b's shape, rms_norm_eps 1e-8). The
interleaved pairs are only a row order, so a Helium spec is Llama's computation (Qwen2's with
``attention_bias``), and ``export --format hf`` writes it as that.
"""

from __future__ import annotations

from dataclasses import replace

from tfspec.errors import TfspecError
from tfspec.interop.hf.cohere import interleaved
from tfspec.interop.hf.family import Rule, Source, register
from tfspec.interop.hf.llama import Llama


@register
class Helium(Llama):
    model_type = "helium"
    title = "Helium"
    architectures = {"HeliumForCausalLM": "model.", "HeliumModel": ""}
    export_architecture = "HeliumForCausalLM"
    export_rank = 1  # its specs are Llama's (Qwen2's with attention_bias): export writes those
    ignored = {}
    rope_types = ("default",)
    defaults = {"vocab_size": 48000, "hidden_size": 2560, "intermediate_size": 7040, "num_hidden_layers": 24,
                "num_attention_heads": 20, "num_key_value_heads": 20, "head_dim": 128, "max_position_embeddings": 4096,
                "rms_norm_eps": 1e-8, "rope_theta": 100000.0, "pad_token_id": 3, "eos_token_id": 2, "bos_token_id": 1}
    """HeliumConfig's values where Llama's differ (those ``Llama.spec_data`` falls back on)."""

    def spec_data(self, source: Source) -> dict:
        data = super().spec_data(replace(source, config=self.defaults | source.config))
        if data["heads"] * data["d_k"] != data["d_model"]:
            raise TfspecError(f"{source.where}: num_attention_heads ({data['heads']}) x head_dim ({data['d_k']}) "
                              f"must equal hidden_size ({data['d_model']}): Helium's output projection is "
                              "hidden_size wide on both sides")
        return data

    def _biases(self, c: dict, where: str) -> dict:
        return super()._biases(c, where) | {"o": False}

    def rules(self, spec, architecture: str) -> list[Rule]:
        return interleaved(super().rules(spec, architecture), spec)
