"""Gemma 3 text (``model_type: gemma3_text``): transformers' Gemma3ForCausalLM and
Gemma3TextModel as tfspec specs (google/gemma-3-1b-pt, gemma-3-1b-it, gemma-3-270m).

Gemma 2 (``gemma2.py``: sandwich norms, query_pre_attn_scalar, sliding-window and global layers
as ``layer_types`` says, x * (1 + w) RMSNorms) with three differences:

- queries and keys pass an RMSNorm per head before the rotation (``q_norm``, ``k_norm``: one
  head_dim gain shared by the heads, x * (1 + w) as every Gemma norm: ``qk_norm: head``);
- the two kinds of layer rotate with their own base: global layers with ``rope_theta`` (10^6;
  the spec's ``positional``), sliding ones with ``rope_local_base_freq`` (10^4; the layer's own
  ``positions``), written per layer type in ``rope_parameters`` by transformers 5;
- without ``layer_types``, five sliding layers precede each global one (``sliding_window_pattern``,
  6), and the output is soft-capped only when ``final_logit_softcapping`` says (null in the
  published configs).

Rotary scaling as the Llama family reads it (``linear`` on the global layers of gemma-3-4b and
larger). Refused by name: ``attn_logit_softcapping``, which transformers' Gemma 3 reads but never
applies. Defaults are Gemma3TextConfig's (gemma-2-2b's shape, Gemma 3's 262,208-token vocabulary).
"""

from __future__ import annotations

from tfspec.errors import TfspecError
from tfspec.interop.hf.family import Rule, _show, number, register
from tfspec.interop.hf.gemma2 import LAYER_TYPES, Gemma2, _checked_kinds
from tfspec.interop.hf.layouts import PlusOne
from tfspec.interop.hf.rope import ROPE_TYPES, scaling_config

THETA = {"full_attention": ("rope_theta", 1_000_000.0), "sliding_attention": ("rope_local_base_freq", 10_000.0)}
"""Layer type -> the field older files give its rotary base in, and Gemma3TextConfig's default."""


@register
class Gemma3(Gemma2):
    model_type = "gemma3_text"
    title = "Gemma 3"
    architectures = {"Gemma3ForCausalLM": "model.", "Gemma3TextModel": ""}
    export_architecture = "Gemma3ForCausalLM"
    mapped = tuple(f for f in Gemma2.mapped if f != "attn_logit_softcapping") + (
        "rope_local_base_freq", "sliding_window_pattern", "_sliding_window_pattern")
    required = Gemma2.required | {"attn_logit_softcapping": (None,)}
    rope_types = ROPE_TYPES
    """The larger published Gemma 3 models (4B, 12B, 27B) stretch their global layers' rotation
    by linear scaling (factor 8)."""
    defaults = Gemma2.defaults | {"vocab_size": 262208, "max_position_embeddings": 131072,
                                  "attn_logit_softcapping": None, "final_logit_softcapping": None}
    """Gemma3TextConfig's values where Gemma 2's differ."""

    def _layer_kinds(self, c: dict, where: str, layers: int) -> list[str]:
        """``layer_types``; when absent, every ``sliding_window_pattern``-th layer global."""
        key = next((k for k in ("sliding_window_pattern", "_sliding_window_pattern") if k in c), None)
        pattern = number(c, key, where) if key else 6  # read whether layer_types decides or not
        if c.get("layer_types") is not None:
            return _checked_kinds(c["layer_types"], where, layers)
        if pattern < 1:
            raise TfspecError(f"{where}: {key} must be positive, got {pattern}")
        return _checked_kinds([LAYER_TYPES[(i + 1) % pattern == 0] for i in range(layers)], where, layers)

    def _layer(self, kind: str, c: dict, where: str, d_k: int) -> dict:
        own = {"positions": self._rope(c, where, kind)} if kind == "sliding_attention" else {}
        return super()._layer(kind, c, where, d_k) | {"qk_norm": "head"} | own

    def _rotary(self, c: dict, where: str) -> dict:
        """The global layers' rotary positions: the spec's ``positional``."""
        return self._rope(c, where, "full_attention")

    def _rope(self, c: dict, where: str, kind: str) -> dict:
        """The rotary positions of ``kind`` layers as transformers reads them: that layer type's
        ``rope_parameters`` (transformers 5), its base otherwise from ``THETA``'s field, and for
        global layers an older file's ``rope_scaling`` on top."""
        settings = c.get("rope_parameters") or {}
        if not isinstance(settings, dict) or not set(settings) <= set(LAYER_TYPES) or not all(
                isinstance(v, dict) for v in settings.values() if v is not None):
            raise TfspecError(f"{where}: rope_parameters must be an object of rotary settings per layer type "
                              f"({', '.join(LAYER_TYPES)}), got {_show(settings)}")
        rope = dict(settings.get(kind) or {})
        if kind == "full_attention" and c.get("rope_scaling") is not None:
            if not isinstance(c["rope_scaling"], dict):
                raise TfspecError(f"{where}: rope_scaling must be an object of rotary settings, got "
                                  f"{_show(c['rope_scaling'])}")
            rope |= c["rope_scaling"]
        field, default = THETA[kind]
        rope.setdefault("rope_theta", c.get(field, default))
        return super()._rotary({"rope_parameters": rope, "max_position_embeddings": c["max_position_embeddings"]},
                               where)

    def rules(self, spec, architecture: str) -> list[Rule]:
        """Gemma 2's, and each layer's query and key norm gains (stored minus one)."""
        return super().rules(spec, architecture) + [
            Rule(f"{layer.names[0]}.{part}_norm", (f"layers.{layer.index}.self_attn.{part}_norm.weight",), PlusOne())
            for layer in spec.plan("decoder") for part in "qk"]

    def structure(self, spec) -> str | None:
        if reason := super().structure(spec):
            return reason
        if any(layer.attention.qk_norm != "head" for layer in spec.plan("decoder")):
            return f"{self.title} normalises each head's queries and keys (qk_norm: head) in every layer"
        return None

    def config(self, spec) -> dict:
        """Gemma 2's fields, each layer type's rotary base, the global layers' scaling (as
        ``rope_scaling``, which transformers applies to them), no attention soft-capping."""
        bases = {LAYER_TYPES[layer.attention.kind != "restricted_self_attention"]: layer.attention.positions.base
                 for layer in spec.plan("decoder")}
        return super().config(spec) | {"attn_logit_softcapping": None} | {
            field: bases.get(kind, default) for kind, (field, default) in THETA.items()} | scaling_config(spec.positional)
