"""transformers' rotary scaling settings (``rope_parameters`` / ``rope_scaling``) as a spec's
``positional.scaling`` and back, for every family whose rotary embedding is transformers'
standard one (``ROPE_INIT_FUNCTIONS`` with ``dynamic_rope_update``): llama3, linear, dynamic,
yarn and longrope (``tfspec.ir.rope_scaling`` computes them).

The settings are read as transformers standardises them: ``original_max_position_embeddings``
defaults to ``max_position_embeddings`` (llama3, yarn, longrope); yarn's ``factor`` to their
ratio and its betas to 32 and 1 when unset or 0; dynamic's threshold is
``max_position_embeddings`` itself, so the spec's ``max_len`` is factor times that, the length
the scaling is meant to reach (transformers sets no limit).
"""

from __future__ import annotations

from tfspec.errors import TfspecError
from tfspec.interop.hf.family import _show, flag, number

ROPE_TYPES = ("default", "llama3", "linear", "dynamic", "yarn", "longrope")
"""transformers' rope types tfspec computes."""


def scaling_data(rope: dict, kind: str, max_len: int, where: str) -> dict:
    """``positional`` fields (``scaling``, and ``max_len`` where the rule moves it) of a
    standardised rope dict of ``kind`` (not default) in a config whose max_position_embeddings
    is ``max_len``."""
    inside = f"{where}: rope_scaling"
    if kind == "linear":
        return {"scaling": {"type": kind, "factor": number(rope, "factor", inside, float)}}
    if kind == "dynamic":
        factor = number(rope, "factor", inside, float)
        return {"max_len": int(max_len * factor),
                "scaling": {"type": kind, "factor": factor, "original_max_position_embeddings": max_len}}
    original = number(rope, "original_max_position_embeddings", inside, default=max_len)
    scaling = {"type": kind, "original_max_position_embeddings": original}
    if kind == "llama3":
        return {"scaling": scaling | {k: number(rope, k, inside, float)
                                      for k in ("factor", "low_freq_factor", "high_freq_factor")}}
    optional = {k: number(rope, k, inside, float) for k in ("factor", "attention_factor") if rope.get(k) is not None}
    if kind == "longrope":
        return {"scaling": scaling | optional | {k: _factors(rope, k, inside) for k in ("short_factor", "long_factor")}}
    scaling |= {"factor": max_len / original, **optional, "truncate": flag(rope, "truncate", inside, True)}
    for key, unset in (("beta_fast", 32.0), ("beta_slow", 1.0)):  # transformers: `rope.get(key) or default`
        scaling[key] = number(rope, key, inside, float) if rope.get(key) else unset
    for key in ("mscale", "mscale_all_dim"):  # read only when both are set and nonzero
        if rope.get(key):
            scaling[key] = number(rope, key, inside, float)
    return {"scaling": scaling}


def _factors(rope: dict, key: str, where: str) -> list[float]:
    value = rope.get(key)
    if not isinstance(value, list) or not value:
        raise TfspecError(f"{where}: {key} must be a list of numbers (one per rotated pair), got {_show(value)}")
    return [number({key: v}, key, where, float) for v in value]


def scaling_config(positional) -> dict:
    """The config fields (``rope_scaling``, and ``max_position_embeddings`` for dynamic) that
    ``scaling_data`` reads back as ``positional``'s scaling; {} without one."""
    scaling = positional.scaling
    if scaling is None:
        return {}
    rope = {"rope_type": scaling.type, **scaling.model_dump(mode="json", exclude={"type"}, exclude_none=True)}
    if scaling.type != "dynamic":
        return {"rope_scaling": rope}
    return {"rope_scaling": {k: v for k, v in rope.items() if k != "original_max_position_embeddings"},
            "max_position_embeddings": scaling.original_max_position_embeddings}
