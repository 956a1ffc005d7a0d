"""SmolLM3 (``model_type: smollm3``): transformers' SmolLM3ForCausalLM and SmolLM3Model as tfspec
specs (HuggingFaceTB/SmolLM3-3B, SmolLM3-3B-Base).

Llama (``llama.py``) whose layers listed 0 in ``no_rope_layers`` attend without positions (NoPE:
no rotation of their queries and keys; a layer's ``positions: none``); when the list is absent
every ``no_rope_layer_interval``-th layer (4: layers 3, 7, ..) is such a layer. The stack is
then groups of rotary and NoPE layers. The output is tied to the embedding by default. Refused
by name: sliding windows (``use_sliding_window``, or ``sliding_attention`` in ``layer_types``),
which no published SmolLM3 uses. Defaults are SmolLM3Config's (SmolLM3-3B's shape, rotary base
2,000,000).
"""

from __future__ import annotations

from dataclasses import replace

from tfspec.errors import TfspecError
from tfspec.interop.hf.family import Source, _show, number, register
from tfspec.interop.hf.llama import Llama
from tfspec.interop.hf.qwen3 import full_attention_only


@register
class SmolLM3(Llama):
    model_type = "smollm3"
    title = "SmolLM3"
    architectures = {"SmolLM3ForCausalLM": "model.", "SmolLM3Model": ""}
    export_architecture = "SmolLM3ForCausalLM"
    mapped = Llama.mapped + ("no_rope_layers", "no_rope_layer_interval", "layer_types")
    required = {"use_sliding_window": (False,)}
    ignored = Llama.ignored | {
        "sliding_window": "read only by sliding_attention layers, which layer_types may not list",
        "max_window_layers": "written in SmolLM3-3B's config; transformers' SmolLM3 never reads it"}
    grouped = True
    defaults = {"vocab_size": 128256, "hidden_size": 2048, "num_hidden_layers": 36, "num_attention_heads": 16,
                "num_key_value_heads": 4, "max_position_embeddings": 32768, "rope_theta": 2000000.0,
                "tie_word_embeddings": True, "pad_token_id": 128004, "bos_token_id": 128000, "eos_token_id": 128001}
    """SmolLM3Config's values where Llama's differ (those ``Llama.spec_data`` falls back on)."""

    def spec_data(self, source: Source) -> dict:
        c, where = self.defaults | source.config, source.where
        data = super().spec_data(replace(source, config=c))
        layers = data["decoder"]["layers"]
        full_attention_only(c, where, layers, self.title)
        groups: list[dict] = []
        for rotated in _rotated_layers(c, where, layers):
            if groups and groups[-1]["rotated"] == rotated:
                groups[-1]["layers"] += 1
            else:
                groups.append({"rotated": rotated, "layers": 1})
        nope = {"kind": "causal_self_attention", "positions": "none"}
        return data | {"decoder": {"groups": [{"layers": g["layers"], "block": [
            "causal_self_attention" if g["rotated"] else nope, "ffn"]} for g in groups]}}

    def config(self, spec) -> dict:
        rotated = [int(layer.attention is not None and layer.attention.positions.kind != "none")
                   for layer in spec.plan("decoder")]
        return super().config(spec) | {"no_rope_layers": rotated, "use_sliding_window": False}


def _rotated_layers(c: dict, where: str, layers: int) -> list[bool]:
    """Whether each layer rotates its queries and keys, as ``no_rope_layers`` (1: rotary, 0: none)
    or, without it, ``no_rope_layer_interval`` says."""
    listed = c.get("no_rope_layers")
    interval = number(c, "no_rope_layer_interval", where, default=4)  # read whether the list decides or not
    if listed is None:
        if interval < 1:
            raise TfspecError(f"{where}: no_rope_layer_interval must be a positive integer, got {interval}")
        return [(i + 1) % interval != 0 for i in range(layers)]
    if not isinstance(listed, list) or len(listed) < layers or any(v not in (0, 1) for v in listed[:layers]):
        raise TfspecError(f"{where}: no_rope_layers: {_show(listed)} is not supported; tfspec reads a list of 1 "
                          f"(rotary) or 0 (no positions) for each of the {layers} layers")
    return [v == 1 for v in listed[:layers]]

